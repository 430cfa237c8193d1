package ledger

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/bulkhead-ai/bulkhead/queue"
)

func TestKeyPolicyStore(t *testing.T) {
	l := newLedger(t, 6)
	ctx := context.Background()
	hook := &queue.Webhook{URL: "https://hooks.example.com/a", Secret: "0123456789abcdef"}
	want := KeyPolicy{RequestsPerMinute: 60, MaxConcurrent: 2, DailyNeurons: 10.5, MonthlyNeurons: 200, Soft: true, Webhook: hook}
	if err := l.SetKeyPolicy(ctx, "acme", "app-1", want); err != nil {
		t.Fatal(err)
	}
	got, ok, err := l.KeyPolicy(ctx, "acme", "app-1")
	if err != nil || !ok || got.RequestsPerMinute != 60 || got.MaxConcurrent != 2 || got.DailyNeurons != 10.5 ||
		got.MonthlyNeurons != 200 || !got.Soft || got.Webhook == nil || *got.Webhook != *hook {
		t.Fatalf("KeyPolicy = %+v %v %v, want %+v", got, ok, err, want)
	}
	// Another tenant's key of the same name has no policy.
	if _, ok, err := l.KeyPolicy(ctx, "beta", "app-1"); ok || err != nil {
		t.Fatalf("beta's app-1: ok %v err %v", ok, err)
	}
	// Replacing drops fields not given.
	if err := l.SetKeyPolicy(ctx, "acme", "app-1", KeyPolicy{DailyNeurons: 3}); err != nil {
		t.Fatal(err)
	}
	if got, _, _ := l.KeyPolicy(ctx, "acme", "app-1"); got.Soft || got.Webhook != nil || got.RequestsPerMinute != 0 || got.DailyNeurons != 3 {
		t.Fatalf("after replace: %+v", got)
	}
	states, err := l.Keys(ctx, "acme", t0)
	if err != nil || len(states) != 1 || states[0].Key != "app-1" {
		t.Fatalf("Keys = %+v, %v", states, err)
	}
	if err := l.DeleteKeyPolicy(ctx, "acme", "app-1"); err != nil {
		t.Fatal(err)
	}
	if states, err := l.Keys(ctx, "acme", t0); err != nil || len(states) != 0 {
		t.Fatalf("Keys after delete = %+v, %v", states, err)
	}

	for name, p := range map[string]KeyPolicy{
		"negative rpm":     {RequestsPerMinute: -1},
		"huge concurrency": {MaxConcurrent: MaxPolicyConcurrency + 1},
		"negative budget":  {DailyNeurons: -1},
		"huge budget":      {MonthlyNeurons: 2e12},
		"http webhook":     {Webhook: &queue.Webhook{URL: "http://hooks.example.com", Secret: "0123456789abcdef"}},
		"short secret":     {Webhook: &queue.Webhook{URL: "https://hooks.example.com", Secret: "short"}},
		"wildcard subject": {EventSubject: "alerts.>"},
	} {
		if err := l.SetKeyPolicy(ctx, "acme", "k", p); !errors.Is(err, ErrPolicy) {
			t.Errorf("%s: err %v, want ErrPolicy", name, err)
		}
	}
	if err := l.SetKeyPolicy(ctx, "acme", "bad key!", KeyPolicy{}); !errors.Is(err, ErrPolicy) {
		t.Errorf("a bad key name: err %v, want ErrPolicy", err)
	}
	if err := l.SetKeyPolicy(ctx, "ac{me", "k", KeyPolicy{}); !errors.Is(err, ErrInvalidTenant) {
		t.Errorf("a bad tenant: err %v, want ErrInvalidTenant", err)
	}
}

// TestKeyAlertsOnce: each threshold of each budget is raised once, by the
// request that crossed it; a redelivery of that request reports it again,
// any other request does not; keys without a policy raise none.
func TestKeyAlertsOnce(t *testing.T) {
	l := newLedger(t, 6)
	ctx := context.Background()
	hook := &queue.Webhook{URL: "https://hooks.example.com/a", Secret: "0123456789abcdef"}
	if err := l.SetKeyPolicy(ctx, "acme", "app", KeyPolicy{DailyNeurons: 10, MonthlyNeurons: 40, Webhook: hook, EventSubject: "alerts.app"}); err != nil {
		t.Fatal(err)
	}
	raised := map[string]string{} // alert id -> request id
	for i := range 12 {           // 1 neuron each
		ev := event(fmt.Sprintf("r%d", i), "acme", "m1", t0, 1, 0, 1, 1_000_000, queue.OutcomeStop)
		ev.Key = "app"
		if ok, err := l.Record(ctx, ev); err != nil || !ok {
			t.Fatalf("Record %d: %v %v", i, ok, err)
		}
		alerts, wh, err := l.KeyAlerts(ctx, ev)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range alerts {
			if wh.Webhook == nil || *wh.Webhook != *hook || wh.Subject != "alerts.app" {
				t.Fatalf("alert %s without the key's webhook and subject: %+v", a.ID(), wh)
			}
			if by, ok := raised[a.ID()]; ok {
				t.Fatalf("alert %s raised again by %s (first by %s)", a.ID(), ev.RequestID, by)
			}
			raised[a.ID()] = ev.RequestID
			if a.Used*100 < a.Budget*float64(a.Threshold) {
				t.Fatalf("alert %+v below its threshold", a)
			}
		}
		// A redelivery of the same event reports the same alerts.
		again, _, err := l.KeyAlerts(ctx, ev)
		if err != nil || len(again) != len(alerts) {
			t.Fatalf("redelivered r%d: %d alerts (%v), want %d", i, len(again), err, len(alerts))
		}
	}
	day, month := t0.Format("2006-01-02"), t0.Format("2006-01")
	want := map[string]string{
		"alert-app-" + day + "-50": "r4", "alert-app-" + day + "-80": "r7", "alert-app-" + day + "-100": "r9",
		"alert-app-" + month + "-50": "", // 12 of 40: not reached
	}
	for id, by := range want {
		if raised[id] != by {
			t.Errorf("%s raised by %q, want %q", id, raised[id], by)
		}
	}
	if len(raised) != 3 {
		t.Errorf("raised %v, want the day's three", raised)
	}
	list, err := l.Alerts(ctx, "acme", 10)
	if err != nil || len(list) != 3 || list[0].Threshold != 100 || list[2].Threshold != 50 || list[0].RequestID != "r9" {
		t.Fatalf("Alerts = %+v, %v", list, err)
	}
	states, err := l.Keys(ctx, "acme", t0)
	if err != nil || len(states) != 1 || states[0].DayMicro != 12_000_000 || states[0].MonthMicro != 12_000_000 {
		t.Fatalf("Keys = %+v, %v", states, err)
	}

	// A key without a policy, and a request without a key, raise nothing.
	for _, key := range []string{"other", ""} {
		ev := event("x-"+key, "acme", "m1", t0, 1, 0, 1, 50_000_000, queue.OutcomeStop)
		ev.Key = key
		if _, err := l.Record(ctx, ev); err != nil {
			t.Fatal(err)
		}
		if alerts, _, err := l.KeyAlerts(ctx, ev); err != nil || len(alerts) != 0 {
			t.Fatalf("key %q: alerts %v, %v", key, alerts, err)
		}
	}
}

// TestKeyAnomaly: a request is flagged only when it costs over twice its
// key's p95 and over the tenant's p99, both known from enough requests;
// each request is compared once.
func TestKeyAnomaly(t *testing.T) {
	l := newLedger(t, 6)
	ctx := context.Background()
	n := 0
	send := func(key string, micro int64) (*queue.CostAnomaly, error) {
		n++
		ev := event(fmt.Sprintf("q%d", n), "acme", "m1", t0, 1, 0, 1, micro, queue.OutcomeStop)
		ev.Key = key
		if _, err := l.Record(ctx, ev); err != nil {
			return nil, err
		}
		a, _, err := l.KeyAnomaly(ctx, ev)
		return a, err
	}
	// Too few requests known: even a huge one is not flagged.
	for i := range AnomalyMinRequests {
		if a, err := send("app", 1_000_000+int64(i)); err != nil || a != nil {
			t.Fatalf("request %d: %+v %v", i, a, err)
		}
	}
	// 1.5x the usual cost is within twice the p95; 10x is not.
	if a, err := send("app", 1_500_000); err != nil || a != nil {
		t.Fatalf("1.5x: %+v %v", a, err)
	}
	a, err := send("app", 10_000_000)
	if err != nil || a == nil || a.Key != "app" || a.Neurons != 10 || a.KeyP95 < 1 || a.KeyP95 > 1.25 || a.TenantP99 < 1 {
		t.Fatalf("10x: %+v %v", a, err)
	}
	// A new key: too few of its own requests known.
	if a, err := send("new", 500_000_000); err != nil || a != nil {
		t.Fatalf("a new key's first request: %+v %v", a, err)
	}
	// A redelivery of the flagged request gets the same answer; nothing
	// is listed twice.
	ev := event(a.RequestID, "acme", "m1", t0, 1, 0, 1, 10_000_000, queue.OutcomeStop)
	ev.Key = "app"
	if again, _, err := l.KeyAnomaly(ctx, ev); err != nil || again == nil || again.RequestID != a.RequestID {
		t.Fatalf("redelivered: %+v %v", again, err)
	}
	list, err := l.Anomalies(ctx, "acme", 10)
	if err != nil || len(list) != 1 || list[0].RequestID != a.RequestID {
		t.Fatalf("Anomalies = %+v, %v", list, err)
	}
}

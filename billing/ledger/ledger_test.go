package ledger

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/bulkhead-ai/bulkhead/queue"
)

var t0 = time.Date(2026, 12, 1, 10, 30, 0, 0, time.UTC)

func event(id, tenant, model string, at time.Time, prompt, cached, completion int, micro int64, outcome string) *queue.UsageEvent {
	return &queue.UsageEvent{RequestID: id, Tenant: tenant, Model: model, Time: at, PromptTokens: prompt,
		CachedTokens: cached, CompletionTokens: completion, MicroNeurons: micro, Finish: outcome,
		TTFTMs: 40, TotalMs: 700, QueueMs: 3, WorkerID: "w1"}
}

func newLedger(t *testing.T, db int) *Ledger {
	t.Helper()
	l, err := New(newRedis(t, db), Config{})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestRecordOnce(t *testing.T) {
	l := newLedger(t, 1)
	ctx := context.Background()
	ev := event("r1", "acme", "m1", t0, 10, 4, 5, 1234, queue.OutcomeStop)

	// Many deliveries of one event at once: exactly one counts.
	var wg sync.WaitGroup
	var mu sync.Mutex
	counted := 0
	for range 32 {
		wg.Go(func() {
			ok, err := l.Record(ctx, ev)
			if err != nil {
				t.Error(err)
			}
			if ok {
				mu.Lock()
				counted++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if counted != 1 {
		t.Fatalf("%d deliveries counted, want 1", counted)
	}
	rep, err := l.Query(ctx, Query{Tenant: "acme", From: t0.Add(-time.Hour), To: t0.Add(time.Hour), Granularity: Hour})
	if err != nil {
		t.Fatal(err)
	}
	want := Totals{Requests: 1, PromptTokens: 10, CachedTokens: 4, CompletionTokens: 5, MicroNeurons: 1234,
		Outcomes: map[string]int64{queue.OutcomeStop: 1}}
	if fmt.Sprint(rep.Totals) != fmt.Sprint(want) {
		t.Fatalf("totals %+v, want %+v", rep.Totals, want)
	}
	if day, err := l.DayMicro(ctx, "acme", t0); err != nil || day != 1234 {
		t.Fatalf("day total %d, %v; want 1234", day, err)
	}
}

func TestChargedClaimIsShared(t *testing.T) {
	l := newLedger(t, 2)
	ctx := context.Background()
	// The quota charged r1 when it ended (same claim key, same total).
	if err := l.rdb.Set(ctx, ChargedKey("acme", "r1"), "1", time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	if err := l.rdb.IncrBy(ctx, DayNeuronsKey("acme", t0), 500).Err(); err != nil {
		t.Fatal(err)
	}
	if ok, err := l.Record(ctx, event("r1", "acme", "m1", t0, 1, 0, 1, 500, queue.OutcomeLength)); err != nil || !ok {
		t.Fatalf("Record: %v %v", ok, err)
	}
	if ok, err := l.Record(ctx, event("r2", "acme", "m1", t0, 1, 0, 1, 700, queue.OutcomeCancelled)); err != nil || !ok {
		t.Fatalf("Record: %v %v", ok, err)
	}
	day, err := l.DayMicro(ctx, "acme", t0)
	if err != nil || day != 1200 {
		t.Fatalf("day total %d, %v; want 1200 (r1 once, r2)", day, err)
	}
	rep, err := l.Query(ctx, Query{Tenant: "acme", From: t0, To: t0.Add(time.Minute), Granularity: Day})
	if err != nil || rep.Totals.MicroNeurons != day {
		t.Fatalf("rollup %+v, %v; want the day total %d", rep.Totals, err, day)
	}
}

func TestQuery(t *testing.T) {
	l := newLedger(t, 3)
	ctx := context.Background()
	evs := []*queue.UsageEvent{
		event("a", "acme", "m1", t0, 10, 0, 5, 100, queue.OutcomeStop),
		event("b", "acme", "m2", t0.Add(10*time.Minute), 20, 5, 6, 200, queue.OutcomeLength),
		event("c", "acme", "m1", t0.Add(time.Hour), 30, 0, 7, 300, queue.OutcomeCancelled),
		event("d", "acme", "m1", t0.Add(26*time.Hour), 40, 0, 8, 400, queue.OutcomeTimeout),
		event("e", "other", "m1", t0, 1000, 0, 1000, 9999, queue.OutcomeStop),
		event("f", "acme", "m1", t0, 1, 0, 1, 1, "something new"),
	}
	for _, ev := range evs {
		if _, err := l.Record(ctx, ev); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name     string
		q        Query
		requests int64
		micro    int64
		points   int
		err      error
	}{
		{"hours, all models", Query{From: t0.Add(-time.Hour), To: t0.Add(2 * time.Hour), Granularity: Hour}, 4, 601, 3, nil},
		{"hours, one model", Query{From: t0.Add(-time.Hour), To: t0.Add(2 * time.Hour), Granularity: Hour, Model: "m2"}, 1, 200, 1, nil},
		{"days", Query{From: t0, To: t0.Add(48 * time.Hour), Granularity: Day}, 5, 1001, 3, nil},
		{"from inside the hour rounds down", Query{From: t0.Add(20 * time.Minute), To: t0.Add(21 * time.Minute), Granularity: Hour}, 3, 301, 2, nil},
		{"an empty range", Query{From: t0.Add(5 * 24 * time.Hour), To: t0.Add(6 * 24 * time.Hour), Granularity: Hour}, 0, 0, 0, nil},
		{"inverted range", Query{From: t0, To: t0.Add(-time.Hour), Granularity: Hour}, 0, 0, 0, ErrQuery},
		{"too many hours", Query{From: t0, To: t0.Add(40 * 24 * time.Hour), Granularity: Hour}, 0, 0, 0, ErrQuery},
		{"bad granularity", Query{From: t0, To: t0.Add(time.Hour), Granularity: "week"}, 0, 0, 0, ErrQuery},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.q.Tenant = "acme"
			rep, err := l.Query(ctx, tt.q)
			if !errors.Is(err, tt.err) {
				t.Fatalf("err %v, want %v", err, tt.err)
			}
			if err != nil {
				return
			}
			if rep.Totals.Requests != tt.requests || rep.Totals.MicroNeurons != tt.micro || len(rep.Series) != tt.points {
				t.Fatalf("totals %+v with %d points, want %d requests, %d micro-neurons, %d points", rep.Totals, len(rep.Series), tt.requests, tt.micro, tt.points)
			}
			var sum int64
			for _, p := range rep.Series {
				sum += p.MicroNeurons
			}
			if sum != rep.Totals.MicroNeurons {
				t.Fatalf("series sum %d, totals %d", sum, rep.Totals.MicroNeurons)
			}
		})
	}
	rep, err := l.Query(ctx, Query{Tenant: "acme", From: t0, To: t0.Add(time.Hour), Granularity: Hour})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Totals.Outcomes[queue.OutcomeError] != 1 {
		t.Errorf("an unknown outcome counts as error: %v", rep.Totals.Outcomes)
	}
	if p, ok := rep.Total.Percentile(50); !ok || p != 1000 {
		t.Errorf("p50 total %d %v, want the 1000 ms bucket", p, ok)
	}
	if p, ok := rep.TTFT.Percentile(99); !ok || p != 50 {
		t.Errorf("p99 ttft %d %v, want the 50 ms bucket", p, ok)
	}
}

func TestRecentPages(t *testing.T) {
	l := newLedger(t, 4)
	ctx := context.Background()
	for i := range 7 {
		if _, err := l.Record(ctx, event(fmt.Sprintf("r%d", i), "acme", "m1", t0.Add(time.Duration(i)*time.Second), 1, 0, 1, 1, queue.OutcomeStop)); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	cursor := ""
	for pages := 0; ; pages++ {
		evs, next, err := l.Recent(ctx, "acme", 3, cursor)
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range evs {
			got = append(got, ev.RequestID)
		}
		if next == "" {
			break
		}
		if pages > 5 {
			t.Fatal("paging does not end")
		}
		cursor = next
	}
	if fmt.Sprint(got) != "[r6 r5 r4 r3 r2 r1 r0]" {
		t.Fatalf("pages %v, want newest first, each once", got)
	}
	if evs, _, err := l.Recent(ctx, "other", 3, ""); err != nil || len(evs) != 0 {
		t.Fatalf("another tenant's recent requests: %v %v", evs, err)
	}
	if _, _, err := l.Recent(ctx, "acme", 3, "nope"); !errors.Is(err, ErrQuery) {
		t.Fatalf("bad cursor: %v", err)
	}
}

func TestRecordRefuses(t *testing.T) {
	l := newLedger(t, 5)
	for name, ev := range map[string]*queue.UsageEvent{
		"bad tenant":      event("x", "a}b", "m", t0, 1, 0, 1, 1, queue.OutcomeStop),
		"no request id":   event("", "acme", "m", t0, 1, 0, 1, 1, queue.OutcomeStop),
		"negative tokens": event("x", "acme", "m", t0, -1, 0, 1, 1, queue.OutcomeStop),
	} {
		t.Run(name, func(t *testing.T) {
			if ok, err := l.Record(context.Background(), ev); err == nil || ok {
				t.Fatalf("Record = %v, %v; want an error", ok, err)
			}
		})
	}
}

// TestSpendByKeyAndTag: each request's tallies also go to its API key
// ("" without one) and to each of its metadata tags, over all models, and
// none of them shows up as a model in the series.
func TestSpendByKeyAndTag(t *testing.T) {
	l := newLedger(t, 9)
	ctx := context.Background()
	for i, c := range []struct {
		key, model string
		micro      int64
		meta       map[string]string
	}{
		{"ci", "m1", 100, map[string]string{"app": "search"}},
		{"ci", "m2", 200, map[string]string{"app": "search", "env": "dev"}},
		{"prod", "m1", 1000, map[string]string{"app": "chat|bot"}},
		{"", "m1", 7, nil},
	} {
		ev := event(fmt.Sprintf("k%d", i), "acme", c.model, t0, 10, 2, 5, c.micro, queue.OutcomeStop)
		ev.Key, ev.Metadata = c.key, c.meta
		if _, err := l.Record(ctx, ev); err != nil {
			t.Fatal(err)
		}
	}
	for _, g := range []Granularity{Hour, Day} {
		rep, err := l.Query(ctx, Query{Tenant: "acme", From: t0.Add(-time.Hour), To: t0.Add(time.Hour), Granularity: g})
		if err != nil {
			t.Fatal(err)
		}
		if rep.Keys["ci"].MicroNeurons != 300 || rep.Keys["ci"].Requests != 2 || rep.Keys["prod"].MicroNeurons != 1000 ||
			rep.Keys[""].MicroNeurons != 7 || len(rep.Keys) != 3 || rep.Keys["ci"].PromptTokens != 20 || rep.Keys["ci"].CompletionTokens != 10 {
			t.Errorf("%s: keys %+v", g, rep.Keys)
		}
		if rep.Tags["app=search"].MicroNeurons != 300 || rep.Tags["env=dev"].Requests != 1 || rep.Tags["app=chat|bot"].MicroNeurons != 1000 || len(rep.Tags) != 3 {
			t.Errorf("%s: tags %+v", g, rep.Tags)
		}
		if len(rep.Models) != 2 || rep.Totals.MicroNeurons != 1307 {
			t.Errorf("%s: models %v, totals %+v: key and tag tallies leaked into the models", g, rep.Models, rep.Totals)
		}
	}
}

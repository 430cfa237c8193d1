package meter

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/bulkhead-ai/bulkhead/billing/export"
	"github.com/bulkhead-ai/bulkhead/billing/ledger"
	"github.com/bulkhead-ai/bulkhead/models/testkit"
	"github.com/bulkhead-ai/bulkhead/models/testkit/promtest"
	"github.com/bulkhead-ai/bulkhead/models/testkit/redistest"
	"github.com/bulkhead-ai/bulkhead/queue"
	"github.com/bulkhead-ai/bulkhead/queue/queuetest"
)

var redisAddr string

func TestMain(m *testing.M) { redistest.Main(m, &redisAddr) }

// TestMeterCountsEachEventOnce: events published (some twice, some counted
// by an earlier meter that died before acking) are counted exactly once
// across meters stopped and restarted while events keep arriving.
func TestMeterCountsEachEventOnce(t *testing.T) {
	srv := queuetest.Server(t)
	_, js := queuetest.JetStream(t, srv.ClientURL())
	ctx := context.Background()
	if err := queue.Setup(ctx, js, queue.StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	l, err := ledger.New(redistest.Client(t, redisAddr, 0), ledger.Config{})
	if err != nil {
		t.Fatal(err)
	}
	at := time.Now().UTC()
	ev := func(i int) *queue.UsageEvent {
		return &queue.UsageEvent{RequestID: fmt.Sprintf("req-%d", i), Tenant: "acme", Model: "m", Time: at,
			PromptTokens: 10, CompletionTokens: i % 7, MicroNeurons: int64(1000 + i), Finish: queue.OutcomeStop}
	}
	const n = 300
	var want int64
	for i := range n {
		want += int64(1000 + i)
	}

	// An earlier meter counted req-0..9 and died before acking them.
	for i := range 10 {
		if _, err := l.Record(ctx, ev(i)); err != nil {
			t.Fatal(err)
		}
	}
	var pub sync.WaitGroup
	pub.Go(func() {
		for i := range n {
			if err := queue.PublishUsage(ctx, js, ev(i)); err != nil {
				t.Error(err)
				return
			}
			if i%2 == 0 {
				// A copy the stream cannot de-duplicate (no message id,
				// as after the window): the ledger must.
				b, _ := json.Marshal(ev(i))
				if _, err := js.Publish(ctx, queue.UsageSubject("acme"), b); err != nil {
					t.Error(err)
					return
				}
			}
		}
	})
	// Meters come and go while events arrive.
	for round := range 5 {
		m, err := New(nil, js, l, Config{Batch: 16, FetchWait: 50 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		rctx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- m.Run(rctx) }()
		testkit.Poll(t, 10*time.Second, func() error {
			if m.Stats().Counted+m.Stats().Duplicates == 0 {
				return fmt.Errorf("round %d: meter counted nothing yet", round)
			}
			return nil
		})
		stop()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	pub.Wait()
	m, err := New(nil, js, l, Config{FetchWait: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- m.Run(rctx) }()
	defer func() { stop(); <-done }()
	testkit.Poll(t, 20*time.Second, func() error {
		rep, err := l.Query(ctx, ledger.Query{Tenant: "acme", From: at.Add(-time.Hour), To: at.Add(time.Hour), Granularity: ledger.Hour})
		if err != nil {
			return err
		}
		s, err := js.Stream(ctx, queue.UsageStream)
		if err != nil {
			return err
		}
		if left := s.CachedInfo().State.Msgs; left != 0 || rep.Totals.Requests != n {
			return fmt.Errorf("%d requests counted, %d events left in the stream; want %d and 0", rep.Totals.Requests, left, n)
		}
		if rep.Totals.MicroNeurons != want {
			t.Fatalf("%d micro-neurons counted, want %d", rep.Totals.MicroNeurons, want)
		}
		return nil
	})
	if day, err := l.DayMicro(ctx, "acme", at); err != nil || day != want {
		t.Fatalf("day total %d, %v; want %d", day, err, want)
	}
	// Each counted event is on the export stream once, as a CloudEvent,
	// though some were counted twice over: the copies had the same
	// Nats-Msg-Id, within the de-duplication window.
	xs, err := js.Stream(ctx, queue.ExportStream)
	if err != nil {
		t.Fatal(err)
	}
	if got := xs.CachedInfo().State.Msgs; got != n {
		t.Fatalf("the export stream holds %d events, want %d", got, n)
	}
	cons, err := queue.ExportConsumer(ctx, js, "check", "acme", false, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for len(seen) < n {
		batch, err := cons.Fetch(100, jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		got := 0
		for msg := range batch.Messages() {
			got++
			ce, u, err := export.Decode(msg.Data())
			if err != nil {
				t.Fatal(err)
			}
			if seen[u.RequestID] || ce.Source() != export.DefaultSource || u.Tenant != "acme" {
				t.Fatalf("export %s: seen %v, source %q, tenant %q", u.RequestID, seen[u.RequestID], ce.Source(), u.Tenant)
			}
			seen[u.RequestID] = true
		}
		if got == 0 {
			t.Fatalf("read %d of %d exported events", len(seen), n)
		}
	}
}

// TestMeterTerminatesBadEvents: an undecodable event is dropped, not retried.
func TestMeterTerminatesBadEvents(t *testing.T) {
	srv := queuetest.Server(t)
	nc, js := queuetest.JetStream(t, srv.ClientURL())
	ctx := context.Background()
	if err := queue.Setup(ctx, js, queue.StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	l, err := ledger.New(redistest.Client(t, redisAddr, 1), ledger.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, queue.UsagePrefix+"x", []byte("{not json")); err != nil {
		t.Fatal(err)
	}
	_ = nc
	m, err := New(nil, js, l, Config{FetchWait: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- m.Run(rctx) }()
	testkit.Poll(t, 10*time.Second, func() error {
		if m.Stats().Rejected != 1 {
			return fmt.Errorf("stats %+v", m.Stats())
		}
		return nil
	})
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestRegisterMetrics: the meter's counts are exported by result.
func TestRegisterMetrics(t *testing.T) {
	srv := queuetest.Server(t)
	_, js := queuetest.JetStream(t, srv.ClientURL())
	l, err := ledger.New(redistest.Client(t, redisAddr, 2), ledger.Config{})
	if err != nil {
		t.Fatal(err)
	}
	m, err := New(nil, js, l, Config{})
	if err != nil {
		t.Fatal(err)
	}
	m.count(func(s *Stats) { s.Counted, s.Duplicates, s.Rejected, s.Retried = 4, 3, 2, 1 })
	reg := prometheus.NewRegistry()
	if err := m.RegisterMetrics(reg); err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, series := range promtest.Gather(t, reg) {
		got[series.Name+"/"+series.Labels["result"]] = series.Value
	}
	want := map[string]float64{"bulkhead_billing_events_total/counted": 4, "bulkhead_billing_events_total/duplicate": 3,
		"bulkhead_billing_events_total/rejected": 2, "bulkhead_billing_events_total/retried": 1}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("gathered %v, want %v", got, want)
	}
}

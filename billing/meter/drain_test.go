package meter

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/bulkhead-ai/bulkhead/models/testkit"
	"github.com/bulkhead-ai/bulkhead/queue"
	"github.com/bulkhead-ai/bulkhead/queue/queuetest"
)

// stuckLedger counts events, but while stuck each Record waits for its
// context to end (a ledger that stopped answering).
type stuckLedger struct {
	mu      sync.Mutex // guards stuck, entered, counted
	stuck   bool
	entered int
	counted map[string]int
}

func (l *stuckLedger) Record(ctx context.Context, ev *queue.UsageEvent) (bool, error) {
	l.mu.Lock()
	l.entered++
	stuck := l.stuck
	l.mu.Unlock()
	if stuck {
		<-ctx.Done()
		return false, ctx.Err()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.counted[ev.RequestID]++
	return l.counted[ev.RequestID] == 1, nil
}

func (l *stuckLedger) state() (entered int, counted map[string]int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := map[string]int{}
	for k, v := range l.counted {
		c[k] = v
	}
	return l.entered, c
}

// TestMeterDrainHandsBack: a meter stopped while its ledger hangs gives up
// after its grace, hands the rest of its batch back uncounted and returns;
// nothing was acknowledged, and the next meter counts every event once.
func TestMeterDrainHandsBack(t *testing.T) {
	srv := queuetest.Server(t)
	_, js := queuetest.JetStream(t, srv.ClientURL())
	ctx := context.Background()
	if err := queue.Setup(ctx, js, queue.StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	const n = 8
	for i := range n {
		ev := &queue.UsageEvent{RequestID: fmt.Sprintf("req-%d", i), Tenant: "acme", Model: "m", Time: time.Now().UTC(),
			PromptTokens: 1, MicroNeurons: 10, Finish: queue.OutcomeStop}
		if err := queue.PublishUsage(ctx, js, ev); err != nil {
			t.Fatal(err)
		}
	}
	l := &stuckLedger{stuck: true, counted: map[string]int{}}
	m, err := New(nil, js, l, Config{Batch: n, FetchWait: 100 * time.Millisecond, RetryDelay: 10 * time.Millisecond, Grace: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- m.Run(rctx) }()
	testkit.Poll(t, 10*time.Second, func() error {
		if e, _ := l.state(); e == 0 {
			return fmt.Errorf("the meter has not reached the ledger yet")
		}
		return nil
	})
	stop()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its grace")
	}
	st := m.Stats()
	if st.Counted != 0 || st.Retried != 1 || st.HandedBack != n-1 {
		t.Fatalf("stats %+v, want 1 retried and %d handed back, none counted", st, n-1)
	}

	l.mu.Lock()
	l.stuck = false
	l.mu.Unlock()
	next, err := New(nil, js, l, Config{FetchWait: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	rctx, stop = context.WithCancel(ctx)
	go func() { done <- next.Run(rctx) }()
	defer func() { stop(); <-done }()
	testkit.Poll(t, 10*time.Second, func() error {
		if _, c := l.state(); len(c) != n {
			return fmt.Errorf("%d of %d events counted", len(c), n)
		}
		return nil
	})
	for id, times := range func() map[string]int { _, c := l.state(); return c }() {
		if times != 1 {
			t.Errorf("%s counted %d times", id, times)
		}
	}
}

package quota

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/bulkhead-ai/bulkhead/billing/ledger"
	"github.com/bulkhead-ai/bulkhead/queue"
)

// TestBudgetFromTheLedger: the budget is checked against the ledger's day
// total, which the quota's release and billing's count of usage events both
// add to, each request once; a tenant at the budget is refused until 00:00
// UTC.
func TestBudgetFromTheLedger(t *testing.T) {
	clk := newClock(time.Date(2027, 5, 4, 22, 0, 0, 0, time.UTC))
	rdb := newRedis(t)
	q := newQuota(t, rdb, Config{DailyNeurons: 1, Now: clk.Now})
	l, err := ledger.New(rdb, ledger.Config{Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	usage := func(id string, micro int64) *queue.UsageEvent {
		return &queue.UsageEvent{RequestID: id, Tenant: "acme", Model: "m", Time: clk.Now(), PromptTokens: 1,
			CompletionTokens: 1, MicroNeurons: micro, Finish: queue.OutcomeStop}
	}
	used := func(t *testing.T) float64 {
		t.Helper()
		n, err := q.Used(ctx, "acme", clk.Now())
		if err != nil {
			t.Fatal(err)
		}
		micro, err := l.DayMicro(ctx, "acme", clk.Now())
		if err != nil {
			t.Fatal(err)
		}
		if n*1e6 != float64(micro) {
			t.Fatalf("quota sees %v neurons, ledger %d micro-neurons", n, micro)
		}
		return n
	}

	// A completed request: the edge charges it when it ends, and billing's
	// count of its event later adds nothing more.
	release, err := q.Acquire(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	release(Usage{Neurons: 0.5, RequestID: "r1"})
	if _, err := l.Record(ctx, usage("r1", 500_000)); err != nil {
		t.Fatal(err)
	}
	if n := used(t); n != 0.5 {
		t.Fatalf("used %v after r1, want 0.5", n)
	}
	// A request cancelled mid-stream: only its usage event charges it.
	if _, err := l.Record(ctx, usage("r2", 400_000)); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Record(ctx, usage("r2", 400_000)); err != nil {
		t.Fatal(err)
	}
	if n := used(t); n != 0.9 {
		t.Fatalf("used %v after r2, want 0.9", n)
	}
	release, err = q.Acquire(ctx, "acme")
	if err != nil {
		t.Fatalf("under budget: %v", err)
	}
	release(Usage{Neurons: 0.2, RequestID: "r3"})
	release(Usage{Neurons: 0.2, RequestID: "r3"}) // a second release does nothing
	if n := used(t); n != 1.1 {
		t.Fatalf("used %v after r3, want 1.1", n)
	}
	_, err = q.Acquire(ctx, "acme")
	var le *LimitError
	if !errors.Is(err, ErrBudgetExhausted) || !errors.As(err, &le) || le.RetryAfter != 2*time.Hour {
		t.Fatalf("at budget: %v, want ErrBudgetExhausted retrying at 00:00 UTC", err)
	}
	clk.Set(time.Date(2027, 5, 4, 23, 59, 59, 0, time.UTC))
	if _, err := q.Acquire(ctx, "acme"); !errors.Is(err, ErrBudgetExhausted) {
		t.Fatalf("a second before midnight: %v", err)
	}
	clk.Set(time.Date(2027, 5, 5, 0, 0, 0, 0, time.UTC))
	if _, err := q.Acquire(ctx, "acme"); err != nil {
		t.Fatalf("at 00:00 UTC the budget is new: %v", err)
	}
}

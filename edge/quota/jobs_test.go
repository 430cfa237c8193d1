package quota

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bulkhead-ai/bulkhead/billing/price"
)

func ids(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	return out
}

// limitOf returns err's *LimitError, failing the test unless it wraps want.
func limitOf(t *testing.T, err, want error) *LimitError {
	t.Helper()
	var le *LimitError
	if !errors.Is(err, want) || !errors.As(err, &le) {
		t.Fatalf("got %v, want a LimitError wrapping %v", err, want)
	}
	return le
}

// TestAcquireJobsConcurrency: every job of a batch takes a slot of the
// concurrency limit; a batch that does not fit whole is refused whole, and
// slots come back by ReleaseJobs (an async job ended), by the release func,
// or when their lease expires (nobody saw the job end).
func TestAcquireJobsConcurrency(t *testing.T) {
	clk := newClock(t0)
	q := newQuota(t, newRedis(t), Config{MaxConcurrent: 2, Now: clk.Now})
	ctx := context.Background()
	const ttl = 3 * time.Minute
	le := limitOf(t, errOnly(q.AcquireJobs(ctx, "acme", Jobs{IDs: ids("big", 3), LeaseTTL: ttl})), ErrConcurrency)
	if le.InUse != 0 || le.Requested != 3 || le.Limit != 2 {
		t.Errorf("refusal %+v, want 0 in use, 3 requested, limit 2", le)
	}
	release, err := q.AcquireJobs(ctx, "acme", Jobs{IDs: ids("b1", 2), LeaseTTL: ttl})
	if err != nil {
		t.Fatalf("a batch of 2 under a limit of 2: %v", err)
	}
	le = limitOf(t, errOnly(q.Acquire(ctx, "acme")), ErrConcurrency)
	if le.InUse != 2 {
		t.Errorf("in use %d, want 2", le.InUse)
	}
	if _, err := q.Acquire(ctx, "other"); err != nil {
		t.Errorf("another tenant refused: %v", err)
	}
	if err := q.ReleaseJobs(ctx, "acme", "b1-0"); err != nil {
		t.Fatal(err)
	}
	if err := q.ReleaseJobs(ctx, "acme", "b1-0", "never-leased"); err != nil {
		t.Fatalf("releasing again: %v", err)
	}
	r2, err := q.Acquire(ctx, "acme")
	if err != nil {
		t.Fatalf("after one job ended: %v", err)
	}
	limitOf(t, errOnly(q.Acquire(ctx, "acme")), ErrConcurrency)
	release(Usage{}) // gives back b1-1 (b1-0 is gone already)
	r2(Usage{})
	if _, err := q.AcquireJobs(ctx, "acme", Jobs{IDs: ids("b2", 2), LeaseTTL: ttl}); err != nil {
		t.Fatalf("after the release funcs: %v", err)
	}
	clk.Add(ttl - time.Second)
	limitOf(t, errOnly(q.Acquire(ctx, "acme")), ErrConcurrency)
	clk.Add(2 * time.Second)
	if _, err := q.AcquireJobs(ctx, "acme", Jobs{IDs: ids("b3", 2)}); err != nil {
		t.Fatalf("leases past their TTL still count: %v", err)
	}
}

// TestAcquireJobsQueueBound: a class's MaxQueued bounds the tenant's leases
// with ErrQueueBound and a retry hint, on its own (no concurrency limit) or
// under a looser concurrency limit, per tenant.
func TestAcquireJobsQueueBound(t *testing.T) {
	for _, maxc := range []int{0, 10} {
		t.Run(fmt.Sprintf("max concurrent %d", maxc), func(t *testing.T) {
			q := newQuota(t, newRedis(t), Config{MaxConcurrent: maxc, Now: newClock(t0).Now})
			ctx := context.Background()
			release, err := q.AcquireJobs(ctx, "acme", Jobs{IDs: ids("a", 3), MaxQueued: 4})
			if err != nil {
				t.Fatal(err)
			}
			le := limitOf(t, errOnly(q.AcquireJobs(ctx, "acme", Jobs{IDs: ids("b", 2), MaxQueued: 4})), ErrQueueBound)
			if le.InUse != 3 || le.Requested != 2 || le.Limit != 4 || le.RetryAfter != QueueRetryAfter {
				t.Errorf("refusal %+v", le)
			}
			if _, err := q.AcquireJobs(ctx, "acme", Jobs{IDs: ids("c", 1), MaxQueued: 4}); err != nil {
				t.Errorf("one more job up to the bound: %v", err)
			}
			if _, err := q.AcquireJobs(ctx, "other", Jobs{IDs: ids("a", 4), MaxQueued: 4}); err != nil {
				t.Errorf("another tenant refused: %v", err)
			}
			release(Usage{})
			if _, err := q.AcquireJobs(ctx, "acme", Jobs{IDs: ids("b", 3), MaxQueued: 4}); err != nil {
				t.Errorf("after the release: %v", err)
			}
		})
	}
}

// TestAcquireJobsRate: each job is one request of the rate window.
func TestAcquireJobsRate(t *testing.T) {
	clk := newClock(t0)
	q := newQuota(t, newRedis(t), Config{RequestsPerMinute: 5, Now: clk.Now})
	ctx := context.Background()
	if _, err := q.AcquireJobs(ctx, "acme", Jobs{IDs: ids("a", 3)}); err != nil {
		t.Fatal(err)
	}
	clk.Add(10 * time.Second)
	le := limitOf(t, errOnly(q.AcquireJobs(ctx, "acme", Jobs{IDs: ids("b", 3)})), ErrRateLimited)
	if le.RetryAfter != 50*time.Second {
		t.Errorf("retry after %v, want 50s (when the first of a leaves the window)", le.RetryAfter)
	}
	le = limitOf(t, errOnly(q.AcquireJobs(ctx, "acme", Jobs{IDs: ids("c", 6)})), ErrRateLimited)
	if le.RetryAfter != 0 {
		t.Errorf("a batch over the limit itself: retry after %v, want none", le.RetryAfter)
	}
	if _, err := q.AcquireJobs(ctx, "acme", Jobs{IDs: ids("d", 2)}); err != nil {
		t.Errorf("2 more up to the limit: %v", err)
	}
}

func TestAcquireJobsRefusesBadJobs(t *testing.T) {
	q := newQuota(t, newRedis(t), Config{MaxConcurrent: 5})
	for _, tc := range []struct {
		name string
		jobs Jobs
	}{
		{"no ids", Jobs{}},
		{"empty id", Jobs{IDs: []string{""}}},
		{"repeated id", Jobs{IDs: []string{"a", "a"}}},
		{"too many", Jobs{IDs: ids("x", MaxJobsPerCall+1)}},
		{"negative ttl", Jobs{IDs: ids("x", 1), LeaseTTL: -time.Second}},
		{"negative bound", Jobs{IDs: ids("x", 1), MaxQueued: -1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := q.AcquireJobs(context.Background(), "acme", tc.jobs); err == nil {
				t.Error("accepted")
			}
		})
	}
}

func errOnly(_ func(Usage), err error) error { return err }

// TestAcquireJobsRecords: MaxRecords bounds a tenant's async records kept
// (ErrAsyncRecords with the numbers and when the oldest expires), per
// tenant, whatever became of the jobs' leases; a release (the batch was not
// queued) takes its entries back, and entries expire with RecordTTL.
func TestAcquireJobsRecords(t *testing.T) {
	clk := newClock(t0)
	q := newQuota(t, newRedis(t), Config{Now: clk.Now})
	ctx := context.Background()
	const ttl = 24 * time.Hour
	jobs := func(prefix string, n int) Jobs { return Jobs{IDs: ids(prefix, n), MaxRecords: 3, RecordTTL: ttl} }
	if _, err := q.AcquireJobs(ctx, "acme", jobs("a", 2)); err != nil {
		t.Fatal(err)
	}
	if err := q.ReleaseJobs(ctx, "acme", ids("a", 2)...); err != nil { // the jobs ended; their records stay
		t.Fatal(err)
	}
	clk.Add(time.Hour)
	le := limitOf(t, errOnly(q.AcquireJobs(ctx, "acme", jobs("b", 2))), ErrAsyncRecords)
	if le.InUse != 2 || le.Requested != 2 || le.Limit != 3 || le.RetryAfter != ttl-time.Hour {
		t.Errorf("refusal %+v, want 2 kept, 2 requested, limit 3, retry in 23h", le)
	}
	le = limitOf(t, errOnly(q.AcquireJobs(ctx, "acme", jobs("huge", 4))), ErrAsyncRecords)
	if le.RetryAfter != 0 {
		t.Errorf("a batch over the bound itself: retry %v, want none", le.RetryAfter)
	}
	if _, err := q.AcquireJobs(ctx, "other", jobs("o", 3)); err != nil {
		t.Errorf("another tenant refused: %v", err)
	}
	release, err := q.AcquireJobs(ctx, "acme", jobs("c", 1))
	if err != nil {
		t.Fatal(err)
	}
	limitOf(t, errOnly(q.AcquireJobs(ctx, "acme", jobs("d", 1))), ErrAsyncRecords)
	release(Usage{}) // the batch was not queued after all
	if _, err := q.AcquireJobs(ctx, "acme", jobs("e", 1)); err != nil {
		t.Fatalf("after a release: %v", err)
	}
	clk.Add(ttl - time.Hour + time.Second) // a's records expire; e's remains
	if _, err := q.AcquireJobs(ctx, "acme", jobs("f", 2)); err != nil {
		t.Fatalf("records past their TTL still count: %v", err)
	}
}

// TestReserveBoundsOverspend: under a daily budget each admitted job
// reserves its worst case atomically with the check, so 24 concurrent
// requests of worst case 10 against a budget of 50 end the day within one
// worst case of it (the red team's 832 of 50 before); a batch is admitted
// while all its jobs but the costliest fit; a reservation comes back with
// its job's release, ReleaseJobs, or its lease's expiry.
func TestReserveBoundsOverspend(t *testing.T) {
	clk := newClock(t0)
	q := newQuota(t, newRedis(t), Config{DailyNeurons: 50, Now: clk.Now})
	ctx := context.Background()
	worst := func(n int, neurons float64) []int64 {
		w := make([]int64, n)
		for i := range w {
			w[i] = price.ToMicro(neurons)
		}
		return w
	}
	used := func(tenant string) float64 {
		t.Helper()
		u, err := q.Used(ctx, tenant, clk.Now())
		if err != nil {
			t.Fatal(err)
		}
		return u
	}
	const n = 24
	var wg sync.WaitGroup
	var admitted atomic.Int32
	for i := range n {
		wg.Go(func() {
			id := fmt.Sprintf("req-%d", i)
			release, err := q.AcquireJobs(ctx, "acme", Jobs{IDs: []string{id}})
			if errors.Is(err, ErrBudgetExhausted) {
				return // the others' reservations reached the budget already
			}
			if err != nil {
				t.Errorf("acquire %d: %v", i, err)
				return
			}
			if err := q.Reserve(ctx, "acme", "", []string{id}, worst(1, 10)); err != nil {
				limitOf(t, err, ErrBudgetExhausted)
				release(Usage{})
				return
			}
			admitted.Add(1)
			release(Usage{Neurons: 8, RequestID: id}) // it ran, for less than its worst case
		})
	}
	wg.Wait()
	a, u := admitted.Load(), used("acme")
	if a < 5 || u != 8*float64(a) || u > 50+10 {
		t.Errorf("%d of %d concurrent requests admitted, the day ended at %v neurons; want at least 5, 8 each, at most 60", a, n, u)
	}
	// Reserved 40: a batch of 3 x 10 is not admitted (40 + 20 >= 50), one
	// of 2 x 4 is (40 + 4 < 50).
	if err := q.Reserve(ctx, "beta", "", []string{"big"}, worst(1, 40)); err != nil {
		t.Fatal(err)
	}
	limitOf(t, q.Reserve(ctx, "beta", "", ids("b3", 3), worst(3, 10)), ErrBudgetExhausted)
	if _, err := q.AcquireJobs(ctx, "beta", Jobs{IDs: ids("b2", 2)}); err != nil {
		t.Fatal(err)
	}
	if err := q.Reserve(ctx, "beta", "", ids("b2", 2), worst(2, 4)); err != nil {
		t.Fatalf("a batch of 2: %v", err)
	}
	if u := used("beta"); u != 48 {
		t.Errorf("with the batch reserved: %v neurons, want 48", u)
	}
	if err := q.ReleaseJobs(ctx, "beta", ids("b2", 2)...); err != nil { // the jobs ended; billing charges them
		t.Fatal(err)
	}
	if u := used("beta"); u != 40 {
		t.Errorf("after the batch ended: %v neurons, want 40", u)
	}
	// A reservation whose edge never released it comes back with its lease.
	if _, err := q.AcquireJobs(ctx, "beta", Jobs{IDs: []string{"lost"}, LeaseTTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if err := q.Reserve(ctx, "beta", "", []string{"lost"}, worst(1, 5)); err != nil {
		t.Fatal(err)
	}
	clk.Add(2 * time.Minute)
	if _, err := q.AcquireJobs(ctx, "beta", Jobs{IDs: []string{"sweep"}}); !errors.Is(err, ErrBudgetExhausted) && err != nil {
		t.Fatal(err)
	}
	if u := used("beta"); u != 40 {
		t.Errorf("after the lost request's lease expired: %v neurons, want 40", u)
	}
}

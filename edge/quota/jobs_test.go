package quota

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
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

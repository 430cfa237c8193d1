package quota

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/bulkhead-ai/bulkhead/models/testkit/redistest"
)

// TestStallLeavesNoLease: with Redis stalled (SIGSTOP), acquires time out
// and their requests are refused (ErrUnavailable); when Redis resumes, the
// scripts still waiting in its sockets run past their deadline and change
// nothing, so the tenant is not left holding leases for requests that never
// ran (the red team's 429 3038 for 170 s).
func TestStallLeavesNoLease(t *testing.T) {
	rs, rdb := redistest.Own(t)
	ctx := context.Background()
	q := newQuota(t, rdb, Config{MaxConcurrent: 2, Timeout: 300 * time.Millisecond})
	release, err := q.Acquire(ctx, "acme") // loads the script
	if err != nil {
		t.Fatal(err)
	}
	release(Usage{})
	if err := rs.Pause(); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := q.Acquire(ctx, "acme"); !errors.Is(err, ErrUnavailable) {
			t.Fatalf("acquire with Redis stalled: %v, want ErrUnavailable", err)
		}
	}
	time.Sleep(1500 * time.Millisecond) // past the deadlines (timeout + clockSkew)
	if err := rs.Resume(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Ping(ctx).Err(); err != nil { // after the stalled scripts
		t.Fatal(err)
	}
	if n, err := rdb.ZCard(ctx, leaseKey("acme")).Result(); err != nil || n != 0 {
		t.Fatalf("%d leases (%v) for refused requests", n, err)
	}
	for range 2 {
		if _, err := q.Acquire(ctx, "acme"); err != nil {
			t.Fatalf("after the stall: %v", err)
		}
	}
}

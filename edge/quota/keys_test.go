package quota

import (
	"context"
	"testing"
	"time"

	"github.com/bulkhead-ai/bulkhead/billing/ledger"
	"github.com/bulkhead-ai/bulkhead/billing/price"
	"github.com/bulkhead-ai/bulkhead/queue"
)

// keyed returns a quota without tenant limits and a ledger on one Redis
// database, with policies set for the tenant acme's keys.
func keyed(t *testing.T, clk *clock, policies map[string]ledger.KeyPolicy) (*Quota, *ledger.Ledger) {
	t.Helper()
	rdb := newRedis(t)
	l, err := ledger.New(rdb, ledger.Config{Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	for key, p := range policies {
		if err := l.SetKeyPolicy(context.Background(), "acme", key, p); err != nil {
			t.Fatal(err)
		}
	}
	return newQuota(t, rdb, Config{Now: clk.Now}), l
}

// TestKeyHardBudget: a key at its hard daily budget is refused (naming the
// key and the period) while another key of the tenant, and requests
// without a key, still run; a soft budget never refuses.
func TestKeyHardBudget(t *testing.T) {
	clk := newClock(time.Date(2027, 3, 31, 20, 0, 0, 0, time.UTC))
	q, l := keyed(t, clk, map[string]ledger.KeyPolicy{
		"app":   {DailyNeurons: 2, MonthlyNeurons: 3},
		"batch": {DailyNeurons: 1, Soft: true},
	})
	ctx := context.Background()
	run := func(key, id string, neurons float64) error {
		t.Helper()
		release, err := q.AcquireJobs(ctx, "acme", Jobs{IDs: []string{id}, Key: key})
		if err != nil {
			return err
		}
		if err := q.Reserve(ctx, "acme", key, []string{id}, []int64{price.ToMicro(neurons)}); err != nil {
			release(Usage{})
			return err
		}
		release(Usage{Neurons: neurons, RequestID: id})
		return nil
	}
	for i, id := range []string{"a1", "a2"} {
		if err := run("app", id, 1); err != nil {
			t.Fatalf("request %d of app: %v", i, err)
		}
	}
	le := limitOf(t, run("app", "a3", 1), ErrBudgetExhausted)
	if le.Key != "app" || le.Period != queue.PeriodDay || le.RetryAfter != 4*time.Hour {
		t.Fatalf("refusal %+v, want app's day, retry in 4h", le)
	}
	for i := range 3 { // a soft budget only alerts
		if err := run("batch", "b"+string(rune('0'+i)), 1); err != nil {
			t.Fatalf("soft budget: %v", err)
		}
	}
	if err := run("", "n1", 5); err != nil {
		t.Fatalf("no key: %v", err)
	}
	// The ledger's count of the same requests adds nothing: one claim.
	ev := &queue.UsageEvent{RequestID: "a1", Tenant: "acme", Key: "app", Model: "m", Time: clk.Now(),
		PromptTokens: 1, CompletionTokens: 1, MicroNeurons: 1_000_000, Finish: queue.OutcomeStop}
	if _, err := l.Record(ctx, ev); err != nil {
		t.Fatal(err)
	}
	states, err := l.Keys(ctx, "acme", clk.Now())
	if err != nil || len(states) != 2 || states[0].Key != "app" || states[0].DayMicro != 2_000_000 || states[1].DayMicro != 3_000_000 {
		t.Fatalf("Keys = %+v, %v", states, err)
	}

}

// TestKeyMonthBudget: the monthly budget counts across days.
func TestKeyMonthBudget(t *testing.T) {
	clk := newClock(time.Date(2027, 3, 1, 10, 0, 0, 0, time.UTC))
	q, _ := keyed(t, clk, map[string]ledger.KeyPolicy{"app": {DailyNeurons: 2, MonthlyNeurons: 3}})
	ctx := context.Background()
	spend := func(id string) error {
		release, err := q.AcquireJobs(ctx, "acme", Jobs{IDs: []string{id}, Key: "app"})
		if err == nil {
			err = q.Reserve(ctx, "acme", "app", []string{id}, []int64{price.ToMicro(1)})
			if err != nil {
				release(Usage{})
				return err
			}
			release(Usage{Neurons: 1, RequestID: id})
		}
		return err
	}
	for _, id := range []string{"d1a", "d1b"} {
		if err := spend(id); err != nil {
			t.Fatal(err)
		}
	}
	clk.Add(24 * time.Hour)
	if err := spend("d2a"); err != nil {
		t.Fatalf("day 2, first: %v", err)
	}
	le := limitOf(t, spend("d2b"), ErrBudgetExhausted)
	if le.Key != "app" || le.Period != queue.PeriodMonth {
		t.Fatalf("refusal %+v, want app's month", le)
	}
	clk.Set(time.Date(2027, 4, 1, 0, 0, 1, 0, time.UTC))
	if err := spend("apr"); err != nil {
		t.Fatalf("a new month: %v", err)
	}
}

// TestKeyReserveBoundsOverspend: concurrent requests of one key end its
// day at most one request's worst case over the hard budget.
func TestKeyReserveBoundsOverspend(t *testing.T) {
	clk := newClock(t0)
	q, l := keyed(t, clk, map[string]ledger.KeyPolicy{"app": {DailyNeurons: 5}})
	ctx := context.Background()
	// Three jobs of 2 neurons' worst case each: 0 + 2*2 < 5 admits the
	// batch, which holds 6 reserved; then nothing more fits.
	if _, err := q.AcquireJobs(ctx, "acme", Jobs{IDs: ids("b", 3), Key: "app"}); err != nil {
		t.Fatal(err)
	}
	w := price.ToMicro(2)
	if err := q.Reserve(ctx, "acme", "app", ids("b", 3), []int64{w, w, w}); err != nil {
		t.Fatal(err)
	}
	if _, err := q.AcquireJobs(ctx, "acme", Jobs{IDs: []string{"x"}, Key: "app"}); err == nil {
		if err := q.Reserve(ctx, "acme", "app", []string{"x"}, []int64{w}); err == nil {
			t.Fatal("a request past the reserved budget was admitted")
		}
	}
	// The batch's jobs end: their reservations come back, their leases too.
	if err := q.ReleaseJobs(ctx, "acme", ids("b", 3)...); err != nil {
		t.Fatal(err)
	}
	if states, err := l.Keys(ctx, "acme", clk.Now()); err != nil || states[0].DayMicro != 0 {
		t.Fatalf("after the batch ended: %+v, %v", states, err)
	}
}

// TestKeyRateAndConcurrency: a key's own rate and concurrency limits refuse
// its requests only; leases come back by release, ReleaseJobs and expiry.
func TestKeyRateAndConcurrency(t *testing.T) {
	clk := newClock(t0)
	q, l := keyed(t, clk, map[string]ledger.KeyPolicy{"slow": {RequestsPerMinute: 3}, "narrow": {MaxConcurrent: 2}})
	ctx := context.Background()
	for i := range 3 {
		release, err := q.AcquireJobs(ctx, "acme", Jobs{IDs: []string{"s" + string(rune('0'+i))}, Key: "slow"})
		if err != nil {
			t.Fatalf("slow %d: %v", i, err)
		}
		release(Usage{})
	}
	le := limitOf(t, errOnly(q.AcquireJobs(ctx, "acme", Jobs{IDs: []string{"s3"}, Key: "slow"})), ErrRateLimited)
	if le.Key != "slow" || le.RetryAfter <= 0 || le.RetryAfter > time.Minute {
		t.Fatalf("refusal %+v", le)
	}
	if _, err := q.AcquireJobs(ctx, "acme", Jobs{IDs: []string{"n-other"}, Key: "other"}); err != nil {
		t.Fatalf("another key: %v", err)
	}
	clk.Add(61 * time.Second)
	if _, err := q.AcquireJobs(ctx, "acme", Jobs{IDs: []string{"s4"}, Key: "slow"}); err != nil {
		t.Fatalf("a minute later: %v", err)
	}

	// Concurrency: a batch of two fills it; a third is refused until one
	// ends; a lease nobody gives back expires.
	if _, err := q.AcquireJobs(ctx, "acme", Jobs{IDs: ids("c", 2), Key: "narrow", LeaseTTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	le = limitOf(t, errOnly(q.AcquireJobs(ctx, "acme", Jobs{IDs: []string{"c9"}, Key: "narrow"})), ErrConcurrency)
	if le.Key != "narrow" || le.InUse != 2 {
		t.Fatalf("refusal %+v", le)
	}
	if err := q.ReleaseJobs(ctx, "acme", "c-0"); err != nil {
		t.Fatal(err)
	}
	release, err := q.AcquireJobs(ctx, "acme", Jobs{IDs: []string{"c9"}, Key: "narrow"})
	if err != nil {
		t.Fatalf("after one ended: %v", err)
	}
	release(Usage{})
	clk.Add(2 * time.Minute) // c-1's lease expires
	if _, err := q.AcquireJobs(ctx, "acme", Jobs{IDs: ids("d", 2), Key: "narrow"}); err != nil {
		t.Fatalf("after the lease expired: %v", err)
	}
	if held, err := q.rdb.HExists(ctx, leaseKeysKey("acme"), "c-1").Result(); err != nil || held {
		t.Fatalf("the expired lease c-1 is still named in the leasekeys hash (%v, %v)", held, err)
	}
	// Deleting the policy lifts the key's limits.
	if err := l.DeleteKeyPolicy(ctx, "acme", "narrow"); err != nil {
		t.Fatal(err)
	}
	if _, err := q.AcquireJobs(ctx, "acme", Jobs{IDs: []string{"e"}, Key: "narrow"}); err != nil {
		t.Fatalf("without a policy: %v", err)
	}
}

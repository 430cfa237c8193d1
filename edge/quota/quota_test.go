package quota

import (
	"github.com/bulkhead-ai/bulkhead/models/testkit/redistest"

	"bytes"
	"context"
	"errors"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// clock is a settable test clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock(t time.Time) *clock { return &clock{t: t} }
func (c *clock) Now() time.Time   { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Set(t time.Time)  { c.mu.Lock(); c.t = t; c.mu.Unlock() }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

var t0 = time.Date(2027, 3, 1, 12, 0, 0, 0, time.UTC)

func newQuota(t testing.TB, rdb redis.UniversalClient, cfg Config) *Quota {
	t.Helper()
	q, err := New(nil, rdb, cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return q
}

// refusal returns the sentinel err wraps, or err itself if none.
func refusal(err error) error {
	for _, s := range []error{ErrRateLimited, ErrConcurrency, ErrBudgetExhausted, ErrUnavailable, ErrInvalidTenant} {
		if errors.Is(err, s) {
			return s
		}
	}
	return err
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		want string // field named in the error; "" = valid
	}{
		{name: "zero is unlimited", cfg: Config{}},
		{name: "all set", cfg: Config{RequestsPerMinute: 60, MaxConcurrent: 4, DailyNeurons: 10_000, LeaseTTL: time.Minute}},
		{name: "negative rpm", cfg: Config{RequestsPerMinute: -1}, want: "RequestsPerMinute"},
		{name: "negative concurrency", cfg: Config{MaxConcurrent: -2}, want: "MaxConcurrent"},
		{name: "negative neurons", cfg: Config{DailyNeurons: -0.5}, want: "DailyNeurons"},
		{name: "infinite neurons", cfg: Config{DailyNeurons: math.Inf(1)}, want: "DailyNeurons"},
		{name: "negative lease", cfg: Config{LeaseTTL: -time.Second}, want: "LeaseTTL"},
		{name: "tiny lease", cfg: Config{LeaseTTL: time.Millisecond}, want: "LeaseTTL"},
		{name: "negative timeout", cfg: Config{Timeout: -time.Second}, want: "Timeout"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(nil, newRedis(t), tc.cfg)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New = %v, want an error naming %s", err, tc.want)
			}
		})
	}
	t.Run("nil client with limits", func(t *testing.T) {
		if _, err := New(nil, nil, Config{MaxConcurrent: 1}); err == nil {
			t.Fatal("New accepted a nil client with limits set")
		}
	})
}

func TestRateLimit(t *testing.T) {
	clk := newClock(t0)
	q := newQuota(t, newRedis(t), Config{RequestsPerMinute: 3, Now: clk.Now})
	ctx := context.Background()
	steps := []struct {
		name      string
		advance   time.Duration
		want      error
		wantRetry time.Duration // for ErrRateLimited
	}{
		{name: "1st", want: nil},
		{name: "2nd 10s later", advance: 10 * time.Second},
		{name: "3rd 20s later", advance: 10 * time.Second},
		{name: "4th refused", want: ErrRateLimited, wantRetry: 40 * time.Second},
		{name: "still refused before the 1st leaves", advance: 39 * time.Second, want: ErrRateLimited, wantRetry: time.Second},
		{name: "admitted once the 1st left the window", advance: time.Second},
		{name: "window full again", want: ErrRateLimited, wantRetry: 10 * time.Second},
		{name: "a minute later all left", advance: time.Minute},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			clk.Add(s.advance)
			release, err := q.Acquire(ctx, "acme")
			if refusal(err) != s.want {
				t.Fatalf("Acquire = %v, want %v", err, s.want)
			}
			if s.want == nil {
				release(Usage{}) // releasing does not give back a rate slot
				return
			}
			var le *LimitError
			if !errors.As(err, &le) || le.RetryAfter != s.wantRetry || le.Limit != 3 {
				t.Fatalf("LimitError %+v, want RetryAfter %v, Limit 3", le, s.wantRetry)
			}
		})
	}
	t.Run("other tenant unaffected", func(t *testing.T) {
		if _, err := q.Acquire(ctx, "other"); err != nil {
			t.Fatal(err)
		}
	})
}

func TestConcurrency(t *testing.T) {
	clk := newClock(t0)
	rdb := newRedis(t)
	q := newQuota(t, rdb, Config{MaxConcurrent: 2, LeaseTTL: time.Minute, Now: clk.Now})
	ctx := context.Background()
	ra, err := q.Acquire(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	rb, err := q.Acquire(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		name string
		do   func()
		want error
	}{
		{name: "third refused", want: ErrConcurrency},
		{name: "other tenant admitted", want: nil},
		{name: "after a release", do: func() { ra(Usage{}) }, want: nil},
		{name: "double release frees nothing more", do: func() { ra(Usage{}); ra(Usage{}) }, want: ErrConcurrency},
		{name: "leaked leases expire after LeaseTTL", do: func() { clk.Add(time.Minute + time.Millisecond) }, want: nil},
		{name: "full again", want: nil},
		{name: "and refused again", want: ErrConcurrency},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			if s.do != nil {
				s.do()
			}
			tenant := "acme"
			if strings.HasPrefix(s.name, "other") {
				tenant = "other"
			}
			_, err := q.Acquire(ctx, tenant)
			if refusal(err) != s.want {
				t.Fatalf("Acquire = %v, want %v", err, s.want)
			}
		})
	}
	rb(Usage{}) // its lease already expired: harmless
	n, err := rdb.ZCard(ctx, leaseKey("acme")).Result()
	if err != nil || n != 2 {
		t.Fatalf("in-flight leases = %d, %v; want 2", n, err)
	}
}

func TestDailyBudget(t *testing.T) {
	clk := newClock(time.Date(2027, 3, 1, 23, 0, 0, 0, time.UTC))
	rdb := newRedis(t)
	q := newQuota(t, rdb, Config{DailyNeurons: 10, Now: clk.Now})
	ctx := context.Background()
	run := func(t *testing.T, neurons float64) {
		t.Helper()
		release, err := q.Acquire(ctx, "acme")
		if err != nil {
			t.Fatalf("Acquire: %v", err)
		}
		release(Usage{Neurons: neurons})
	}
	used := func(t *testing.T, day time.Time) float64 {
		t.Helper()
		n, err := q.Used(ctx, "acme", day)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	day1 := clk.Now()
	t.Run("under budget", func(t *testing.T) {
		run(t, 6)
		run(t, 3.5)
		if n := used(t, day1); n != 9.5 {
			t.Fatalf("used %v, want 9.5", n)
		}
	})
	t.Run("last request may overshoot", func(t *testing.T) {
		run(t, 2)
		if n := used(t, day1); n != 11.5 {
			t.Fatalf("used %v, want 11.5", n)
		}
	})
	t.Run("exhausted", func(t *testing.T) {
		clk.Set(time.Date(2027, 3, 1, 23, 59, 30, 0, time.UTC))
		_, err := q.Acquire(ctx, "acme")
		var le *LimitError
		if !errors.Is(err, ErrBudgetExhausted) || !errors.As(err, &le) || le.RetryAfter != 30*time.Second {
			t.Fatalf("Acquire = %v, want ErrBudgetExhausted retrying in 30s", err)
		}
	})
	t.Run("invalid usage charges nothing", func(t *testing.T) {
		q2 := newQuota(t, rdb, Config{DailyNeurons: 1000, Now: clk.Now})
		release, err := q2.Acquire(ctx, "acme")
		if err != nil {
			t.Fatal(err)
		}
		release(Usage{Neurons: -5})
		if n := used(t, day1); n != 11.5 {
			t.Fatalf("used %v after a negative usage, want 11.5", n)
		}
	})
	t.Run("resets at 00:00 UTC", func(t *testing.T) {
		clk.Set(time.Date(2027, 3, 2, 0, 0, 0, 0, time.UTC))
		run(t, 4)
		if n := used(t, clk.Now()); n != 4 {
			t.Fatalf("day 2 used %v, want 4", n)
		}
		if n := used(t, day1); n != 11.5 {
			t.Fatalf("day 1 used %v, want 11.5", n)
		}
	})
	t.Run("charged to the admission day", func(t *testing.T) {
		clk.Set(time.Date(2027, 3, 2, 23, 59, 59, 0, time.UTC))
		release, err := q.Acquire(ctx, "acme")
		if err != nil {
			t.Fatal(err)
		}
		clk.Set(time.Date(2027, 3, 3, 0, 0, 5, 0, time.UTC))
		release(Usage{Neurons: 1})
		if n := used(t, time.Date(2027, 3, 2, 12, 0, 0, 0, time.UTC)); n != 5 {
			t.Fatalf("day 2 used %v, want 5", n)
		}
		if n := used(t, clk.Now()); n != 0 {
			t.Fatalf("day 3 used %v, want 0", n)
		}
	})
	t.Run("day keys expire after their day", func(t *testing.T) {
		ttl, err := rdb.PTTL(ctx, neuronKey("acme", time.Date(2027, 3, 2, 0, 0, 0, 0, time.UTC))).Result()
		if err != nil {
			t.Fatal(err)
		}
		// Last written at 23:59:59 on day 2: one second to midnight plus the grace.
		if ttl <= 0 || ttl > time.Second+dayGrace {
			t.Fatalf("TTL %v, want within (0, %v]", ttl, time.Second+dayGrace)
		}
	})
}

func TestUnlimitedNeedsNoRedis(t *testing.T) {
	q := newQuota(t, nil, Config{})
	for range 100 {
		release, err := q.Acquire(context.Background(), "acme")
		if err != nil {
			t.Fatal(err)
		}
		release(Usage{Neurons: 1e9})
	}
}

func TestKeys(t *testing.T) {
	rdb := newRedis(t)
	q := newQuota(t, rdb, Config{RequestsPerMinute: 10, MaxConcurrent: 10, DailyNeurons: 10})
	ctx := context.Background()
	release, err := q.Acquire(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	release(Usage{Neurons: 1})
	keys, err := rdb.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 2 { // rate window and neurons; the lease set is empty, so gone
		t.Fatalf("keys %q, want the rate window and the day's neurons", keys)
	}
	for _, k := range keys {
		if !strings.HasPrefix(k, "bulkhead:quota:{acme}:") && !strings.HasPrefix(k, "bulkhead:billing:{acme}:") {
			t.Errorf("key %q is outside the tenant's namespace", k)
		}
		if ttl := rdb.PTTL(ctx, k).Val(); ttl <= 0 {
			t.Errorf("key %q has no expiry (PTTL %v)", k, ttl)
		}
	}
}

func TestInvalidTenant(t *testing.T) {
	q := newQuota(t, newRedis(t), Config{MaxConcurrent: 1})
	for _, tenant := range []string{"", "a}b", "a:b", "x{y}", strings.Repeat("a", 65), "tenant a"} {
		t.Run(tenant, func(t *testing.T) {
			if _, err := q.Acquire(context.Background(), tenant); !errors.Is(err, ErrInvalidTenant) {
				t.Fatalf("Acquire(%q) = %v, want ErrInvalidTenant", tenant, err)
			}
		})
	}
}

// TestAtomicity races many goroutines over two Quota values (two edges) on
// one Redis: exactly the limit is admitted, never more, never fewer.
func TestAtomicity(t *testing.T) {
	const goroutines, limit = 120, 25
	tests := []struct {
		name string
		cfg  Config
		want error
	}{
		{name: "requests per minute", cfg: Config{RequestsPerMinute: limit}, want: ErrRateLimited},
		{name: "concurrency", cfg: Config{MaxConcurrent: limit}, want: ErrConcurrency},
		{name: "both, concurrency tighter", cfg: Config{RequestsPerMinute: 2 * limit, MaxConcurrent: limit}, want: ErrConcurrency},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rdb := newRedis(t)
			clk := newClock(t0)
			tc.cfg.Now = clk.Now
			edges := []*Quota{newQuota(t, rdb, tc.cfg), newQuota(t, rdb, tc.cfg)}
			var admitted, refused atomic.Int64
			var wg sync.WaitGroup
			errs := make(chan error, goroutines)
			start := make(chan struct{})
			for i := range goroutines {
				wg.Go(func() {
					<-start
					_, err := edges[i%2].Acquire(context.Background(), "acme")
					switch {
					case err == nil:
						admitted.Add(1)
					case errors.Is(err, tc.want):
						refused.Add(1)
					default:
						errs <- err
					}
				})
			}
			close(start)
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatalf("unexpected error: %v", err)
			}
			if admitted.Load() != limit || refused.Load() != goroutines-limit {
				t.Fatalf("admitted %d refused %d, want %d and %d", admitted.Load(), refused.Load(), limit, goroutines-limit)
			}
		})
	}
}

// TestRedisDown covers fail-closed and fail-open, both for a Redis that was
// never there and for one that goes away.
func TestRedisDown(t *testing.T) {
	closed, err := redistest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	own, err := redistest.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer own.Stop()
	cfg := Config{RequestsPerMinute: 100, MaxConcurrent: 10, DailyNeurons: 100, Timeout: 500 * time.Millisecond}
	client := func(addr string) *redis.Client {
		rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond,
			DialerRetries: 1, DialerRetryTimeout: time.Millisecond})
		t.Cleanup(func() { rdb.Close() })
		return rdb
	}
	closedAddr := "127.0.0.1:" + strconv.Itoa(closed)

	t.Run("fail closed, never there", func(t *testing.T) {
		q := newQuota(t, client(closedAddr), cfg)
		if _, err := q.Acquire(context.Background(), "acme"); !errors.Is(err, ErrUnavailable) {
			t.Fatalf("Acquire = %v, want ErrUnavailable", err)
		}
		if _, err := q.Used(context.Background(), "acme", t0); !errors.Is(err, ErrUnavailable) {
			t.Fatalf("Used = %v, want ErrUnavailable", err)
		}
	})
	t.Run("fail open logs and admits", func(t *testing.T) {
		var logs bytes.Buffer
		c := cfg
		c.FailOpen = true
		q, err := New(slog.New(slog.NewTextHandler(&logs, nil)), client(closedAddr), c)
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		release, err := q.Acquire(context.Background(), "acme")
		if err != nil {
			t.Fatalf("Acquire = %v, want admission", err)
		}
		release(Usage{Neurons: 3}) // cannot be recorded: logged, no panic
		if !strings.Contains(logs.String(), "fail open") || !strings.Contains(logs.String(), "release failed") {
			t.Fatalf("logs %q: want the fail-open admission and the failed release", logs.String())
		}
	})
	t.Run("goes down", func(t *testing.T) {
		rdb := client(own.Addr())
		q := newQuota(t, rdb, cfg)
		release, err := q.Acquire(context.Background(), "acme")
		if err != nil {
			t.Fatalf("Acquire while up: %v", err)
		}
		own.Stop()
		release(Usage{Neurons: 1}) // logged to the discard logger
		if _, err := q.Acquire(context.Background(), "acme"); !errors.Is(err, ErrUnavailable) {
			t.Fatalf("Acquire after stop = %v, want ErrUnavailable", err)
		}
		c := cfg
		c.FailOpen = true
		if _, err := newQuota(t, rdb, c).Acquire(context.Background(), "acme"); err != nil {
			t.Fatalf("fail-open Acquire after stop = %v, want admission", err)
		}
	})
	t.Run("caller's context wins", func(t *testing.T) {
		q := newQuota(t, client(closedAddr), cfg)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if _, err := q.Acquire(ctx, "acme"); !errors.Is(err, context.Canceled) {
			t.Fatalf("Acquire = %v, want context.Canceled", err)
		}
	})
}

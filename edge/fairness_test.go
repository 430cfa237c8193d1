package edge

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bulkhead-ai/bulkhead/billing/price"
	"github.com/bulkhead-ai/bulkhead/edge/quota"
	"github.com/bulkhead-ai/bulkhead/edge/quota/redistest"
	"github.com/bulkhead-ai/bulkhead/edge/tenants"
	"github.com/bulkhead-ai/bulkhead/models/testkit"
	"github.com/bulkhead-ai/bulkhead/queue"
)

// realQuota is a Quota on a fresh redis-server.
func realQuota(t *testing.T, cfg quota.Config) *quota.Quota {
	t.Helper()
	rs, err := redistest.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rs.Stop)
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr()})
	t.Cleanup(func() { rdb.Close() })
	q, err := quota.New(nil, rdb, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return q
}

// gate holds the harness worker's answers to one tenant's async jobs until
// opened.
type gate struct {
	tenant string
	open   chan struct{}
	once   sync.Once
}

func (g *gate) behaviour(next behaviour) behaviour {
	return func(ctx context.Context, h *harness, job *queue.Job, rp *queue.Replier) {
		if job.Tenant == g.tenant && job.Async {
			select {
			case <-g.open:
			case <-ctx.Done():
				return
			}
		}
		next(ctx, h, job, rp)
	}
}

func (g *gate) release() { g.once.Do(func() { close(g.open) }) }

// startReleasing runs the server's ReleaseEnded for the test's life.
func startReleasing(t *testing.T, h *harness) {
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); h.srv.ReleaseEnded(ctx) }()
	t.Cleanup(func() { stop(); <-done })
}

// TestAsyncCountsConcurrency: with a real quota on redis-server, every job
// of an async batch holds a concurrency slot from submission until its
// record ends. A tenant limited to 2 cannot queue a batch of 3, queues one
// of 2, is then refused a synchronous request while they wait, and gets its
// slots back once the worker finished them (the edge saw their records end).
// Another tenant is never affected.
func TestAsyncCountsConcurrency(t *testing.T) {
	q := realQuota(t, quota.Config{MaxConcurrent: 2})
	h := newHarness(t, harnessOpts{quota: q})
	g := &gate{tenant: "alice", open: make(chan struct{})}
	t.Cleanup(g.release)
	h.setBehaviour(g.behaviour(reply("Hi")))
	startReleasing(t, h)
	run := "/ai/run/" + modelStories
	batch := func(n int) string {
		return `{"requests":[` + strings.TrimSuffix(strings.Repeat(`{"prompt":"Once upon a time","max_tokens":2},`, n), ",") + `]}`
	}

	status, _, body := h.do("POST", run+"?queueRequest=true", "alice", batch(3))
	if code, msg := nativeErr(t, body); status != 429 || code != 3038 ||
		!strings.Contains(msg, "0 of your jobs are queued or running, this request adds 3, the limit is 2") {
		t.Fatalf("a batch of 3 over a limit of 2: %d %d %s", status, code, msg)
	}
	status, _, body = h.do("POST", run+"?queueRequest=true", "alice", batch(2))
	if status != 200 {
		t.Fatalf("a batch of 2: %d %s", status, body)
	}
	status, _, body = h.do("POST", run, "alice", `{"prompt":"Once upon a time","max_tokens":2}`)
	if code, _ := nativeErr(t, body); status != 429 || code != 3038 {
		t.Fatalf("a sync request beside 2 queued jobs: %d %d", status, code)
	}
	for range 3 { // bob's requests run while alice's jobs are held
		if status, _, body := h.do("POST", run, "bob", `{"prompt":"Once upon a time","max_tokens":2}`); status != 200 {
			t.Fatalf("bob refused: %d %s", status, body)
		}
	}
	g.release()
	testkit.Poll(t, 5*time.Second, testkit.Cond("alice's slots to come back after her jobs ended", func() bool {
		status, _, _ := h.do("POST", run, "alice", `{"prompt":"Once upon a time","max_tokens":2}`)
		return status == 200
	}))
	status, _, body = h.do("POST", run+"?queueRequest=true", "alice", batch(2))
	if status != 200 {
		t.Fatalf("a batch of 2 once the first ended: %d %s", status, body)
	}
	waitDone(t, h, "alice", body)
}

// TestTenantBoundAcrossModels: with no tenant class, a tenant's jobs
// queued or running are bounded across all models together
// (Config.TenantQueueBound, the jobs stream's per-tenant bound in the
// wiring): alice fills it with async jobs on two models and is refused a
// third job on either, with the numbers; bob is not affected.
func TestTenantBoundAcrossModels(t *testing.T) {
	q := realQuota(t, quota.Config{})
	h := newHarness(t, harnessOpts{quota: q, tenantBound: 4})
	g := &gate{tenant: "alice", open: make(chan struct{})}
	t.Cleanup(g.release)
	h.setBehaviour(g.behaviour(reply("Hi")))
	startReleasing(t, h)
	batch := `{"requests":[{"prompt":"Once upon a time","max_tokens":2},{"prompt":"Once upon a time","max_tokens":2}]}`
	for _, model := range []string{modelStories, modelIdle} {
		if status, _, body := h.do("POST", "/ai/run/"+model+"?queueRequest=true", "alice", batch); status != 200 {
			t.Fatalf("%s: %d %s", model, status, body)
		}
	}
	for _, model := range []string{modelStories, modelIdle} {
		status, _, body := h.do("POST", "/ai/run/"+model+"?queueRequest=true", "alice", `{"requests":[{"prompt":"Once upon a time","max_tokens":2}]}`)
		if code, msg := nativeErr(t, body); status != 429 || !strings.Contains(msg, "4 of your jobs are queued or running, this request adds 1, the limit is 4") {
			t.Fatalf("a fifth job on %s: %d %d %s", model, status, code, msg)
		}
	}
	if status, _, body := h.do("POST", "/ai/run/"+modelStories, "bob", `{"prompt":"Once upon a time","max_tokens":2}`); status != 200 {
		t.Fatalf("bob refused: %d %s", status, body)
	}
}

// TestAsyncRecordsPerTenant: a tenant's async results kept are bounded
// (Config.AsyncRecordsPerTenant): alice's batches are refused with 429
// async_results_full and the numbers once her finished results fill it,
// and bob's async and synchronous requests go on.
func TestAsyncRecordsPerTenant(t *testing.T) {
	q := realQuota(t, quota.Config{})
	h := newHarness(t, harnessOpts{quota: q, asyncRecords: 5})
	startReleasing(t, h)
	batch := func(n int) string {
		return `{"requests":[` + strings.TrimSuffix(strings.Repeat(`{"prompt":"Once upon a time","max_tokens":2},`, n), ",") + `]}`
	}
	run := "/ai/run/" + modelStories
	for range 2 {
		status, _, body := h.do("POST", run+"?queueRequest=true", "alice", batch(2))
		if status != 200 {
			t.Fatalf("alice's batch: %d %s", status, body)
		}
		waitDone(t, h, "alice", body)
	}
	status, hdr, body := h.do("POST", run+"?queueRequest=true", "alice", batch(2))
	if code, msg := nativeErr(t, body); status != 429 || code != 3052 || hdr.Get("Retry-After") == "" ||
		!strings.Contains(msg, "4 of your async results are kept, this request adds 2, the limit is 5") {
		t.Fatalf("alice over her bound: %d %d %q, Retry-After %q", status, code, msg, hdr.Get("Retry-After"))
	}
	status, _, body = h.do("POST", run+"?queueRequest=true", "bob", batch(2))
	if status != 200 {
		t.Fatalf("bob's batch: %d %s", status, body)
	}
	waitDone(t, h, "bob", body)
	if status, _, body := h.do("POST", run, "alice", `{"prompt":"Once upon a time","max_tokens":2}`); status != 200 {
		t.Fatalf("alice's synchronous request: %d %s", status, body)
	}
}

// TestBudgetHoldsUnderConcurrency: with a daily budget of three requests'
// worst case, 24 concurrent requests that each use their whole worst case
// end the day at most one worst case over the budget: each admitted request
// reserves its worst case, so the others get 429 quota_exhausted (3036)
// while it runs (before, all 24 were admitted against an empty day, the
// red team's 832 neurons of 50).
func TestBudgetHoldsUnderConcurrency(t *testing.T) {
	const maxTokens = 200 // the harness's models have the default prices
	worst := price.Neurons(price.Micro(price.Default(), price.Usage{PromptTokens: 16, CompletionTokens: maxTokens}))
	budget := 3 * worst
	q := realQuota(t, quota.Config{DailyNeurons: budget})
	h := newHarness(t, harnessOpts{quota: q})
	hold := make(chan struct{})
	h.setBehaviour(func(ctx context.Context, h *harness, job *queue.Job, rp *queue.Replier) {
		select {
		case <-hold:
		case <-ctx.Done():
			return
		}
		_ = rp.Final(ctx, "", "length", queue.Usage{PromptTokens: job.PromptTokens, CompletionTokens: job.MaxTokens})
	})
	const n = 24
	var wg sync.WaitGroup
	var refused, served, other atomic.Int32
	body := fmt.Sprintf(`{"prompt":"Once upon a time","max_tokens":%d}`, maxTokens)
	for range n {
		wg.Go(func() {
			status, _, b := h.do("POST", "/ai/run/"+modelStories, "alice", body)
			switch {
			case status == 200:
				served.Add(1)
			case status == 429 && strings.Contains(string(b), "3036"):
				refused.Add(1)
			default:
				other.Add(1)
				t.Errorf("%d %s", status, b)
			}
		})
	}
	testkit.Poll(t, 10*time.Second, testkit.Cond("every request to be queued or refused", func() bool {
		return h.jobCount()+int(refused.Load()) == n
	}))
	close(hold)
	wg.Wait()
	used, err := q.Used(context.Background(), "alice", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if used > budget+worst || refused.Load() == 0 {
		t.Fatalf("served %d, refused %d: the day ended at %.1f neurons; the budget is %.1f, one worst case %.1f",
			served.Load(), refused.Load(), used, budget, worst)
	}
	t.Logf("served %d, refused %d, day at %.1f of %.1f neurons (worst case %.1f)", served.Load(), refused.Load(), used, budget, worst)
}

// waitDone polls the async batch a submit answered until it is done.
func waitDone(t *testing.T, h *harness, token string, submitted []byte) {
	t.Helper()
	id, _ := mustJSON(t, submitted)["result"].(map[string]any)["request_id"].(string)
	testkit.Poll(t, 5*time.Second, testkit.Cond("batch "+id+" to finish", func() bool {
		_, _, b := h.do("POST", "/ai/run/"+modelStories, token, `{"request_id":"`+id+`"}`)
		return strings.Contains(string(b), `"status":"done"`)
	}))
}

// TestTenantClasses: a class's max_queued bounds its tenants' queued jobs
// (429 tenant_queue_full with Retry-After, others unaffected), and its
// weight travels on every job; tenants outside any class get the default.
func TestTenantClasses(t *testing.T) {
	q := realQuota(t, quota.Config{})
	classes, err := tenants.New(tenants.Config{
		Classes: []tenants.Class{{Name: "small", MaxQueued: 3, Weight: 4}},
		Members: map[string]string{"alice": "small"},
	})
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, harnessOpts{quota: q, tenants: classes})
	g := &gate{tenant: "alice", open: make(chan struct{})}
	t.Cleanup(g.release)
	h.setBehaviour(g.behaviour(reply("Hi")))
	startReleasing(t, h)
	async := "/ai/run/" + modelStories + "?queueRequest=true"
	two := `{"requests":[{"prompt":"Once upon a time","max_tokens":2},{"prompt":"Lily","max_tokens":2}]}`

	if status, _, body := h.do("POST", async, "alice", two); status != 200 {
		t.Fatalf("alice's first batch: %d %s", status, body)
	}
	status, hdr, body := h.do("POST", async, "alice", two)
	code, msg := nativeErr(t, body)
	if status != http.StatusTooManyRequests || code != 3051 || hdr.Get("Retry-After") != "1" ||
		!strings.Contains(msg, "2 of your jobs are queued or running, this request adds 2, the limit is 3") {
		t.Fatalf("alice over her class's bound: %d %d Retry-After %q: %s", status, code, hdr.Get("Retry-After"), msg)
	}
	status, _, body = h.do("POST", "/v1/chat/completions", "alice", `{"model":"`+modelStories+`","messages":[{"role":"user","content":"Hi"}]}`)
	if status != 200 {
		t.Fatalf("alice's third job, within the bound: %d %s", status, body)
	}
	if job := h.lastJob(); job.Tenant != "alice" || job.Weight != 4 {
		t.Errorf("alice's job: tenant %s weight %v, want weight 4", job.Tenant, job.Weight)
	}
	if status, _, body := h.do("POST", async, "bob", two); status != 200 {
		t.Fatalf("bob beside a full alice: %d %s", status, body)
	}
	testkit.Poll(t, 5*time.Second, testkit.Cond("bob's jobs to reach the worker", func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		for _, j := range h.jobs {
			if j.Tenant == "bob" {
				return j.Weight == 1
			}
		}
		return false
	}))
	g.release()
	var last []byte
	testkit.Poll(t, 5*time.Second, testkit.Cond("alice's slots to come back", func() bool {
		status, _, b := h.do("POST", async, "alice", two)
		last = b
		return status == 200
	}))
	waitDone(t, h, "alice", last)
}

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

	"github.com/bulkhead-ai/bulkhead/billing/price"
	"github.com/bulkhead-ai/bulkhead/edge/quota"
	"github.com/bulkhead-ai/bulkhead/edge/tenants"
	"github.com/bulkhead-ai/bulkhead/models/testkit"
	"github.com/bulkhead-ai/bulkhead/models/testkit/redistest"
	"github.com/bulkhead-ai/bulkhead/queue"
	"github.com/bulkhead-ai/bulkhead/queue/queuetest"
)

// realQuota is a Quota on a fresh redis-server.
func realQuota(t *testing.T, cfg quota.Config) *quota.Quota {
	t.Helper()
	_, rdb := redistest.Own(t)
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

// startReleasing runs the server's ReleaseEnded for the test's life,
// once its watch of job records is in place.
func startReleasing(t *testing.T, h *harness) {
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); h.srv.ReleaseEnded(ctx) }()
	t.Cleanup(func() { stop(); <-done })
	queuetest.WaitWatched(t, h.js, queue.ResultsBucket) // it sees records written from now on
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

// TestBudgetHolds: with a daily budget of 50 neurons (the figure)
// and a real quota on redis-server, no flood pattern ends the day above the
// budget plus one job's worst case: admission reserves each job's worst
// case (prompt + max_tokens), so concurrent requests, concurrent streams and
// async batches cannot all pass a check made against what has been charged
// so far. Each job uses all its max_tokens (the worst case). Before
// reservations, 24 concurrent requests ended at 8 times their budget.
func TestBudgetHolds(t *testing.T) {
	const budget = 50.0
	const maxTokens = 400 // the harness's models have the default prices
	q := realQuota(t, quota.Config{DailyNeurons: budget})
	h := newHarness(t, harnessOpts{quota: q})
	startReleasing(t, h)
	one := fmt.Sprintf(`{"prompt":"Once upon a time","max_tokens":%d}`, maxTokens)
	batch := func(n int) string {
		return `{"requests":[` + strings.TrimSuffix(strings.Repeat(one+",", n), ",") + `]}`
	}
	run, async := "/ai/run/"+modelStories, "/ai/run/"+modelStories+"?queueRequest=true"
	patterns := []struct {
		name, tenant, path, body string
		requests, jobsEach       int
	}{
		{"concurrent", "alice", run, one, 24, 1},
		{"streams", "bob", run, strings.Replace(one, "{", `{"stream":true,`, 1), 24, 1},
		{"async batches", "carol", async, batch(32), 5, 32}, // the red team's: 5 batches of 32
		{"small async batches", "dave", async, batch(3), 12, 3},
	}
	for _, p := range patterns {
		t.Run(p.name, func(t *testing.T) {
			var worst float64
			hold := make(chan struct{})
			h.setBehaviour(func(ctx context.Context, h *harness, job *queue.Job, rp *queue.Replier) {
				if job.Tenant != p.tenant {
					return
				}
				select {
				case <-hold:
				case <-ctx.Done():
					return
				}
				_ = rp.Final(ctx, "", "length", queue.Usage{PromptTokens: job.PromptTokens, CompletionTokens: job.MaxTokens})
			})
			before := h.jobCount()
			var wg sync.WaitGroup
			var refused, served atomic.Int32
			var mu sync.Mutex
			var accepted [][]byte
			for range p.requests {
				wg.Go(func() {
					status, _, b := h.do("POST", p.path, p.tenant, p.body)
					switch {
					case status == 200:
						served.Add(1)
						if p.path == async {
							mu.Lock()
							accepted = append(accepted, b)
							mu.Unlock()
						}
					case status == 429 && strings.Contains(string(b), "3036"):
						refused.Add(1)
					default:
						t.Errorf("%d %s", status, b)
					}
				})
			}
			testkit.Poll(t, 20*time.Second, testkit.Cond("every request to be queued or refused", func() bool {
				return h.jobCount()-before+int(refused.Load())*p.jobsEach == p.requests*p.jobsEach
			}))
			close(hold)
			wg.Wait()
			for _, b := range accepted {
				waitDone(t, h, p.tenant, b)
			}
			// Every job uses its whole worst case, so what the admitted jobs
			// reserved is what the day ends at once they are charged (the
			// harness has no billing node to charge async jobs).
			var admitted float64
			h.mu.Lock()
			for _, j := range h.jobs[before:] {
				w := price.Neurons(price.Micro(price.Default(), price.Usage{PromptTokens: j.PromptTokens, CompletionTokens: j.MaxTokens}))
				admitted += w
				worst = max(worst, w)
			}
			h.mu.Unlock()
			used, err := q.Used(context.Background(), p.tenant, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			used = max(used, admitted)
			if used > budget+worst || refused.Load() == 0 {
				t.Fatalf("served %d, refused %d: the day ends at %.1f neurons; the budget is %.0f, one job's worst case %.1f",
					served.Load(), refused.Load(), used, budget, worst)
			}
			t.Logf("served %d, refused %d, day ends at %.1f of %.0f neurons (one job's worst case %.1f)", served.Load(), refused.Load(), used, budget, worst)
		})
	}
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

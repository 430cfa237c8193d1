package edge

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"

	"github.com/bulkhead-ai/bulkhead/edge/auth"
	"github.com/bulkhead-ai/bulkhead/edge/quota"
	"github.com/bulkhead-ai/bulkhead/edge/router"
	"github.com/bulkhead-ai/bulkhead/edge/tenants"
	"github.com/bulkhead-ai/bulkhead/models/catalog"
	"github.com/bulkhead-ai/bulkhead/models/refdatatest"
	"github.com/bulkhead-ai/bulkhead/models/testkit"
	"github.com/bulkhead-ai/bulkhead/queue"
	"github.com/bulkhead-ai/bulkhead/queue/queuetest"
)

// TestMain fails the run if goroutines outlive the tests: servers, workers,
// engines, connections and streams must all have stopped.
func TestMain(m *testing.M) { testkit.Main(m) }

// Model names the harness serves.
const (
	modelStories = "@cf/test/stories-260k" // stories260K: no chat template
	modelQwen    = "@cf/test/qwen2-vocab"  // qwen2 vocab: ChatML template; admission only
	modelIdle    = "@cf/test/idle"         // stories260K; no worker consumes its jobs
)

// fakeAuth maps bearer tokens to principals.
type fakeAuth map[string]auth.Principal

func (f fakeAuth) Authenticate(r *http.Request) (auth.Principal, error) {
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		return auth.Principal{}, fmt.Errorf("%w: no bearer token", auth.ErrUnauthenticated)
	}
	p, ok := f[tok]
	if !ok {
		return auth.Principal{}, fmt.Errorf("%w: unknown token", auth.ErrUnauthenticated)
	}
	return p, nil
}

var testAuth = fakeAuth{
	"alice":    {Tenant: "alice", Scopes: []string{auth.ScopeRun, auth.ScopeRead}},
	"alice-ci": {Tenant: "alice", Key: "ci", Scopes: []string{auth.ScopeRun, auth.ScopeRead}},
	"bob":      {Tenant: "bob", Scopes: []string{auth.ScopeRun, auth.ScopeRead}},
	"carol":    {Tenant: "carol", Scopes: []string{auth.ScopeRun, auth.ScopeRead}},
	"dave":     {Tenant: "dave", Scopes: []string{auth.ScopeRun, auth.ScopeRead}},
	"reader":   {Tenant: "reader", Scopes: []string{auth.ScopeRead}},
	"limited":  {Tenant: "limited", Scopes: []string{auth.ScopeRun, auth.ScopeRead}, Models: []string{modelIdle}},
	"alice-ft": {Tenant: "alice", Scopes: []string{auth.ScopeFinetunesWrite}},
	"bob-ft":   {Tenant: "bob", Scopes: []string{auth.ScopeFinetunesWrite}},
}

// fakeLimiter admits or refuses with err and records what releases charged.
type fakeLimiter struct {
	mu       sync.Mutex // guards the fields below
	err      error
	acquired int
	released []quota.Usage
}

func (l *fakeLimiter) ReleaseJobs(context.Context, string, ...string) error { return nil }

func (l *fakeLimiter) Reserve(context.Context, string, string, []string, []int64) error { return nil }

func (l *fakeLimiter) AcquireJobs(_ context.Context, tenant string, _ quota.Jobs) (func(quota.Usage), error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		return nil, l.err
	}
	l.acquired++
	once := sync.Once{}
	return func(u quota.Usage) {
		once.Do(func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			l.released = append(l.released, u)
		})
	}, nil
}

func (l *fakeLimiter) set(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.err = err
}

func (l *fakeLimiter) counts() (acquired, released int, last quota.Usage) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if n := len(l.released); n > 0 {
		last = l.released[n-1]
	}
	return l.acquired, len(l.released), last
}

// behaviour is how the fake worker answers one job.
type behaviour func(ctx context.Context, h *harness, job *queue.Job, rp *queue.Replier)

// reply answers with texts as token frames, then a final frame.
func reply(texts ...string) behaviour {
	return func(ctx context.Context, h *harness, job *queue.Job, rp *queue.Replier) {
		for _, s := range texts {
			if err := rp.Token(ctx, s, []int32{1}); err != nil {
				if ctx.Err() == nil {
					h.t.Errorf("token frame: %v", err)
				}
				return
			}
		}
		// The test may end (cancelling ctx) as soon as the edge has the final
		// frame, before the record is written.
		if err := rp.Final(ctx, "", "stop", queue.Usage{PromptTokens: job.PromptTokens, CompletionTokens: len(texts)}); err != nil && ctx.Err() == nil {
			h.t.Errorf("final frame: %v", err)
		}
	}
}

// harness is an edge server in front of a real embedded NATS server with a
// hand-written worker for modelStories.
type harness struct {
	t       testing.TB
	srv     *Server
	http    *httptest.Server
	nc      *nats.Conn
	js      jetstream.JetStream
	limiter *fakeLimiter
	catalog *catalog.Catalog
	router  *router.Router   // with harnessOpts.routed
	ft      *queue.Finetunes // the edge's finetune store

	mu      sync.Mutex // guards behave, jobs and headers
	behave  behaviour
	jobs    []*queue.Job
	headers []nats.Header // of each job's message, in order
}

type harnessOpts struct {
	maxBody        int64
	idleTimeout    time.Duration
	maxPerTenant   int64                // StreamConfig.MaxJobsPerTenant
	tracer         trace.TracerProvider // nil: tracing off
	continueTraces bool                 // Config.ContinueClientTraces
	traceAllow     []string             // Config.TraceAllow
	metrics        *Metrics             // nil: no metrics
	live           queue.Liveness       // nil: every model has workers
	quota          Limiter              // nil: the harness's fakeLimiter
	tenants        *tenants.Table       // nil: every tenant in the default class
	tenantBound    int                  // Config.TenantQueueBound
	asyncRecords   int                  // Config.AsyncRecordsPerTenant, for an hour each
	properties     map[string]string    // catalog properties of modelStories
	routed         bool                 // Config.Router: a router on the harness's NATS
	webhooks       *WebhookConfig       // Config.Webhooks
	bodyTimeout    time.Duration        // Config.HTTP.BodyReadTimeout
}

func newHarness(t testing.TB, o harnessOpts) *harness {
	t.Helper()
	stories := refdatatest.Path(t, "models/stories260K.gguf")
	cat, err := catalog.FromFlags([]string{modelStories + "=" + stories, modelIdle + "=" + stories})
	if err != nil {
		t.Fatalf("catalog: %v", err)
	}
	if m, _ := cat.Lookup(modelStories); len(o.properties) > 0 {
		if m.Properties == nil {
			m.Properties = map[string]string{}
		}
		maps.Copy(m.Properties, o.properties)
	}

	nc, js := queuetest.JetStream(t, queuetest.Server(t).ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := queue.Setup(ctx, js, queue.StreamConfig{Memory: true, MaxJobsPerTenant: o.maxPerTenant}); err != nil {
		t.Fatalf("setup: %v", err)
	}
	qc := queue.NewClient(nc, js)
	if o.idleTimeout > 0 {
		if qc, err = qc.WithIdleTimeout(o.idleTimeout); err != nil {
			t.Fatal(err)
		}
	}
	if o.live != nil {
		qc = qc.WithLiveness(o.live)
	}
	ft, err := queue.OpenFinetunes(ctx, js)
	if err != nil {
		t.Fatalf("finetunes: %v", err)
	}
	h := &harness{t: t, nc: nc, js: js, limiter: &fakeLimiter{}, catalog: cat, ft: ft, behave: reply("Hello", " world")}
	var lim Limiter = h.limiter
	if o.quota != nil {
		lim = o.quota
	}
	var rt Router
	if o.routed {
		r, err := router.New(nc, router.Config{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(r.Close)
		h.router, rt = r, r
	}
	h.srv, err = New(nil, Config{Catalog: cat, Auth: testAuth, Quota: lim, Queue: qc, Tenants: o.tenants, TenantQueueBound: o.tenantBound, Router: rt,
		AsyncRecordsPerTenant: o.asyncRecords, AsyncRecordTTL: time.Hour,
		MaxBodyBytes: o.maxBody, RequestTimeout: 20 * time.Second, TracerProvider: o.tracer, ContinueClientTraces: o.continueTraces, TraceAllow: o.traceAllow, Metrics: o.metrics,
		Webhooks: o.webhooks, Finetunes: ft, HTTP: HTTPLimits{BodyReadTimeout: o.bodyTimeout}})
	if err != nil {
		t.Fatalf("edge.New: %v", err)
	}
	h.startWorker(ctx)
	// Served as a node serves it: Listen's listener, HTTPServer's limits.
	h.http = httptest.NewUnstartedServer(nil)
	h.http.Listener = FramingListener(h.http.Listener)
	h.http.Config = h.srv.HTTPServer(h.srv.Handler())
	h.http.Start()
	t.Cleanup(h.http.Close)
	return h
}

// startWorker consumes modelStories jobs and answers each with the current
// behaviour, in its own goroutine per job.
func (h *harness) startWorker(ctx context.Context) {
	cons, err := queue.EnsureConsumer(ctx, h.js, modelStories, queue.ConsumerConfig{})
	if err != nil {
		h.t.Fatalf("consumer: %v", err)
	}
	res, err := queue.OpenResults(ctx, h.js)
	if err != nil {
		h.t.Fatalf("results: %v", err)
	}
	wctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	cc, err := cons.Consume(func(msg jetstream.Msg) {
		// Wait for the server to take the ack: the stream holds one job per
		// model, and the next case's job must find the slot free.
		_ = msg.DoubleAck(wctx)
		job, err := queue.DecodeJob(msg.Data())
		if err != nil {
			h.t.Errorf("worker: %v", err)
			return
		}
		h.mu.Lock()
		h.jobs = append(h.jobs, job)
		h.headers = append(h.headers, msg.Headers())
		b := h.behave
		h.mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			rp, claim, err := res.Claim(wctx, h.nc, job)
			switch {
			case err == nil && claim == queue.ClaimFinished:
				// Cancelled before this worker claimed it (a client that
				// left at once): run nothing, as a worker does.
				return
			case err != nil && wctx.Err() != nil:
				return // the test is over
			case err != nil || claim != queue.ClaimRun:
				h.t.Errorf("worker: claim %v %v", claim, err)
				return
			}
			b(wctx, h, job, rp)
		}()
	})
	if err != nil {
		h.t.Fatalf("consume: %v", err)
	}
	h.t.Cleanup(func() {
		cc.Stop()
		stop()
		wg.Wait()
	})
}

func (h *harness) setBehaviour(b behaviour) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.behave = b
}

func (h *harness) jobCount() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.jobs)
}

func (h *harness) lastJob() *queue.Job {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.jobs) == 0 {
		h.t.Fatal("the worker received no job")
	}
	return h.jobs[len(h.jobs)-1]
}

// do sends a request with token (none if empty) and returns the status and body.
func (h *harness) do(method, path, token, body string) (int, http.Header, []byte) {
	h.t.Helper()
	req, err := http.NewRequest(method, h.http.URL+path, strings.NewReader(body))
	if err != nil {
		h.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := h.http.Client().Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		h.t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, b
}

// event is one server-sent event.
type event struct {
	name string
	data string
}

// parseSSE splits a text/event-stream body into events.
func parseSSE(t *testing.T, body []byte) []event {
	t.Helper()
	var out []event
	var cur event
	sc := bufio.NewScanner(strings.NewReader(string(body)))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if cur.data != "" || cur.name != "" {
				out = append(out, cur)
			}
			cur = event{}
		case strings.HasPrefix(line, "event: "):
			cur.name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			cur.data = strings.TrimPrefix(line, "data: ")
		default:
			t.Fatalf("unexpected SSE line %q", line)
		}
	}
	if cur.data != "" || cur.name != "" {
		t.Fatalf("SSE stream ends inside an event: %+v", cur)
	}
	return out
}

func mustJSON(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("response is not a JSON object: %v: %s", err, b)
	}
	return m
}

// nativeErr returns the code and message of a native error envelope,
// checking the envelope's shape.
func nativeErr(t *testing.T, b []byte) (int, string) {
	t.Helper()
	m := mustJSON(t, b)
	if m["success"] != false || m["result"] != nil {
		t.Fatalf("error envelope: success/result wrong: %s", b)
	}
	if msgs, ok := m["messages"].([]any); !ok || len(msgs) != 0 {
		t.Fatalf("error envelope: messages must be []: %s", b)
	}
	errs, ok := m["errors"].([]any)
	if !ok || len(errs) != 1 {
		t.Fatalf("error envelope: want one error: %s", b)
	}
	e := errs[0].(map[string]any)
	return int(e["code"].(float64)), e["message"].(string)
}

// openAIErr returns type, code and message of an OpenAI error body.
func openAIErr(t *testing.T, b []byte) (typ, code, msg string) {
	t.Helper()
	m := mustJSON(t, b)
	e, ok := m["error"].(map[string]any)
	if !ok {
		t.Fatalf("no error object: %s", b)
	}
	for _, k := range []string{"message", "type", "param", "code"} {
		if _, ok := e[k]; !ok {
			t.Fatalf("OpenAI error lacks %q: %s", k, b)
		}
	}
	code, _ = e["code"].(string)
	return e["type"].(string), code, e["message"].(string)
}

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/bulkhead-ai/bulkhead/deploy/local"
	"github.com/bulkhead-ai/bulkhead/edge/auth"
	"github.com/bulkhead-ai/bulkhead/models/testkit"
	"github.com/bulkhead-ai/bulkhead/queue"
)

// floodBackoff is how long a flooding client waits after a 429 before it
// tries again: without it the test measures the edge's CPU on two shared
// cores (what --quota-rpm is for), not the queue's and worker's fairness.
const floodBackoff = 50 * time.Millisecond

// floodFloor is the p99 time to first token tenant B may always have under
// the flood, whatever its unloaded p99 (issue 21: 3x unloaded or 100 ms,
// whichever is larger).
const floodFloor = 100 * time.Millisecond

// TestFloodFairness is issue 21's first "done when", with the defaults a
// user gets (no tenant class, the stream's per-tenant bound of 1000 jobs):
// real NATS (with role credentials), a real edge over HTTP, a real
// redis-server and a real worker. Tenant A floods: 16 OpenAI chat streams
// without max_tokens, back to back, and an async batch of 32 prompts every
// 200 ms, so its backlog in the stream grows far past any worker's pull
// window. Tenant B sends a streaming 8-token request every 100 ms. Every B
// request must succeed, and A must be served or told 429 tenant_queue_full
// (3051), or for a batch async_results_full (3052: its kept results at
// their bound, in a long flood), never anything worse. With the build tag
// flood (make test-flood), B's p99 time to first token must also stay within 3x
// its unloaded p99 (measured first, in the same run) or 100 ms, whichever
// is larger.
//
// It runs on one worker and on four (each its own process and engine),
// where the edge routes (A's identical prompts by their prefix, B's by
// load), and on `dev` and `dev --workers 4`, whose edge, NATS and engines
// share one process. The latency bound is a load measurement: it holds on
// a machine that runs nothing else, so it is asserted only in make
// test-flood, which CI runs on its own after make test, without the race
// detector (its instrumentation multiplies the edge's CPU cost in a shared
// process). The suite (make test, which may share the machine with a
// second suite) runs "one worker" under -race for what must hold however
// slow the machine: B served, A never answered worse than 429; it logs the
// latency without judging it.
func TestFloodFairness(t *testing.T) {
	for _, tc := range []struct {
		name  string
		start func(t *testing.T) floodTarget
	}{
		{"one worker", func(t *testing.T) floodTarget { return clusterTarget(t, startSecureCluster(t, "unified")) }},
		{"four workers", func(t *testing.T) floodTarget {
			return clusterTarget(t, startSecureCluster(t, "unified", "unified", "unified", "unified"))
		}},
		{"dev", func(t *testing.T) floodTarget { return startDev(t).floodTarget(t) }},
		{"dev --workers 4", func(t *testing.T) floodTarget { return startDev(t, "--workers", "4").floodTarget(t) }},
		{"deploy/local", localTarget},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !floodMeasured && tc.name != "one worker" {
				// Four engines and the flood's clients on two shared
				// cores: what this variant adds over "one worker" is
				// its latency, which only make test-flood judges.
				t.Skip("a load measurement: make test-flood runs it (build tag flood)")
			}
			if floodMeasured && raceEnabled {
				// The race detector's slowdown of the test's own
				// clients would decide B's latency, not the queue.
				t.Skip("measured without the race detector (make test-flood)")
			}
			if tc.name == "deploy/local" && os.Getenv("BULKHEAD_FLOOD_CLUSTER") == "" {
				t.Skip("set BULKHEAD_FLOOD_CLUSTER to a running deploy/local cluster's directory (make cluster)")
			}
			floodFairness(t, tc.start(t))
		})
	}
}

// floodTarget is where the flood goes: an edge's base URL, tokens for
// tenants, and JetStream as the operator (to count A's queued jobs).
type floodTarget struct {
	url   string
	token func(tenant string) string
	js    jetstream.JetStream
}

func clusterTarget(t *testing.T, c *cluster) floodTarget {
	_, js, _ := c.natsAs(t, queue.RoleOperator)
	return floodTarget{url: c.edge(t), token: func(tenant string) string { return c.token(t, tenant) }, js: js}
}

// localTarget is the deploy/local cluster running in BULKHEAD_FLOOD_CLUSTER
// (make cluster): its first edge, tokens from its key, its NATS as the
// operator.
func localTarget(t *testing.T) floodTarget {
	st, err := local.ReadState(os.Getenv("BULKHEAD_FLOOD_CLUSTER"))
	if err != nil {
		t.Fatal(err)
	}
	edges := st.ByRole(local.RoleEdge)
	if len(edges) == 0 {
		t.Fatal("the cluster has no edge")
	}
	key, err := auth.LoadOrCreateDevKey(st.KeyDir)
	if err != nil {
		t.Fatal(err)
	}
	creds, err := queue.LoadCredentials(filepath.Join(st.Creds, queue.CredsFile(queue.RoleOperator)))
	if err != nil {
		t.Fatal(err)
	}
	js := jetStreamAt(t, st.NATS, creds.Options()...)
	token := func(tenant string) string {
		tok, err := key.Mint(tenant, []string{auth.ScopeRun}, nil, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	// The cluster outlives the test: close the keep-alive connections to
	// it, whose goroutines TestMain would count as leaked.
	t.Cleanup(http.DefaultClient.CloseIdleConnections)
	return floodTarget{url: "http://" + edges[0].Addr, token: token, js: js}
}

// jetStreamAt connects to url with opts until the test ends.
func jetStreamAt(t *testing.T, url string, opts ...nats.Option) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

func floodFairness(t *testing.T, c floodTarget) {
	url := c.url
	run := url + "/ai/run/" + clusterModel
	a, b := c.token("tenant-a"), c.token("tenant-b")
	bBody := `{"prompt":"Once upon a time","max_tokens":8,"stream":true}`
	// Warm up: the worker has its model loaded and B's path is hot.
	for range 3 {
		if _, err := streamTTFT(run, b, bBody); err != nil {
			t.Fatalf("warm-up: %v", err)
		}
	}

	// 100 requests a phase: the p99 is then the second slowest, not the
	// slowest, which one scheduling hiccup of a shared machine decides.
	const window, every = 10 * time.Second, 100 * time.Millisecond
	unloaded := tenantB(t, run, b, bBody, window, every)
	bound := max(3*pct(unloaded, 99), floodFloor)
	js := c.js

	ctx, stop := context.WithCancel(context.Background())
	var counts floodCounts
	var wg sync.WaitGroup
	wg.Go(func() { counts.batches(ctx, run, a, 200*time.Millisecond, 32) })
	for range 16 {
		wg.Go(func() { counts.chats(ctx, url+"/v1/chat/completions", a) })
	}
	// The flood is on once A has a backlog: more of its jobs queued than a
	// worker pulls (its pull window is 32 jobs at most), or, where the
	// workers keep up with it (four of them, without -race), once it has
	// run for 20 s.
	floodStart := time.Now()
	testkit.Poll(t, time.Minute, testkit.Cond("tenant A to have a backlog", func() bool {
		return queuedJobs(t, js, "tenant-a") > 100 || time.Since(floodStart) > 20*time.Second
	}))
	backlog := queuedJobs(t, js, "tenant-a")
	loaded := tenantB(t, run, b, bBody, floodWindow(t, window), every)
	for phase := 1; floodMeasured && phase < 3 && pct(loaded, 99) > bound; phase++ {
		// A shared machine's scheduling hiccups land in one phase's tail;
		// an unfair queue fails every phase (p99 18.5 s before per-tenant
		// queues), so up to two more phases under the same flood decide.
		t.Logf("tenant B under A's flood, phase %d: TTFT p50 %v p99 %v, over %v; measuring again",
			phase, pct(loaded, 50), pct(loaded, 99), bound)
		loaded = tenantB(t, run, b, bBody, window, every)
	}
	backlogEnd := queuedJobs(t, js, "tenant-a")
	stop()
	wg.Wait()

	t.Logf("tenant B unloaded: %d requests, TTFT p50 %v p99 %v", len(unloaded), pct(unloaded, 50), pct(unloaded, 99))
	t.Logf("tenant B under A's flood: %d requests, TTFT p50 %v p99 %v (bound %v); A's jobs in the stream: %d at the start, %d at the end",
		len(loaded), pct(loaded, 50), pct(loaded, 99), bound, backlog, backlogEnd)
	t.Logf("tenant A: %d async batches accepted, %d refused 429 tenant_queue_full and %d 429 async_results_full; %d chat streams served and %d refused 429 tenant_queue_full; %d other outcomes",
		counts.batchOK.Load(), counts.batchRefused.Load(), counts.batchKept.Load(), counts.streamOK.Load(), counts.streamRef.Load(), counts.other.Load())
	if counts.other.Load() != 0 {
		t.Errorf("tenant A got %d answers that were neither served nor 429 tenant_queue_full (nor, for a batch, async_results_full) (first: %s)",
			counts.other.Load(), counts.firstOther())
	}
	if counts.batchOK.Load() == 0 || counts.streamOK.Load() == 0 {
		t.Errorf("tenant A's batches or chat streams were never served")
	}
	if p := pct(loaded, 99); floodMeasured && p > bound {
		t.Errorf("tenant B's p99 time to first token under the flood is %v, over %v (3x its unloaded %v, at least %v)",
			p, bound, pct(unloaded, 99), floodFloor)
	}
}

// floodWindow is how long B is measured under the flood in the first phase:
// BULKHEAD_FLOOD_WINDOW (a duration, issue 21 measured 40 s) where set,
// otherwise def.
func floodWindow(t *testing.T, def time.Duration) time.Duration {
	v := os.Getenv("BULKHEAD_FLOOD_WINDOW")
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		t.Fatalf("BULKHEAD_FLOOD_WINDOW=%q: want a positive duration", v)
	}
	return d
}

// queuedJobs is how many of tenant's jobs for clusterModel the jobs stream
// holds (waiting or running), on its shared queue and on those routed to
// workers (docs/routing.md).
func queuedJobs(t *testing.T, js jetstream.JetStream, tenant string) uint64 {
	t.Helper()
	var n uint64
	for subj, count := range modelQueue(t, js, clusterModel) {
		if tok, _ := queue.SplitRoute(strings.TrimPrefix(subj, queue.JobSubject(clusterModel)+".")); tok == queue.TenantToken(tenant) {
			n += count
		}
	}
	return n
}

// modelQueue returns the jobs of model waiting in the jobs stream, by
// subject.
func modelQueue(t *testing.T, js jetstream.JetStream, model string) map[string]uint64 {
	t.Helper()
	st, err := js.Stream(context.Background(), queue.JobsStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(context.Background(), jetstream.WithSubjectFilter(queue.JobSubject(model)+".>"))
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Subjects
}

// tenantB sends body every interval for window, each streaming, and returns
// every request's time to first token; any failure fails the test.
func tenantB(t *testing.T, run, token, body string, window, every time.Duration) []time.Duration {
	t.Helper()
	var (
		mu    sync.Mutex // guards ttfts and errs
		ttfts []time.Duration
		errs  []error
		wg    sync.WaitGroup
	)
	tick := time.NewTicker(every)
	defer tick.Stop()
	for end := time.Now().Add(window); time.Now().Before(end); <-tick.C {
		wg.Go(func() {
			d, err := streamTTFT(run, token, body)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			ttfts = append(ttfts, d)
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("tenant B: %d of %d requests failed; first: %v", len(errs), len(errs)+len(ttfts), errs[0])
	}
	return ttfts
}

// streamTTFT sends a streaming request and reads it to the end; it returns
// the time to the first event with text, or why the stream failed.
func streamTTFT(url, token, body string) (time.Duration, error) {
	req, err := http.NewRequest("POST", url, strings.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		var b strings.Builder
		_, _ = bufio.NewReader(resp.Body).WriteTo(&b)
		return 0, fmt.Errorf("status %d: %s", resp.StatusCode, b.String())
	}
	var first time.Duration
	done := false
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "data: [DONE]":
			done = true
		case strings.HasPrefix(line, "data: "):
			var ev struct {
				Response string `json:"response"`
			}
			if err := json.Unmarshal([]byte(line[6:]), &ev); err != nil {
				return 0, fmt.Errorf("event %q: %v", line, err)
			}
			if first == 0 && ev.Response != "" {
				first = time.Since(start)
			}
		case strings.HasPrefix(line, "event: error"):
			return 0, fmt.Errorf("stream ended with an error event")
		}
	}
	if err := sc.Err(); err != nil || !done || first == 0 {
		return 0, fmt.Errorf("stream cut short (done %v, first token %v): %v", done, first, err)
	}
	return first, nil
}

// floodCounts counts tenant A's outcomes.
type floodCounts struct {
	batchOK, streamOK, other         atomic.Int64
	refused, batchRefused, streamRef atomic.Int64 // 429 tenant_queue_full: all, of batches, of streams
	batchKept                        atomic.Int64 // 429 async_results_full: A's kept async results at its bound (a long flood)

	mu    sync.Mutex // guards first
	first string     // the first other outcome, for the report
}

func (f *floodCounts) outcome(status int, body []byte, ok, refused *atomic.Int64) {
	switch {
	case status == 200:
		ok.Add(1)
	case status == 429 && (strings.Contains(string(body), `"code":3051`) || strings.Contains(string(body), `"code":"tenant_queue_full"`)):
		f.refused.Add(1)
		refused.Add(1)
		time.Sleep(floodBackoff)
	case status == 429 && refused == &f.batchRefused && strings.Contains(string(body), `"code":3052`):
		f.batchKept.Add(1)
		time.Sleep(floodBackoff)
	default:
		f.other.Add(1)
		f.mu.Lock()
		if f.first == "" {
			f.first = fmt.Sprintf("%d %.300s", status, body)
		}
		f.mu.Unlock()
	}
}

func (f *floodCounts) firstOther() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.first
}

// batches submits an async batch of size prompts without max_tokens every
// interval until ctx ends.
func (f *floodCounts) batches(ctx context.Context, run, token string, every time.Duration, size int) {
	reqs := make([]string, size)
	tick := time.NewTicker(every)
	defer tick.Stop()
	for n := 0; ctx.Err() == nil; n++ {
		for i := range reqs {
			reqs[i] = fmt.Sprintf(`{"prompt":"Once upon a time %d-%d"}`, n, i)
		}
		body := `{"requests":[` + strings.Join(reqs, ",") + `]}`
		status, b, err := postCtx(ctx, token, run+"?queueRequest=true", body)
		if err != nil {
			return
		}
		f.outcome(status, b, &f.batchOK, &f.batchRefused)
		select {
		case <-tick.C:
		case <-ctx.Done():
		}
	}
}

// chats sends OpenAI chat streams without max_tokens until ctx ends.
func (f *floodCounts) chats(ctx context.Context, url, token string) {
	body := `{"model":"` + clusterModel + `","messages":[{"role":"user","content":"Tell me a story"}],"stream":true}`
	for ctx.Err() == nil {
		status, b, err := postCtx(ctx, token, url, body)
		if err != nil {
			return
		}
		if status == 200 && !strings.Contains(string(b), "data: [DONE]") {
			status = 0 // a stream cut short
		}
		f.outcome(status, b, &f.streamOK, &f.streamRef)
	}
}

// postCtx is post under ctx; an error means ctx ended (or the edge is gone).
func postCtx(ctx context.Context, token, url, body string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, "POST", url, strings.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	// Keep the head (an error body) and the tail (a stream's [DONE]) only:
	// the flood's streams are read as cheaply as the test can.
	var head, tail []byte
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		if len(head) < 512 {
			head = append(head, buf[:min(n, 512-len(head))]...)
		}
		if tail = append(tail, buf[:n]...); len(tail) > 64 {
			tail = append(tail[:0], tail[len(tail)-64:]...)
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return 0, nil, err
		}
	}
	if resp.StatusCode != 200 {
		return resp.StatusCode, head, nil
	}
	return resp.StatusCode, tail, nil
}

// pct is the p-th percentile (nearest rank) of ds.
func pct(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := (len(s)*p + 99) / 100
	return s[max(i-1, 0)]
}

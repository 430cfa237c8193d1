package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/bulkhead-ai/bulkhead/edge/auth"
	"github.com/bulkhead-ai/bulkhead/models/catalog"
	"github.com/bulkhead-ai/bulkhead/models/refdatatest"
	"github.com/bulkhead-ai/bulkhead/models/testkit"
	"github.com/bulkhead-ai/bulkhead/queue"
	"github.com/bulkhead-ai/bulkhead/queue/queuetest"
	"github.com/bulkhead-ai/bulkhead/workers/engine"
	"github.com/bulkhead-ai/bulkhead/workers/kvcache"
)

const clampModel = "@cf/test/stories260k"

// bytesPerPage is one KV page of stories260K: K and V, every layer, f16.
func bytesPerPage(t *testing.T) int64 {
	t.Helper()
	m, err := engine.Load(refdatatest.Path(t, "models/stories260K.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	h := m.Hyper
	per, err := kvcache.Config{Layers: h.Layers, KVHeads: h.KVHeads, HeadDim: h.HeadDim, PageSize: pageSize}.BytesPerPage()
	if err != nil {
		t.Fatal(err)
	}
	return per
}

// TestPoolTooSmallRefusesStart runs worker and dev with a KV pool smaller
// than the context window: each refuses to start, exit 1, naming the model,
// the pool's tokens and the window.
func TestPoolTooSmallRefusesStart(t *testing.T) {
	model := refdatatest.Path(t, "models/stories260K.gguf")
	dir := t.TempDir()
	catFile := filepath.Join(dir, "catalog.yaml")
	yaml := fmt.Sprintf("models:\n  - name: %q\n    path: %s\n    context_window: 1024\n    kv_pool_bytes: %d\n", clampModel, model, 10*bytesPerPage(t))
	if err := os.WriteFile(catFile, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	small := []string{"--model", clampModel + "=" + model, "--kv-pool-tokens", "256", "--context", "2048", "--threads", "1"}
	// No NATS listens on port 1: a worker that got past its engines would
	// hang retrying it, so a prompt exit proves the check runs first.
	noNATS := []string{"--nats", "nats://127.0.0.1:1"}
	tests := []struct {
		name string
		args []string
		want []string // in stderr
	}{
		{"worker, --kv-pool-tokens", append(append([]string{"worker"}, noNATS...), small...),
			[]string{clampModel, "256 tokens", "16 pages of 16", "2048 tokens", "--clamp-context"}},
		{"dev, --kv-pool-tokens", append([]string{"dev", "--data-dir", filepath.Join(dir, "dev"), "--listen", "127.0.0.1:0"}, small...),
			[]string{clampModel, "256 tokens", "2048 tokens"}},
		{"worker, the catalog's kv_pool_bytes", append(append([]string{"worker"}, noNATS...), "--catalog", catFile, "--threads", "1"),
			[]string{clampModel, "160 tokens", "10 pages of 16", "1024 tokens"}},
		{"worker, a pool rounding up to the window still refuses a larger --context",
			append(append([]string{"worker"}, noNATS...), "--model", clampModel+"="+model, "--kv-pool-tokens", "1020", "--context", "1040"),
			[]string{"1024 tokens", "1040 tokens"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			var out, errb syncBuffer
			code := run(ctx, tc.args, &out, &errb)
			if ctx.Err() != nil {
				t.Fatalf("still running after a minute: it started instead of refusing\n%s", errb.String())
			}
			if code != 1 {
				t.Fatalf("exit %d, want 1\n%s", code, errb.String())
			}
			for _, w := range tc.want {
				if !strings.Contains(errb.String(), w) {
					t.Errorf("stderr does not name %q:\n%s", w, errb.String())
				}
			}
		})
	}
}

// syncBuffer is a node's stdout or stderr, read while the node writes it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// node is a bulkhead subcommand running in-process until the test ends.
type node struct {
	stdout, stderr syncBuffer
	cancel         context.CancelFunc
	code           chan int
}

func startNode(t *testing.T, args ...string) *node {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	n := &node{cancel: cancel, code: make(chan int, 1)}
	go func() { n.code <- run(ctx, args, &n.stdout, &n.stderr) }()
	t.Cleanup(func() {
		n.stop(t)
		if t.Failed() {
			t.Logf("--- %s stderr:\n%s", args[0], n.stderr.String())
		}
	})
	return n
}

// stop ends the node and checks it exited cleanly.
func (n *node) stop(t *testing.T) {
	t.Helper()
	n.cancel()
	select {
	case code, ok := <-n.code:
		if ok && code != 0 {
			t.Errorf("exit %d after shutdown", code)
		}
		if ok {
			close(n.code)
		}
	case <-time.After(30 * time.Second):
		t.Errorf("still running 30s after shutdown")
	}
}

// httpJSON sends a request with token and decodes the JSON answer into out.
func httpJSON(t *testing.T, method, url, token, body string, out any) int {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		t.Fatalf("%s %s: status %d, body not JSON: %v", method, url, resp.StatusCode, err)
	}
	return resp.StatusCode
}

// windows returns the windows an edge advertises for model: context_window
// in /ai/models/search, then context_window and max_model_len in /v1/models.
func windows(t *testing.T, base, token, model string) [3]int {
	t.Helper()
	var search struct {
		Result []struct {
			Name       string `json:"name"`
			Properties []struct {
				PropertyID string `json:"property_id"`
				Value      string `json:"value"`
			} `json:"properties"`
		} `json:"result"`
	}
	if code := httpJSON(t, "GET", base+"/ai/models/search", token, "", &search); code != 200 {
		t.Fatalf("/ai/models/search: status %d", code)
	}
	var list struct {
		Data []struct {
			ID            string `json:"id"`
			ContextWindow int    `json:"context_window"`
			MaxModelLen   int    `json:"max_model_len"`
		} `json:"data"`
	}
	if code := httpJSON(t, "GET", base+"/v1/models", token, "", &list); code != 200 {
		t.Fatalf("/v1/models: status %d", code)
	}
	out := [3]int{-1, -1, -1}
	for _, m := range search.Result {
		for _, p := range m.Properties {
			if m.Name == model && p.PropertyID == "context_window" {
				if _, err := fmt.Sscan(p.Value, &out[0]); err != nil {
					t.Fatalf("/ai/models/search context_window %q: %v", p.Value, err)
				}
			}
		}
	}
	for _, m := range list.Data {
		if m.ID == model {
			out[1], out[2] = m.ContextWindow, m.MaxModelLen
		}
	}
	return out
}

// advertised returns the window an edge advertises for model, failing the
// test unless /ai/models/search and /v1/models (context_window and
// max_model_len) all give it.
func advertised(t *testing.T, base, token, model string) int {
	t.Helper()
	w := windows(t, base, token, model)
	if w[0] != w[1] || w[1] != w[2] || w[0] <= 0 {
		t.Fatalf("windows disagree or are missing: /ai/models/search %d, /v1/models context_window %d, max_model_len %d", w[0], w[1], w[2])
	}
	return w[0]
}

// advertisesAll reports whether every endpoint advertises want.
func advertisesAll(t *testing.T, base, token, model string, want int) bool {
	return windows(t, base, token, model) == [3]int{want, want, want}
}

// longPrompt is text of about 300 stories260K tokens: under the trained 2048
// window, over a 256-token pool.
func longPrompt(t *testing.T) string {
	t.Helper()
	m, err := engine.Load(refdatatest.Path(t, "models/stories260K.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	p := strings.Repeat("Once upon a time there was a cat. ", 30)
	if n := len(m.Tokenizer.Encode(p, true, false)); n < 280 || n > 400 {
		t.Fatalf("the long prompt is %d tokens, want about 300", n)
	}
	return p
}

// runStatus posts a native run request and returns the HTTP status and the
// first error code (0 on success).
func runStatus(t *testing.T, base, token, model, body string) (int, int) {
	t.Helper()
	var env struct {
		Success bool `json:"success"`
		Errors  []struct {
			Code int `json:"code"`
		} `json:"errors"`
	}
	status := httpJSON(t, "POST", base+"/ai/run/"+model, token, body, &env)
	if len(env.Errors) > 0 {
		return status, env.Errors[0].Code
	}
	return status, 0
}

// TestDevClampContext runs dev with a 256-token pool, a 2048-token window and
// --clamp-context: it serves, advertises 256 everywhere, refuses a 300-token
// prompt at the edge with 413/3006 and serves one that fits.
func TestDevClampContext(t *testing.T) {
	model := refdatatest.Path(t, "models/stories260K.gguf")
	dir := t.TempDir()
	addr := freeAddr(t)
	dev := startNode(t, "dev", "--data-dir", dir, "--listen", addr, "--model", clampModel+"="+model,
		"--kv-pool-tokens", "256", "--context", "2048", "--clamp-context", "--threads", "1", "--log-format", "text")
	testkit.Poll(t, time.Minute, testkit.Cond("dev to serve", func() bool { return strings.Contains(dev.stdout.String(), "serving") }))
	key, err := auth.LoadOrCreateDevKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := key.Mint("acme", []string{auth.ScopeRun, auth.ScopeRead}, nil, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + addr
	prompt, _ := json.Marshal(longPrompt(t))
	if !strings.Contains(dev.stderr.String(), "level=WARN") || !strings.Contains(dev.stderr.String(), "--clamp-context") {
		t.Errorf("no WARN line about the clamp in the log:\n%s", dev.stderr.String())
	}
	if got := advertised(t, base, tok, clampModel); got != 256 {
		t.Fatalf("advertised window %d, want the pool's 256", got)
	}
	tests := []struct {
		name       string
		body       string
		wantStatus int
		wantCode   int
	}{
		{"300-token prompt", fmt.Sprintf(`{"prompt":%s,"raw":true,"max_tokens":1}`, prompt), 413, 3006},
		{"short prompt, max_tokens past the window", `{"prompt":"Once upon a time","raw":true,"max_tokens":300}`, 413, 3006},
		{"fits", `{"prompt":"Once upon a time","raw":true,"max_tokens":8,"temperature":0}`, 200, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			status, code := runStatus(t, base, tok, clampModel, tc.body)
			if status != tc.wantStatus || code != tc.wantCode {
				t.Fatalf("status %d code %d, want %d code %d", status, code, tc.wantStatus, tc.wantCode)
			}
		})
	}
}

// testNATS starts an embedded NATS server and a JetStream client.
func testNATS(t *testing.T) (string, jetstream.JetStream) {
	t.Helper()
	ns := queuetest.Server(t)
	_, js := queuetest.JetStream(t, ns.ClientURL())
	return ns.ClientURL(), js
}

// TestWorkerPublishesCapacity: a clamped worker publishes its window while it
// runs and withdraws it when it stops.
func TestWorkerPublishesCapacity(t *testing.T) {
	url, js := testNATS(t)
	model := refdatatest.Path(t, "models/stories260K.gguf")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	capacities := func() []int {
		got, err := queue.Capacities(ctx, js, clampModel)
		if err != nil {
			t.Fatal(err)
		}
		slices.Sort(got)
		return got
	}
	w1 := startNode(t, "worker", "--nats", url, "--model", clampModel+"="+model, "--kv-pool-tokens", "256", "--context", "2048", "--clamp-context", "--threads", "1")
	testkit.Poll(t, time.Minute, testkit.Cond("the clamped worker's record", func() bool { return slices.Equal(capacities(), []int{256}) }))
	w2 := startNode(t, "worker", "--nats", url, "--model", clampModel+"="+model, "--context", "1024", "--threads", "1")
	testkit.Poll(t, time.Minute, testkit.Cond("both workers' records", func() bool { return slices.Equal(capacities(), []int{256, 1024}) }))
	w1.stop(t)
	if got := capacities(); !slices.Equal(got, []int{1024}) {
		t.Fatalf("after the clamped worker stopped: %v, want [1024]", got)
	}
	w2.stop(t)
	if got := capacities(); len(got) != 0 {
		t.Fatalf("after both stopped: %v, want none", got)
	}
}

// startTestEdge starts the edge command in-process on NATS at url with
// args, on a fresh dev key, and returns its base URL once it listens and a
// token of tenant acme.
func startTestEdge(t *testing.T, url string, args ...string) (base, token string) {
	t.Helper()
	key, err := auth.LoadOrCreateDevKey(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if token, err = key.Mint("acme", []string{auth.ScopeRun, auth.ScopeRead}, nil, time.Hour); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	startNode(t, append([]string{"edge", "--nats", url, "--listen", addr, "--jwks", key.JWKSPath()}, args...)...)
	base = "http://" + addr
	testkit.Poll(t, time.Minute, testkit.Cond("the edge to listen", func() bool {
		resp, err := http.Get(base + "/ai/models/search")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return true
	}))
	return base, token
}

// TestEdgeFollowsWorkerCapacity runs the edge command in-process over a real
// NATS server with a catalog window of 2048, and workers' capacity records
// published beside it: the edge advertises and admits by the smallest live
// worker window, never above its own.
func TestEdgeFollowsWorkerCapacity(t *testing.T) {
	url, js := testNATS(t)
	model := refdatatest.Path(t, "models/stories260K.gguf")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// A worker that published before the edge started.
	if err := queue.PublishCapacity(ctx, js, clampModel, 256, "small"); err != nil {
		t.Fatal(err)
	}
	base, tok := startTestEdge(t, url, "--model", clampModel+"="+model)
	// No polling here: the edge reads the records before it serves.
	if got := advertised(t, base, tok, clampModel); got != 256 {
		t.Fatalf("the edge's first answer advertises %d, want the published 256", got)
	}
	prompt, _ := json.Marshal(longPrompt(t))
	long := fmt.Sprintf(`{"prompt":%s,"raw":true,"max_tokens":1}`, prompt)
	if status, code := runStatus(t, base, tok, clampModel, long); status != 413 || code != 3006 {
		t.Fatalf("300-token prompt under a 256 window: status %d code %d, want 413 code 3006", status, code)
	}

	steps := []struct {
		name string
		do   func() error
		want int
	}{
		{"a larger worker joins: the smallest counts", func() error { return queue.PublishCapacity(ctx, js, clampModel, 1024, "big") }, 256},
		{"the small worker leaves", func() error { return queue.WithdrawCapacity(ctx, js, clampModel, "small") }, 1024},
		{"never above the catalog's own window", func() error { return queue.PublishCapacity(ctx, js, clampModel, 4096, "big") }, 2048},
		{"another model's record does not count", func() error { return queue.PublishCapacity(ctx, js, "@cf/other/model", 16, "x") }, 2048},
		{"a small worker returns", func() error { return queue.PublishCapacity(ctx, js, clampModel, 512, "small") }, 512},
		{"no live worker: the catalog's window", func() error {
			return errors.Join(queue.WithdrawCapacity(ctx, js, clampModel, "small"), queue.WithdrawCapacity(ctx, js, clampModel, "big"))
		}, 2048},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			if err := s.do(); err != nil {
				t.Fatal(err)
			}
			testkit.Poll(t, 30*time.Second, testkit.Cond(fmt.Sprintf("the edge to advertise %d", s.want), func() bool { return advertisesAll(t, base, tok, clampModel, s.want) }))
		})
	}
	t.Run("admission follows the window", func(t *testing.T) {
		// The 300-token prompt fits 2048; with no worker it would only queue,
		// so check it against a limit instead: 256 again refuses it.
		if err := queue.PublishCapacity(ctx, js, clampModel, 256, "small"); err != nil {
			t.Fatal(err)
		}
		testkit.Poll(t, 30*time.Second, testkit.Cond("the edge to advertise 256", func() bool { return advertisesAll(t, base, tok, clampModel, 256) }))
		if status, code := runStatus(t, base, tok, clampModel, long); status != 413 || code != 3006 {
			t.Fatalf("status %d code %d, want 413 code 3006", status, code)
		}
	})
}

// TestFitContext checks the engines' start-up through the flags: the window
// served, the refusal's numbers (engine.PoolError, the pool-fit rule) with
// the flags that would fit it, and a clamp landing in the catalog with a
// WARN line.
func TestFitContext(t *testing.T) {
	path := refdatatest.Path(t, "models/stories260K.gguf")
	tests := []struct {
		name    string
		flags   engineFlags
		budget  kvBudget          // the memory for a pool sized from it
		want    int               // window served (and advertised afterwards)
		wantErr *engine.PoolError // nil when the model starts
	}{
		{"memory unknown: one full window", engineFlags{}, kvBudget{}, 2048, nil},
		{"a share of memory: at least one window", engineFlags{}, kvBudget{memory{1 << 20, "MemAvailable"}, 0.25, 1}, 2048, nil},
		{"a pool that holds the window", engineFlags{kvTokens: 4096}, kvBudget{}, 2048, nil},
		{"too small", engineFlags{kvTokens: 256}, kvBudget{}, 2048, &engine.PoolError{Pages: 16, PageSize: 16, Context: 2048}},
		{"too small, with memory to spare", engineFlags{kvTokens: 256}, kvBudget{memory{1 << 30, "MemAvailable"}, 0.25, 1}, 2048,
			&engine.PoolError{Pages: 16, PageSize: 16, Context: 2048}},
		{"too small, clamped", engineFlags{kvTokens: 256, clamp: true}, kvBudget{}, 256, nil},
		{"clamped to whole pages", engineFlags{kvTokens: 250, clamp: true}, kvBudget{}, 256, nil},
		{"a pool that fits needs no clamp", engineFlags{kvTokens: 2048, clamp: true}, kvBudget{}, 2048, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cat, err := catalog.FromFlags([]string{clampModel + "=" + path})
			if err != nil {
				t.Fatal(err)
			}
			var logs syncBuffer
			tc.flags.threads, tc.flags.scrub, tc.flags.maxBatch, tc.flags.queueSize = 1, "on-free", 1, 1
			engines, stop, err := tc.flags.engines(newLogger(&logs), cat, tc.budget)
			var pe *engine.PoolError
			switch {
			case tc.wantErr == nil && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.wantErr != nil && (!errors.As(err, &pe) || *pe != *tc.wantErr || !errors.Is(err, engine.ErrPoolTooSmall)):
				t.Fatalf("error %v, want %+v", err, *tc.wantErr)
			case tc.wantErr != nil && !strings.Contains(err.Error(), clampModel) || err != nil && !strings.Contains(err.Error(), "--clamp-context"):
				t.Fatalf("error %q names neither the model nor the flags", err)
			case tc.wantErr == nil && engines[clampModel].Context() != tc.want:
				t.Fatalf("window %d, want %d", engines[clampModel].Context(), tc.want)
			}
			if stop != nil {
				stop()
			}
			if adv, _ := cat.EffectiveContext(clampModel); adv != tc.want {
				t.Fatalf("catalog advertises %d, want %d", adv, tc.want)
			}
			if clamped := tc.want < 2048; clamped != strings.Contains(logs.String(), "level=WARN") {
				t.Fatalf("clamped %v, but the log says:\n%s", clamped, logs.String())
			}
		})
	}
}

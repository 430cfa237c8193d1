package main

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bulkhead-ai/bulkhead/edge/auth"
	"github.com/bulkhead-ai/bulkhead/models/refdatatest"
	"github.com/bulkhead-ai/bulkhead/models/testkit"
)

// greedyPrompts are golden prompts of stories260K.
var greedyPrompts = []string{"Once upon a time", "Lily wanted to", "One day, a boy named Tim", "She was very happy because", "Hello"}

type runResult struct {
	Response string
	Prompt   int
	Comp     int
}

// greedyRun posts a greedy native run and returns its response and usage.
func greedyRun(t *testing.T, base, tok, prompt string, maxTokens int) runResult {
	t.Helper()
	p, _ := json.Marshal(prompt)
	status, body := post(t, tok, base+"/ai/run/"+clusterModel,
		fmt.Sprintf(`{"prompt":%s,"raw":true,"max_tokens":%d,"temperature":0}`, p, maxTokens))
	var got struct {
		Result struct {
			Response string `json:"response"`
			Usage    struct {
				PromptTokens     int `json:"prompt_tokens"`
				CompletionTokens int `json:"completion_tokens"`
			} `json:"usage"`
		} `json:"result"`
		Success bool `json:"success"`
	}
	if err := json.Unmarshal(body, &got); err != nil || status != 200 || !got.Success {
		t.Fatalf("%q: status %d, %s", prompt, status, body)
	}
	return runResult{got.Result.Response, got.Result.Usage.PromptTokens, got.Result.Usage.CompletionTokens}
}

// TestDisaggregatedClusterOfProcesses: NATS, a prefill worker and a decode
// worker as separate OS processes (each with its own KV pool, pages crossing
// NATS between them), behind an edge: greedy completions equal those of a
// cluster of unified workers, concurrent requests included.
func TestDisaggregatedClusterOfProcesses(t *testing.T) {
	uni := startClusterRoles(t, "unified")
	uniURL := uni.edge(t)
	split := startClusterRoles(t, "prefill", "decode")
	splitURL := split.edge(t)
	utok, stok := uni.token(t, "acme"), split.token(t, "acme")

	want := make([]runResult, len(greedyPrompts))
	for i, p := range greedyPrompts {
		want[i] = greedyRun(t, uniURL, utok, p, 48)
	}
	got := make([]runResult, len(greedyPrompts))
	var wg sync.WaitGroup
	for i, p := range greedyPrompts {
		wg.Go(func() { got[i] = greedyRun(t, splitURL, stok, p, 48) })
	}
	wg.Wait()
	for i, p := range greedyPrompts {
		if got[i] != want[i] || got[i].Response == "" {
			t.Errorf("%q: disaggregated %+v, unified %+v", p, got[i], want[i])
		}
	}
	if n := strings.Count(split.workers[0].output(), "handed over to a decode worker"); n != len(greedyPrompts) {
		t.Errorf("the prefill worker logged %d hand-overs, want %d", n, len(greedyPrompts))
	}
	for _, w := range split.workers {
		if strings.Contains(w.output(), `"level":"ERROR"`) {
			t.Errorf("%s logged an error:\n%s", w.proc.Name, w.output())
		}
	}
}

// TestDevDisaggregated: dev --disaggregated with two prefill and two decode
// workers serves the same greedy completions as plain dev.
func TestDevDisaggregated(t *testing.T) {
	if testing.Short() {
		t.Skip("dev cluster test skipped in -short mode")
	}
	model := refdatatest.Path(t, "models/stories260K.gguf")
	serve := func(name string, args ...string) (string, string, *node) {
		dir := t.TempDir()
		addr := freeAddr(t)
		all := append([]string{"dev", "--data-dir", dir, "--listen", addr, "--model", clusterModel + "=" + model,
			"--threads", "1", "--kv-poison"}, args...)
		dev := startNode(t, all...)
		testkit.Poll(t, time.Minute, testkit.Cond(name+" to serve", func() bool { return strings.Contains(dev.stdout.String(), "serving") }))
		key, err := auth.LoadOrCreateDevKey(dir)
		if err != nil {
			t.Fatal(err)
		}
		tok, err := key.Mint("acme", []string{auth.ScopeRun, auth.ScopeRead}, nil, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return "http://" + addr, tok, dev
	}
	uniURL, utok, _ := serve("dev")
	splitURL, stok, split := serve("dev --disaggregated", "--disaggregated", "--prefill-workers", "2", "--decode-workers", "2")
	for _, p := range greedyPrompts {
		want := greedyRun(t, uniURL, utok, p, 32)
		got := greedyRun(t, splitURL, stok, p, 32)
		if got != want || got.Response == "" {
			t.Errorf("%q: disaggregated %+v, unified %+v", p, got, want)
		}
	}
	if n := strings.Count(split.stderr.String(), "handed over to a decode worker"); n != len(greedyPrompts) {
		t.Errorf("dev logged %d hand-overs, want %d", n, len(greedyPrompts))
	}
	t.Run("bad worker counts", func(t *testing.T) {
		_, stderr, code := bulkhead(t, "dev", "--disaggregated", "--decode-workers", "0")
		if code != 2 || !strings.Contains(stderr, "--decode-workers 0") {
			t.Errorf("exit %d, stderr %q", code, stderr)
		}
	})
	t.Run("bad role", func(t *testing.T) {
		_, stderr, code := bulkhead(t, "worker", "--role", "both", "--model", clusterModel+"="+model)
		if code != 2 || !strings.Contains(stderr, `role "both"`) {
			t.Errorf("exit %d, stderr %q", code, stderr)
		}
	})
}

// TestCanaryDisaggregated is issue 4's acceptance run: `bulkhead canary` with 8
// tenants, 400 requests, concurrency 8 and 20% over-long prompts against
// `dev --disaggregated`, whose NaN-poisoned pools are small enough that pages
// are reused many times over. It must report no foreign text, no response that
// differs from its quiet reference, and every over-long prompt refused. Each
// tenant also uploads a LoRA adapter (--lora), and a third of the prompts run
// under it as well as without it: KV taken across the adapter would change
// an answer.
func TestCanaryDisaggregated(t *testing.T) {
	if testing.Short() {
		t.Skip("canary run skipped in -short mode")
	}
	dir := t.TempDir()
	bin := buildBinary(t, dir)
	addr := freeAddr(t)
	dev := start(t, "dev", bin, "dev", "--data-dir", dir, "--listen", addr,
		"--model", clusterModel+"="+refdatatest.Path(t, "models/stories260K.gguf"),
		"--disaggregated", "--prefill-workers", "2", "--decode-workers", "2",
		"--context", "512", "--kv-pool-tokens", "1024", "--kv-poison", "--threads", "1")
	testkit.Poll(t, time.Minute, testkit.Cond("dev to serve", func() bool { return strings.Contains(dev.output(), "serving") }))

	adapter := filepath.Join(dir, "canary-lora.gguf")
	if out, errOut, code := bulkhead(t, "models", "synth", "--lora", "8", "--targets", "all", "--base", refdatatest.Path(t, "models/stories260K.gguf"), "--out", adapter); code != 0 {
		t.Fatalf("models synth --lora: %s %s", out, errOut)
	}
	stdout, stderr, code := bulkhead(t, "canary", "--edge", "http://"+addr, "--key-dir", dir,
		"--tenants", "8", "--requests", "400", "--concurrency", "8", "--oversize-fraction", "0.2", "--lora", adapter, "--json")
	if code != 0 {
		t.Fatalf("canary exit %d\n%s\n%s", code, stdout, stderr)
	}
	var rep struct {
		ContextWindow int `json:"context_window"`
		Tenants       []struct {
			Checked  int `json:"responses_checked"`
			Differ   int `json:"responses_differ"`
			Oversize int `json:"oversize_sent"`
			Refused  int `json:"oversize_refused"`
			Foreign  int `json:"foreign_text"`
			Pairs    int `json:"adapter_pairs"`
			Same     int `json:"adapter_same"`
		} `json:"tenants"`
	}
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatal(err)
	}
	var checked, oversize, refused, pairs, same int
	for _, tr := range rep.Tenants {
		checked += tr.Checked
		oversize += tr.Oversize
		refused += tr.Refused
		pairs += tr.Pairs
		same += tr.Same
		if tr.Differ != 0 || tr.Foreign != 0 || tr.Same == tr.Pairs {
			t.Errorf("tenant report %+v", tr)
		}
	}
	// 320 prompts fit; the 107 of them at an index divisible by 3 run twice.
	if rep.ContextWindow != 512 || len(rep.Tenants) != 8 || checked != 427 || oversize != 80 || refused != 80 || pairs != 107 {
		t.Fatalf("report %s: want window 512, 8 tenants, 427 responses checked (107 under an adapter), 80 over-long prompts all refused", stdout)
	}
	t.Logf("canary: %d responses checked against their references (%d under the tenant's adapter, %d of them the base model's answer too), %d over-long refused", checked, pairs, same, refused)
}

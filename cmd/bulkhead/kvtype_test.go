package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/bulkhead-ai/bulkhead/edge/auth"
	"github.com/bulkhead-ai/bulkhead/models/refdatatest"
	"github.com/bulkhead-ai/bulkhead/models/testkit"
)

// TestDevKVTypes: dev with --kv-type q8_0, unified and disaggregated (Q8_0
// pages crossing NATS between a prefill and a decode worker), serves exactly
// the greedy completions `bulkhead generate --kv-type q8_0` writes, and logs
// the pool's type; a quantized type on a model whose heads it cannot hold
// (stories260K, 8 values a head) is a start-up error naming why, and an
// unknown type a usage error.
func TestDevKVTypes(t *testing.T) {
	if testing.Short() {
		t.Skip("dev test skipped in -short mode")
	}
	model := refdatatest.Path(t, "models/quant/llama-tiny-q8_0.gguf")
	want := map[string]string{}
	for _, p := range greedyPrompts {
		stdout, stderr, code := bulkhead(t, "generate", "--model", model, "--kv-type", "q8_0", "--prompt", p,
			"--max-tokens", "32", "--temperature", "0", "--threads", "1", "--json")
		if code != 0 {
			t.Fatalf("generate: exit %d: %s", code, stderr)
		}
		var out struct {
			Text string `json:"text"`
		}
		if err := json.Unmarshal([]byte(stdout), &out); err != nil {
			t.Fatal(err)
		}
		want[p] = out.Text
	}
	for _, mode := range [][]string{nil, {"--disaggregated"}} {
		dir := t.TempDir()
		addr := freeAddr(t)
		dev := startNode(t, append([]string{"dev", "--data-dir", dir, "--listen", addr, "--model", clusterModel + "=" + model,
			"--threads", "1", "--kv-poison", "--kv-type", "q8_0"}, mode...)...)
		testkit.Poll(t, time.Minute, testkit.Cond("dev to serve", func() bool { return strings.Contains(dev.stdout.String(), "serving") }))
		key, err := auth.LoadOrCreateDevKey(dir)
		if err != nil {
			t.Fatal(err)
		}
		tok, err := key.Mint("acme", []string{auth.ScopeRun}, nil, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range greedyPrompts {
			if got := greedyRun(t, "http://"+addr, tok, p, 32); got.Response != want[p] || got.Response == "" {
				t.Errorf("%v %q: %q, generate --kv-type q8_0 wrote %q", mode, p, got.Response, want[p])
			}
		}
		logs := dev.stdout.String() + dev.stderr.String()
		if !strings.Contains(logs, "kv_type=q8_0") && !strings.Contains(logs, `"kv_type":"q8_0"`) {
			t.Errorf("%v: no model logged kv_type q8_0", mode)
		}
		if n := strings.Count(logs, "handed over to a decode worker"); mode != nil && n != len(greedyPrompts) {
			t.Errorf("dev --disaggregated logged %d hand-overs, want %d", n, len(greedyPrompts))
		}
	}
	stories := refdatatest.Path(t, "models/stories260K.gguf")
	_, stderr, code := bulkhead(t, "generate", "--model", stories, "--kv-type", "q8_0", "--prompt", "x")
	if code != 1 || !strings.Contains(stderr, "head size 8 is not a multiple of 32") {
		t.Errorf("q8_0 on stories260K: exit %d, %q", code, stderr)
	}
	for _, args := range [][]string{{"generate", "--model", stories, "--kv-type", "q5_0", "--prompt", "x"}, {"worker", "--kv-type", "f32"}} {
		if _, stderr, code := bulkhead(t, args...); code != 2 || !strings.Contains(stderr, "--kv-type") {
			t.Errorf("%v: exit %d, %q", args, code, stderr)
		}
	}
}

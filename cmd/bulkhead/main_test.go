package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bulkhead-ai/bulkhead/models/refdatatest"
	"github.com/bulkhead-ai/bulkhead/models/testkit"
)

// TestMain fails the run if goroutines outlive the tests: in-process
// commands, servers and the processes' readers must all have stopped.
// TestMain points the user's configuration directory (dev's and nats's
// default data directory) at a temporary one, for this process and the
// binaries it starts: no test writes into the real one.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "bulkhead-test-config-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Setenv("XDG_CONFIG_HOME", dir)
	code := testkit.Run(m)
	os.RemoveAll(dir)
	os.Exit(code)
}

// bulkhead runs the command line in-process and returns stdout, stderr and the
// exit code.
func bulkhead(t testing.TB, args ...string) (string, string, int) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(context.Background(), args, &out, &errb)
	return out.String(), errb.String(), code
}

func TestGenerateJSONMatchesLlamaCpp(t *testing.T) {
	model := refdatatest.Path(t, "models/stories260K.gguf")
	b, err := os.ReadFile(refdatatest.Path(t, "models/golden/stories260K-greedy.json"))
	if err != nil {
		t.Fatal(err)
	}
	var golden struct {
		Cases []struct {
			Prompt           string  `json:"prompt"`
			PromptTokens     []int32 `json:"prompt_tokens"`
			CompletionTokens []int32 `json:"completion_tokens"`
		} `json:"cases"`
	}
	if err := json.Unmarshal(b, &golden); err != nil {
		t.Fatal(err)
	}
	for _, c := range golden.Cases {
		t.Run(c.Prompt, func(t *testing.T) {
			stdout, stderr, code := bulkhead(t, "generate", "--model", model, "--prompt", c.Prompt,
				"--max-tokens", fmt.Sprint(len(c.CompletionTokens)), "--temperature", "0", "--threads", "1", "--json")
			if code != 0 {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			var got struct {
				PromptTokens     []int32 `json:"prompt_tokens"`
				CompletionTokens []int32 `json:"completion_tokens"`
				Text             string  `json:"text"`
			}
			if err := json.Unmarshal([]byte(stdout), &got); err != nil {
				t.Fatalf("output is not one JSON object: %v\n%s", err, stdout)
			}
			if fmt.Sprint(got.PromptTokens) != fmt.Sprint(c.PromptTokens) {
				t.Errorf("prompt_tokens %v, llama.cpp %v", got.PromptTokens, c.PromptTokens)
			}
			if fmt.Sprint(got.CompletionTokens) != fmt.Sprint(c.CompletionTokens) {
				t.Errorf("completion_tokens\n got %v\nwant %v", got.CompletionTokens, c.CompletionTokens)
			}
		})
	}
}

// TestTokenizeConformance runs llama.cpp's vocab conformance cases through
// `bulkhead tokenize --json`: every 8th case of each vocabulary and its last
// (the longest text among them). The tokenizer's own TestConformance runs
// every case against the library; this checks the command's wiring, and each
// run loads the vocabulary again (about half a second under -race for the
// 128k-152k ones), so it does not repeat all of them.
func TestTokenizeConformance(t *testing.T) {
	for _, vocab := range []string{"llama-spm", "llama-bpe", "qwen2", "gpt-2"} {
		t.Run(vocab, func(t *testing.T) {
			model := refdatatest.Path(t, "tokenizer/ggml-vocab-"+vocab+".gguf")
			inp, err := os.ReadFile(model + ".inp")
			if err != nil {
				t.Fatal(err)
			}
			out, err := os.ReadFile(model + ".out")
			if err != nil {
				t.Fatal(err)
			}
			texts := strings.Split(string(inp), "\n__ggml_vocab_test__\n")
			texts = texts[:len(texts)-1] // the file ends with a separator
			want := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
			if len(texts) != len(want) || len(texts) == 0 {
				t.Fatalf("%d inputs, %d outputs", len(texts), len(want))
			}
			for i, text := range texts {
				if i%8 != 0 && i != len(texts)-1 {
					continue
				}
				stdout, stderr, code := bulkhead(t, "tokenize", "--model", model, "--text", text, "--json", "--no-bos")
				if code != 0 {
					t.Fatalf("case %d: exit %d: %s", i, code, stderr)
				}
				var got struct {
					Tokens []int32 `json:"tokens"`
				}
				if err := json.Unmarshal([]byte(stdout), &got); err != nil {
					t.Fatalf("case %d: %v: %s", i, err, stdout)
				}
				ids := make([]string, len(got.Tokens))
				for j, id := range got.Tokens {
					ids[j] = fmt.Sprint(id)
				}
				if g := strings.Join(ids, " "); g != strings.TrimSpace(want[i]) {
					t.Errorf("case %d %q:\n got %s\nwant %s", i, text, g, strings.TrimSpace(want[i]))
				}
			}
		})
	}
}

func TestTokenizeAddsBOS(t *testing.T) {
	stdout, stderr, code := bulkhead(t, "tokenize", "--model", refdatatest.Path(t, "models/stories260K.gguf"), "--text", "Once upon a time", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if strings.TrimSpace(stdout) != `{"tokens":[1,403,407,261,378]}` {
		t.Fatalf("got %s", stdout)
	}
}

func TestSynthThenGenerate(t *testing.T) {
	out := filepath.Join(t.TempDir(), "m.gguf")
	if _, stderr, code := bulkhead(t, "models", "synth", "--arch", "llama", "--shape", "stories260k", "--type", "f32", "--seed", "7", "--out", out); code != 0 {
		t.Fatalf("synth: exit %d: %s", code, stderr)
	}
	stdout, stderr, code := bulkhead(t, "generate", "--model", out, "--prompt", "hello", "--max-tokens", "8", "--temperature", "0", "--json")
	if code != 0 {
		t.Fatalf("generate: exit %d: %s", code, stderr)
	}
	var got struct {
		CompletionTokens []int32 `json:"completion_tokens"`
	}
	if err := json.Unmarshal([]byte(stdout), &got); err != nil || len(got.CompletionTokens) == 0 {
		t.Fatalf("generate output %q: %v", stdout, err)
	}
	stdout, stderr, code = bulkhead(t, "bench", "engine", "--model", out, "--prompt-tokens", "32", "--gen-tokens", "8", "--batch", "2", "--json")
	if code != 0 {
		t.Fatalf("bench: exit %d: %s", code, stderr)
	}
	var bench map[string]any
	if err := json.Unmarshal([]byte(stdout), &bench); err != nil {
		t.Fatalf("bench output %q: %v", stdout, err)
	}
	for _, k := range []string{"prefill_tokens_per_s", "decode_tokens_per_s", "aggregate_tokens_per_s"} {
		if v, ok := bench[k].(float64); !ok || !(v > 0) {
			t.Errorf("bench output %s = %v, want a positive number: %s", k, bench[k], stdout)
		}
	}
}

func TestUsageErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no command", nil, 2, "Usage"},
		{"unknown command", []string{"frobnicate"}, 2, "unknown command"},
		{"generate without model", []string{"generate", "--prompt", "x"}, 2, "--model"},
		{"tokenize without text", []string{"tokenize", "--model", "x.gguf"}, 2, "--text"},
		{"missing model file", []string{"generate", "--model", "/nonexistent.gguf", "--prompt", "x"}, 1, "no such file"},
		{"not a gguf file", []string{"tokenize", "--model", "main.go", "--text", "x"}, 1, "not a GGUF"},
		{"synth unknown shape", []string{"models", "synth", "--shape", "gpt-5", "--out", "/tmp/x.gguf"}, 1, "gpt-5"},
		{"synth bad type", []string{"models", "synth", "--shape", "stories260k", "--type", "q3_z", "--out", "/tmp/x.gguf"}, 2, "q3_z"},
		{"synth arch and shape disagree", []string{"models", "synth", "--arch", "qwen3", "--shape", "stories15m", "--out", "/tmp/x.gguf"}, 2, "stories15m is llama, not qwen3"},
		{"synth unknown arch", []string{"models", "synth", "--arch", "mamba", "--out", "/tmp/x.gguf"}, 2, "mamba"},
		{"synth neither shape nor arch", []string{"models", "synth", "--out", "/tmp/x.gguf"}, 2, "--shape, --arch"},
		{"synth without out", []string{"models", "synth", "--arch", "phi3"}, 2, "--out"},
		{"bench without engine", []string{"bench"}, 2, "bench engine"},
		{"worker, KV memory share too large", []string{"worker", "--kv-memory-share", "0.95"}, 2, "--kv-memory-share"},
		{"dev, no KV memory share", []string{"dev", "--kv-memory-share", "0"}, 2, "--kv-memory-share"},
		{"cluster without server name", []string{"nats", "--cluster-name", "c", "--routes", "nats-route://127.0.0.1:6222"}, 2, "--server-name"},
		{"routes without cluster", []string{"nats", "--routes", "nats-route://127.0.0.1:6222"}, 2, "--cluster-name"},
		{"cluster TLS half given", []string{"nats", "--cluster-name", "c", "--server-name", "a", "--routes", "nats-route://127.0.0.1:6222",
			"--cluster-tls-cert", "x.pem"}, 2, "--cluster-tls-ca"},
		{"nats, tenant creds without auth", []string{"nats", "--no-auth", "--tenant-creds", "acme"}, 2, "--tenant-creds needs credentials"},
		{"nats, empty auth dir", []string{"nats", "--auth-dir", ""}, 2, "--auth-dir is empty"},
		{"nats, listen without port", []string{"nats", "--no-auth", "--listen", "127.0.0.1"}, 2, "--listen"},
		{"nats, listen port not a number", []string{"nats", "--no-auth", "--listen", "127.0.0.1:http"}, 2, `--listen port "http"`},
		{"routes off loopback in the clear", []string{"nats", "--cluster-name", "c", "--server-name", "a", "--listen", "127.0.0.1:0",
			"--cluster-listen", "127.0.0.1:0", "--routes", "nats-route://10.9.8.7:6222", "--store-dir", "/tmp/bulkhead-usage-test-js"}, 1, "without mutual TLS"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			stdout, stderr, code := bulkhead(t, tc.args...)
			if code != tc.code || !strings.Contains(stdout+stderr, tc.want) {
				t.Fatalf("exit %d (want %d), output %q (want it to mention %q)", code, tc.code, stdout+stderr, tc.want)
			}
		})
	}
}

func TestFlagsFromEnvironment(t *testing.T) {
	t.Setenv("BULKHEAD_MAX_TOKENS", "3")
	t.Setenv("BULKHEAD_TEMPERATURE", "0")
	stdout, stderr, code := bulkhead(t, "generate", "--model", refdatatest.Path(t, "models/stories260K.gguf"), "--prompt", "Once upon a time", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var got struct {
		CompletionTokens []int32 `json:"completion_tokens"`
	}
	if err := json.Unmarshal([]byte(stdout), &got); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got.CompletionTokens) != "[432 383 286]" {
		t.Fatalf("BULKHEAD_MAX_TOKENS=3 BULKHEAD_TEMPERATURE=0 gave %v, want the first 3 greedy tokens [432 383 286]", got.CompletionTokens)
	}
	t.Setenv("BULKHEAD_MAX_TOKENS", "many")
	if _, stderr, code := bulkhead(t, "generate", "--model", "x", "--prompt", "x"); code != 2 || !strings.Contains(stderr, "BULKHEAD_MAX_TOKENS") {
		t.Fatalf("a bad environment value: exit %d, %q; want exit 2 naming the variable", code, stderr)
	}
}

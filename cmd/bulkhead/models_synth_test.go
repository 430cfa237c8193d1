package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/bulkhead-ai/bulkhead/models/gguf"
)

// TestSynthArch writes each architecture's tiny shape with --arch alone and
// checks the file's architecture, and that --help lists all six.
func TestSynthArch(t *testing.T) {
	for _, tc := range []struct{ arch, shape string }{
		{"llama", "llama-tiny"}, {"qwen2", "qwen2-tiny"}, {"qwen3", "qwen3-tiny"},
		{"gemma2", "gemma2-tiny"}, {"gemma3", "gemma3-tiny"}, {"phi3", "phi3-tiny"},
	} {
		t.Run(tc.arch, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "m.gguf")
			stdout, stderr, code := bulkhead(t, "models", "synth", "--arch", tc.arch, "--type", "q8_0", "--out", out)
			if code != 0 || !strings.Contains(stdout, tc.shape) {
				t.Fatalf("exit %d, stdout %q, stderr %q; want 0 and a line naming %s", code, stdout, stderr, tc.shape)
			}
			f, err := gguf.Open(out)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if a, _ := f.String("general.architecture"); a != tc.arch {
				t.Errorf("general.architecture = %q, want %q", a, tc.arch)
			}
			if n, _ := f.String("general.name"); n != "bulkhead-synth-"+tc.shape {
				t.Errorf("general.name = %q, want the %s shape", n, tc.shape)
			}
		})
	}
	_, stderr, code := bulkhead(t, "models", "synth", "--help")
	if code != 0 {
		t.Fatalf("--help: exit %d", code)
	}
	for _, a := range []string{"llama, qwen2, qwen3, gemma2, gemma3, phi3", "qwen3-0.6b (qwen3)", "gemma3-270m (gemma3)", "tinyllama-1.1b (llama)"} {
		if !strings.Contains(stderr, a) {
			t.Errorf("--help does not mention %q:\n%s", a, stderr)
		}
	}
}

// TestSynthAndGenerateLoRA: models synth --lora writes an adapter as GGUF
// and PEFT for a base file; generate --lora runs either with the same
// tokens, which differ from the base model's; bad adapters and flags are
// refused by name.
func TestSynthAndGenerateLoRA(t *testing.T) {
	dir := t.TempDir()
	base, other := filepath.Join(dir, "base.gguf"), filepath.Join(dir, "qwen3.gguf")
	ad, peft := filepath.Join(dir, "a.gguf"), filepath.Join(dir, "a-peft")
	for _, args := range [][]string{
		{"models", "synth", "--arch", "llama", "--out", base, "--seed", "1"},
		{"models", "synth", "--arch", "qwen3", "--out", other, "--seed", "1"},
		{"models", "synth", "--lora", "8", "--targets", "attn,ffn_down", "--base", base, "--seed", "3", "--out", ad, "--peft", peft},
	} {
		if stdout, stderr, code := bulkhead(t, args...); code != 0 {
			t.Fatalf("%v: exit %d, %s %s", args, code, stdout, stderr)
		}
	}
	gen := func(extra ...string) (string, string, int) {
		args := append([]string{"generate", "--model", base, "--prompt", "Once upon a time", "--max-tokens", "12", "--temperature", "0", "--json"}, extra...)
		return bulkhead(t, args...)
	}
	plain, _, _ := gen()
	withGGUF, stderr, code := gen("--lora", ad)
	if code != 0 {
		t.Fatalf("--lora %s: exit %d: %s", ad, code, stderr)
	}
	withPEFT, stderr, code := gen("--lora", peft+":1")
	if code != 0 {
		t.Fatalf("--lora %s: exit %d: %s", peft, code, stderr)
	}
	if withGGUF != withPEFT || withGGUF == plain {
		t.Fatalf("GGUF adapter %s\nPEFT adapter %s\nno adapter %s\nwant the adapters equal and different from none", withGGUF, withPEFT, plain)
	}
	halved, _, _ := gen("--lora", ad+":0.5")
	if halved == withGGUF {
		t.Errorf("--lora %s:0.5 gives the full scale's tokens", ad)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"generate", "--model", other, "--prompt", "x", "--lora", ad}, "the adapter is for llama, the model is qwen3"},
		{[]string{"generate", "--model", base, "--prompt", "x", "--lora", base}, "not a LoRA adapter"},
		{[]string{"generate", "--model", base, "--prompt", "x", "--lora", filepath.Join(dir, "missing.gguf")}, "missing.gguf"},
		{[]string{"models", "synth", "--lora", "64", "--base", base, "--out", filepath.Join(dir, "x.gguf")}, "rank 64"},
		{[]string{"models", "synth", "--lora", "8", "--targets", "lm_head", "--base", base, "--out", filepath.Join(dir, "x.gguf")}, `unknown projection "lm_head"`},
		{[]string{"models", "synth", "--lora", "8", "--out", filepath.Join(dir, "x.gguf")}, "--lora needs --base"},
	} {
		_, stderr, code := bulkhead(t, tc.args...)
		if code == 0 || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want an error naming %q", tc.args, code, stderr, tc.want)
		}
	}
}

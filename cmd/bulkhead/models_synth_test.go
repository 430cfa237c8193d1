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

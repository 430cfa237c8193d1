package main

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/bulkhead-ai/bulkhead/models/refdatatest"
)

// TestGenerateGoldenFiles: `bulkhead generate --json` reproduces llama.cpp's
// greedy continuations for the model in every GGUF type (either of llama.cpp's
// CPU paths) and for the tiny qwen3, gemma2, gemma3 and phi3 models; a
// divergence is excused only at a near-tie, and logged.
func TestGenerateGoldenFiles(t *testing.T) {
	alt := map[[2]string]refdatatest.GoldenCase{}
	for _, c := range refdatatest.Golden(t, "models/quant/golden-norepack.json") {
		alt[[2]string{c.File, c.Prompt}] = c
	}
	cases := append(refdatatest.Golden(t, "models/quant/golden.json"), refdatatest.Golden(t, "models/archs/golden.json")...)
	for _, c := range cases {
		t.Run(filepath.Base(c.File)+"/"+c.Prompt, func(t *testing.T) {
			stdout, stderr, code := bulkhead(t, "generate", "--model", c.File, "--prompt", c.Prompt,
				"--max-tokens", fmt.Sprint(len(c.CompletionTokens)), "--temperature", "0", "--threads", "2", "--json")
			if code != 0 {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			var got struct {
				PromptTokens     []int32 `json:"prompt_tokens"`
				CompletionTokens []int32 `json:"completion_tokens"`
			}
			if err := json.Unmarshal([]byte(stdout), &got); err != nil {
				t.Fatalf("output is not one JSON object: %v\n%s", err, stdout)
			}
			if fmt.Sprint(got.PromptTokens) != fmt.Sprint(c.PromptTokens) {
				t.Fatalf("prompt_tokens %v, llama.cpp %v", got.PromptTokens, c.PromptTokens)
			}
			ex, err := c.Compare(got.CompletionTokens)
			if err != nil {
				other, ok := alt[[2]string{c.File, c.Prompt}]
				if !ok {
					t.Fatal(err)
				}
				ex2, err2 := other.Compare(got.CompletionTokens)
				if err2 != nil {
					t.Fatalf("repacked path: %v\nno-repack path: %v", err, err2)
				}
				ex = "matches the no-repack path; " + ex2
			}
			if ex != "" {
				t.Log(ex)
			}
		})
	}
}

package engine

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/bulkhead-ai/bulkhead/models/gguf"
	"github.com/bulkhead-ai/bulkhead/models/refdatatest"
	"github.com/bulkhead-ai/bulkhead/models/synth"
	"github.com/bulkhead-ai/bulkhead/workers/kernels"
)

// synthGoldenCase is one of llama.cpp's greedy continuations of a file that
// models/synth writes (testdata/synth_archs_golden.json says how they were
// made).
type synthGoldenCase struct {
	Shape            string    `json:"shape"`
	Type             string    `json:"type"`
	Seed             uint64    `json:"seed"`
	SHA256           string    `json:"sha256"`
	Prompt           string    `json:"prompt"`
	PromptTokens     []int32   `json:"prompt_tokens"`
	CompletionTokens []int32   `json:"completion_tokens"`
	Margins          []float64 `json:"top2_logprob_margins"`
}

// TestSynthArchFiles writes every architecture's tiny synthetic model in
// every type, loads it in the engine and checks 8 greedy tokens per prompt
// against llama.cpp's on the same file, token for token (a divergence only
// excused at a near-tie, refdatatest.NearTie).
func TestSynthArchFiles(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("testdata", "synth_archs_golden.json"))
	if err != nil {
		t.Fatal(err)
	}
	var golden struct {
		Cases []synthGoldenCase `json:"cases"`
	}
	if err := json.Unmarshal(b, &golden); err != nil {
		t.Fatal(err)
	}
	byFile := map[string][]synthGoldenCase{}
	var order []string
	for _, c := range golden.Cases {
		k := c.Shape + "-" + c.Type
		if byFile[k] == nil {
			order = append(order, k)
		}
		byFile[k] = append(byFile[k], c)
	}
	// Each file is written and checked once, then run on every kernel set.
	covered := map[string]bool{}
	paths := map[string]string{}
	dir := t.TempDir()
	for _, k := range order {
		c0 := byFile[k][0]
		covered[c0.Shape] = true
		typ, err := gguf.ParseType(c0.Type)
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, k+".gguf")
		if err := synth.GenerateFile(synth.Config{Shape: c0.Shape, Type: typ, Seed: c0.Seed}, path); err != nil {
			t.Fatal(err)
		}
		if sum := fileSHA256(t, path); sum != c0.SHA256 {
			t.Fatalf("synth wrote %s with sha256 %s, the golden file's has %s: regenerate testdata/synth_archs_golden.json with llama.cpp", k, sum, c0.SHA256)
		}
		paths[k] = path
	}
	for _, ks := range kernelSets(t) {
		for _, k := range order {
			t.Run(ks.String()+"/"+k, func(t *testing.T) { checkSynthFile(t, paths[k], ks, byFile[k]) })
		}
	}
	for _, a := range synth.Archs() {
		if !covered[synth.TinyShape(a)] {
			t.Errorf("no golden case for %s", synth.TinyShape(a))
		}
	}
}

func fileSHA256(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// checkSynthFile runs the greedy cases of one synthetic file laid out for ks.
func checkSynthFile(t *testing.T, path string, ks kernels.Set, cases []synthGoldenCase) {
	m, err := LoadOn(path, ks)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	e := startEngine(t, m, Config{Threads: 2, Poison: true})
	for _, c := range cases {
		t.Run(c.Prompt, func(t *testing.T) {
			res := greedyText(t, e, c.Prompt, c.PromptTokens, len(c.CompletionTokens))
			if len(res.CompletionTokens) != 8 {
				t.Errorf("%d tokens, want 8", len(res.CompletionTokens))
			}
			ref := refdatatest.GoldenCase{Prompt: c.Prompt, CompletionTokens: c.CompletionTokens, Margins: c.Margins}
			ex, err := ref.Compare(res.CompletionTokens)
			if err != nil {
				t.Fatal(err)
			}
			if ex != "" {
				t.Log(ex)
			}
		})
	}
}

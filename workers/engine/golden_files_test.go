package engine

import (
	"path/filepath"
	"testing"

	"github.com/bulkhead-ai/bulkhead/models/refdatatest"
	"github.com/bulkhead-ai/bulkhead/workers/kernels"
)

// goldenGenerate loads each case's model once, checks the prompt's tokens and
// returns a function giving the greedy completion of a case.
// Engines live until the parent test pt ends.
func goldenGenerate(pt *testing.T, ks kernels.Set) func(t *testing.T, c refdatatest.GoldenCase) []int32 {
	engines := map[string]*Engine{}
	return func(t *testing.T, c refdatatest.GoldenCase) []int32 {
		t.Helper()
		e := engines[c.File]
		if e == nil {
			m, err := LoadOn(c.File, ks)
			if err != nil {
				t.Fatalf("load %s: %v", filepath.Base(c.File), err)
			}
			e, err = New(nil, m, Config{Threads: 2, Poison: true})
			if err != nil {
				m.Close()
				t.Fatalf("engine for %s: %v", filepath.Base(c.File), err)
			}
			runEngine(pt, e)
			pt.Cleanup(func() { m.Close() })
			engines[c.File] = e
		}
		return greedyText(t, e, c.Prompt, c.PromptTokens, len(c.CompletionTokens)).CompletionTokens
	}
}

// TestGoldenQuantFiles runs llama.cpp's greedy continuations for the small
// model in every GGUF type (../shared/models/quant). llama.cpp has two CPU
// paths (repacked weights and not); matching either counts, and a divergence
// is excused only at a near-tie (refdatatest.NearTie), which is logged.
func TestGoldenQuantFiles(t *testing.T) {
	repack := refdatatest.Golden(t, "models/quant/golden.json")
	norepack := refdatatest.Golden(t, "models/quant/golden-norepack.json")
	other := map[[2]string]refdatatest.GoldenCase{}
	for _, c := range norepack {
		other[[2]string{c.File, c.Prompt}] = c
	}
	for _, ks := range kernelSets(t) {
		gen := goldenGenerate(t, ks)
		for _, c := range repack {
			t.Run(ks.String()+"/"+filepath.Base(c.File)+"/"+c.Prompt, func(t *testing.T) {
				got := gen(t, c)
				ex, err := c.Compare(got)
				if err != nil {
					alt, ok := other[[2]string{c.File, c.Prompt}]
					if !ok {
						t.Fatal(err)
					}
					ex2, err2 := alt.Compare(got)
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
}

// TestGoldenArchFiles runs llama.cpp's greedy continuations for the tiny
// qwen3, gemma2, gemma3 and phi3 models (../shared/models/archs).
func TestGoldenArchFiles(t *testing.T) {
	for _, ks := range kernelSets(t) {
		gen := goldenGenerate(t, ks)
		for _, c := range refdatatest.Golden(t, "models/archs/golden.json") {
			t.Run(ks.String()+"/"+filepath.Base(c.File)+"/"+c.Prompt, func(t *testing.T) {
				ex, err := c.Compare(gen(t, c))
				if err != nil {
					t.Fatal(err)
				}
				if ex != "" {
					t.Log(ex)
				}
			})
		}
	}
}

package engine

import (
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/bulkhead-ai/bulkhead/models/gguf"
	"github.com/bulkhead-ai/bulkhead/models/synth"
	"github.com/bulkhead-ai/bulkhead/workers/kernels"
)

// embedGolden is testdata/llama_embedding.json: llama.cpp's vectors for
// synth's qwen3-embed-tiny (seed 0) made with llama-tokenize --ids
// --no-parse-special and llama-embedding --embd-output-format array -fa off
// (normalisation 2; --pooling mean for the mean case) from the inputs.
type embedGolden struct {
	Inputs []string `json:"inputs"`
	Cases  []struct {
		Shape, Type, SHA256, Pooling string
		Tokens                       [][]int32
		Vectors                      [][]float32
	} `json:"cases"`
}

func normalized(v []float32) []float32 {
	var s float64
	for _, x := range v {
		s += float64(x) * float64(x)
	}
	out := make([]float32, len(v))
	for i, x := range v {
		out[i] = float32(float64(x) / math.Sqrt(s))
	}
	return out
}

func cosine(a, b []float32) float64 {
	var ab, aa, bb float64
	for i := range a {
		ab += float64(a[i]) * float64(b[i])
		aa += float64(a[i]) * float64(a[i])
		bb += float64(b[i]) * float64(b[i])
	}
	return ab / math.Sqrt(aa*bb)
}

// TestEmbedderMatchesLlamaCpp: a causal embedding model (last-token and
// mean pooling) gives llama.cpp's tokens and vectors, cosine at least
// 0.99999 for F32 and 0.999 for Q8_0, all inputs in one pass, on every
// kernel set; each vector is bit for bit its vector in a pass alone.
func TestEmbedderMatchesLlamaCpp(t *testing.T) {
	b, err := os.ReadFile("testdata/llama_embedding.json")
	if err != nil {
		t.Fatal(err)
	}
	var g embedGolden
	if err := json.Unmarshal(b, &g); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, ks := range kernelSets(t) {
		for _, c := range g.Cases {
			t.Run(ks.String()+"/"+c.Shape+"-"+c.Type+"-"+c.Pooling, func(t *testing.T) {
				typ, err := gguf.ParseType(c.Type)
				if err != nil {
					t.Fatal(err)
				}
				path := filepath.Join(dir, c.Shape+"-"+c.Type+".gguf")
				if _, err := os.Stat(path); err != nil {
					if err := synth.GenerateFile(synth.Config{Shape: c.Shape, Type: typ}, path); err != nil {
						t.Fatal(err)
					}
				}
				if sum := fileSHA256(t, path); sum != c.SHA256 {
					t.Fatalf("synth wrote %s %s with sha256 %s, the golden file's has %s: regenerate testdata/llama_embedding.json with llama.cpp", c.Shape, c.Type, sum, c.SHA256)
				}
				m, err := LoadOn(path, ks)
				if err != nil {
					t.Fatal(err)
				}
				defer m.Close()
				pool := kernels.NewPool(2)
				defer pool.Close()
				pooling := map[string]int{"last": PoolLast, "mean": PoolMean}[c.Pooling]
				e, err := NewEmbedder(m, pool, pooling, 4096)
				if err != nil {
					t.Fatal(err)
				}
				var inputs [][]int32
				for i, text := range g.Inputs {
					ids := m.Tokenizer.Encode(text, true, false)
					if !slices.Equal(ids, c.Tokens[i]) {
						t.Errorf("input %d: tokens %v, llama.cpp's %v", i, ids, c.Tokens[i])
					}
					inputs = append(inputs, ids)
				}
				vecs, err := e.Encode(inputs)
				if err != nil {
					t.Fatal(err)
				}
				minCos, worst := 0.99999, 1.0
				if typ != gguf.TypeF32 {
					minCos = 0.999
				}
				for i, v := range vecs {
					cs := cosine(normalized(v), c.Vectors[i])
					worst = min(worst, cs)
					if !(cs >= minCos) {
						t.Errorf("input %d: cosine %.9f with llama.cpp's, want at least %g", i, cs, minCos)
					}
				}
				t.Logf("worst cosine %.9f (1-cos %.2e) over %d inputs", worst, 1-worst, len(vecs))
				for _, i := range []int{0, 9, 15} {
					alone, err := e.Encode([][]int32{inputs[i]})
					if err != nil {
						t.Fatal(err)
					}
					if !slices.Equal(alone[0], vecs[i]) {
						t.Errorf("input %d: its vector alone differs from its vector in the pass", i)
					}
				}
				if free, total := e.kv.FreePages(), e.kv.TotalPages(); free != total {
					t.Errorf("KV pages held after the passes: %d of %d free", free, total)
				}
			})
		}
	}
}

// TestEmbedderRefuses: no pooling, an empty input, one over the window, an
// id past the vocabulary and a pass over the pool are refused by name.
func TestEmbedderRefuses(t *testing.T) {
	path := filepath.Join(t.TempDir(), "q.gguf")
	if err := synth.GenerateFile(synth.Config{Shape: "qwen3-tiny", Type: gguf.TypeQ8_0}, path); err != nil {
		t.Fatal(err)
	}
	m, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	pool := kernels.NewPool(1)
	defer pool.Close()
	if _, err := NewEmbedder(m, pool, 0, 64); !errors.Is(err, ErrNoPooling) {
		t.Fatalf("a generation model without --pooling: %v", err)
	}
	e, err := NewEmbedder(m, pool, PoolLast, 64)
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		in   [][]int32
		want error
	}{
		"empty":           {[][]int32{{}}, ErrEmbedInput},
		"over the window": {[][]int32{make([]int32, 65)}, ErrContextLength},
		"bad id":          {[][]int32{{1, int32(m.Hyper.Vocab)}}, ErrEmbedInput},
		"over the pass":   {[][]int32{make([]int32, 40), make([]int32, 40)}, ErrPassTooLong},
	} {
		if _, err := e.Encode(tc.in); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", name, err, tc.want)
		}
	}
	if v, err := e.Encode([][]int32{{1, 5, 6}}); err != nil || len(v[0]) != m.Hyper.Embd {
		t.Fatalf("after the refusals: %v", err)
	}
}

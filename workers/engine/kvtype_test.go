package engine

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/bulkhead-ai/bulkhead/models/refdatatest"
	"github.com/bulkhead-ai/bulkhead/workers/kvcache"
)

// kvGoldenCase is one of llama.cpp's greedy continuations with its KV cache
// in Q8_0 or Q4_0 (testdata/kv_golden.json says how they were made).
type kvGoldenCase struct {
	File             string    `json:"file"` // under ../shared/models
	KVType           string    `json:"kv_type"`
	PromptTokens     []int32   `json:"prompt_tokens"`
	CompletionTokens []int32   `json:"completion_tokens"`
	Margins          []float64 `json:"top2_logprob_margins"`
	// The same on llama.cpp's path without repacked weights, where it differs.
	NoRepackTokens  []int32   `json:"norepack_completion_tokens"`
	NoRepackMargins []float64 `json:"norepack_top2_logprob_margins"`
}

// kvNearTie is the top-2 margin under which a greedy step of a golden case
// with a quantized KV cache may flip on rounding alone. A float-order
// difference that moves a value across a rounding boundary flips a code,
// and a code is 1/127 of its block's largest value in Q8_0, 1/8 in Q4_0,
// where an F16 cache rounds at 1/1024 of the value itself: the same rounding
// noise moves logits further, so the bound scales from refdatatest.NearTie.
// (Measured on this file's cases: with an F16 cache no divergence comes
// above 0.02; with Q8_0 two of 95 do, at 0.025 and 0.027; with Q4_0 six, at
// up to 0.064. llama.cpp's own two CPU paths, repacked weights and not,
// diverge from each other in 10 of its quantized cases, at up to 0.018.)
var kvNearTie = map[string]float64{"f16": refdatatest.NearTie, "q8_0": 0.03, "q4_0": 0.08}

// TestGoldenKVTypes runs llama.cpp's greedy continuations with its KV cache
// in F16 (flash attention off, its default), Q8_0 and Q4_0 (-ctk/-ctv, flash
// attention on, which llama.cpp requires for a quantized V; its Walsh-Hadamard
// rotations on, as by default) for every file of ../shared/models/quant and
// models/archs: their 4 golden prompts and a 90-token one that spans six
// pages, 32 tokens each. A divergence is excused only at a near-tie
// (kvNearTie).
func TestGoldenKVTypes(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("testdata", "kv_golden.json"))
	if err != nil {
		t.Fatal(err)
	}
	var golden struct {
		Cases []kvGoldenCase `json:"cases"`
	}
	if err := json.Unmarshal(b, &golden); err != nil {
		t.Fatal(err)
	}
	for _, ks := range kernelSets(t) {
		models := map[string]*Model{}
		engines := map[string]*Engine{}
		excused := 0
		for i, c := range golden.Cases {
			if models[c.File] == nil {
				m, err := LoadOn(refdatatest.Path(t, "models/"+c.File), ks)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { m.Close() })
				models[c.File] = m
			}
			k := c.File + "/" + c.KVType
			if engines[k] == nil {
				engines[k] = startEngine(t, models[c.File], Config{Threads: 2, Poison: true, KVType: kvcache.DType(c.KVType)})
			}
			res, err := engines[k].Generate(context.Background(), greedy(c.PromptTokens, len(c.CompletionTokens)))
			if err != nil {
				t.Fatalf("%s: %v", k, err)
			}
			g := refdatatest.GoldenCase{CompletionTokens: c.CompletionTokens, Margins: c.Margins}
			ex, err := g.CompareWithin(res.CompletionTokens, kvNearTie[c.KVType])
			if err != nil && c.NoRepackTokens != nil {
				alt := refdatatest.GoldenCase{CompletionTokens: c.NoRepackTokens, Margins: c.NoRepackMargins}
				if ex2, err2 := alt.CompareWithin(res.CompletionTokens, kvNearTie[c.KVType]); err2 == nil {
					ex, err = "matches the no-repack path; "+ex2, nil
				}
			}
			if err != nil {
				t.Errorf("%s %s case %d (%d prompt tokens): %v", ks, k, i, len(c.PromptTokens), err)
			}
			if ex != "" {
				excused++
				t.Logf("%s %s case %d: %s", ks, k, i, ex)
			}
		}
		t.Logf("%s: %d cases, %d diverge at a near-tie", ks, len(golden.Cases), excused)
	}
}

// TestKVTypeNeedsBlocks: a quantized KV type on a model whose head size is
// not a multiple of 32 (stories260K: 8) is a start-up error naming both, as
// llama.cpp refuses it; an unknown type is refused too.
func TestKVTypeNeedsBlocks(t *testing.T) {
	m := loadStoriesOn(t, kernelSets(t)[0])
	for _, typ := range []kvcache.DType{kvcache.DTypeQ8_0, kvcache.DTypeQ4_0, "q5_0"} {
		_, err := New(nil, m, Config{Threads: 1, KVTokens: 512, KVType: typ})
		if !errors.Is(err, ErrConfig) {
			t.Fatalf("KV type %s on head size 8: %v, want ErrConfig", typ, err)
		}
		t.Log(err)
	}
}

// TestHandoffKVTypes: a prompt prefilled on one engine with a quantized KV
// cache, its pages exported and imported by a decode engine of the same type
// (its pool dirtied by another tenant first), decodes exactly the tokens of
// an unsplit run; a decode engine with an F16 cache refuses the pages.
func TestHandoffKVTypes(t *testing.T) {
	m := loadArch(t, "qwen3-tiny-f32.gguf")
	prompt := []int32{1, 291, 376, 400, 428, 352, 303, 267, 265, 282, 295, 433, 291, 376, 400, 428, 352, 303, 267, 265, 282}
	const n = 24
	for _, kt := range []kvcache.DType{kvcache.DTypeQ8_0, kvcache.DTypeQ4_0} {
		t.Run(string(kt), func(t *testing.T) {
			unified := startEngine(t, m, Config{Threads: 1, Poison: true, PageSize: 4, KVType: kt})
			want, err := unified.Generate(context.Background(), greedy(prompt, n))
			if err != nil {
				t.Fatal(err)
			}
			a := startEngine(t, m, Config{Threads: 2, Poison: true, PageSize: 4, ChunkSize: 3, KVType: kt})
			b := startEngine(t, m, Config{Threads: 1, Poison: true, PageSize: 4, KVTokens: 2048, KVType: kt})
			dirt := greedy(prompt[:9], 30)
			dirt.Owner = kvcache.Owner{Namespace: "other", Request: "dirt"}
			if _, err := b.Generate(context.Background(), dirt); err != nil {
				t.Fatal(err)
			}
			pre, err := a.Prefill(context.Background(), greedy(prompt, n))
			if err != nil {
				t.Fatal(err)
			}
			if got := a.KV().Layout().DType; got != string(kt) {
				t.Fatalf("prefill pool layout type %s, want %s", got, kt)
			}
			f16 := startEngine(t, m, Config{Threads: 1, PageSize: 4, KVTokens: 2048})
			refused, err := f16.NewSequenceFor(greedy(prompt, n))
			if err != nil {
				t.Fatal(err)
			}
			page, err := pre.Seq.ExportPage(0)
			if err != nil {
				t.Fatal(err)
			}
			if err := refused.ImportPage(0, page); !errors.Is(err, kvcache.ErrBadPage) {
				t.Fatalf("an F16 decode pool imports a %s page: %v", kt, err)
			}
			refused.Free()
			req := greedy(prompt, n)
			seq := transfer(t, pre, b, req)
			events, err := b.Resume(context.Background(), req, seq, pre.First)
			if err != nil {
				seq.Free()
				t.Fatal(err)
			}
			var got []int32
			for ev := range events {
				if ev.Err != nil {
					t.Fatal(ev.Err)
				}
				if !ev.Done {
					got = append(got, ev.Token)
				}
			}
			if i := firstDiff(got, want.CompletionTokens); i >= 0 {
				t.Fatalf("token %d differs after the hand-over:\n got %v\nwant %v", i, got, want.CompletionTokens)
			}
		})
	}
}

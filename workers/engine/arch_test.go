package engine

import (
	"context"
	"errors"
	"math"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/bulkhead-ai/bulkhead/models/gguf"
	"github.com/bulkhead-ai/bulkhead/models/refdatatest"
	"github.com/bulkhead-ai/bulkhead/workers/kernels"
	"github.com/bulkhead-ai/bulkhead/workers/kvcache"
)

var archFiles = []string{"qwen3-tiny-f32.gguf", "gemma2-tiny-f32.gguf", "gemma3-tiny-f16.gguf", "phi3-tiny-f16.gguf"}

func loadArch(t testing.TB, name string) *Model {
	t.Helper()
	return loadArchOn(t, name, kernels.Active())
}

// loadArchOn loads a tiny architecture model laid out for ks.
func loadArchOn(t testing.TB, name string, ks kernels.Set) *Model {
	t.Helper()
	m, err := LoadOn(refdatatest.Path(t, "models/archs/"+name), ks)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// TestArchBatchInvariance decodes past the sliding window (16 positions in the
// gemma files) alone, then inside batches on pools that held other data
// (NaN-poisoned, or never scrubbed), with prefill chunks that straddle the
// window's edge: the tokens must not change. A window that reached a slot the
// sequence did not write would read NaN or another sequence's data.
func TestArchBatchInvariance(t *testing.T) {
	prompts := [][]int32{
		{1, 403, 407, 261, 378},
		{1, 291, 376, 400, 428, 352, 303, 267, 265, 282, 295, 433, 291, 376, 400, 428, 352, 303, 267, 265, 282},
		{1, 300, 301, 302},
	}
	const n = 40
	for _, ks := range kernelSets(t) {
		for _, name := range archFiles {
			t.Run(ks.String()+"/"+name, func(t *testing.T) {
				testArchInvariance(t, loadArchOn(t, name, ks), prompts, n, "")
			})
		}
	}
}

// TestArchBatchInvarianceKVTypes is TestArchBatchInvariance with the KV
// cache in Q8_0 and Q4_0: alone, a prompt's rows go through attention four
// at a time and a decode step's query heads four at a time; in the batches,
// with 3- and 7-token chunks, rows mostly one at a time. Every way computes
// each row exactly as the others.
func TestArchBatchInvarianceKVTypes(t *testing.T) {
	prompts := [][]int32{
		{1, 291, 376, 400, 428, 352, 303, 267, 265, 282, 295, 433, 291, 376, 400, 428, 352, 303, 267, 265, 282},
		{1, 300, 301, 302, 303, 304, 305, 306, 307},
	}
	for _, ks := range kernelSets(t) {
		for _, name := range archFiles {
			for _, kt := range []kvcache.DType{kvcache.DTypeQ8_0, kvcache.DTypeQ4_0} {
				t.Run(ks.String()+"/"+name+"/"+string(kt), func(t *testing.T) {
					testArchInvariance(t, loadArchOn(t, name, ks), prompts, 24, kt)
				})
			}
		}
	}
}

func testArchInvariance(t *testing.T, m *Model, prompts [][]int32, n int, kt kvcache.DType) {
	ref := make([][]int32, len(prompts))
	alone := startEngine(t, m, Config{Threads: 1, Poison: true, KVType: kt})
	for i, p := range prompts {
		res, err := alone.Generate(context.Background(), greedy(p, n))
		if err != nil {
			t.Fatal(err)
		}
		ref[i] = res.CompletionTokens
	}
	for _, cfg := range []Config{
		{Threads: 2, Poison: true, KVTokens: 2048, ChunkSize: 3, MaxBatch: 4},
		{Threads: 2, KVTokens: 2048, ChunkSize: 7, MaxBatch: 3, Scrub: kvcache.ScrubNever},
	} {
		cfg.KVType = kt
		e := startEngine(t, m, cfg)
		for _, p := range prompts { // dirty the pool
			if _, err := e.Generate(context.Background(), greedy(p, 30)); err != nil {
				t.Fatal(err)
			}
		}
		var wg sync.WaitGroup
		for round := 0; round < 2; round++ {
			for i, p := range prompts {
				wg.Add(1)
				go func() {
					defer wg.Done()
					res, err := e.Generate(context.Background(), greedy(p, n))
					if err != nil {
						t.Error(err)
						return
					}
					if j := firstDiff(res.CompletionTokens, ref[i]); j >= 0 {
						t.Errorf("config %+v, prompt %d: token %d differs in a batch", cfg, i, j)
					}
				}()
			}
		}
		wg.Wait()
	}
}

// TestFinalSoftCap checks gemma2's logits are soft-capped (greedy tokens
// cannot show it: capping keeps the order).
func TestFinalSoftCap(t *testing.T) {
	m := loadArch(t, "gemma2-tiny-f32.gguf")
	if m.Hyper.FinalSoftCap != 50 || m.Hyper.AttnSoftCap != 10 {
		t.Fatalf("soft caps %v/%v, the file says 50/10", m.Hyper.FinalSoftCap, m.Hyper.AttnSoftCap)
	}
	prompt := []int32{1, 403, 407, 261, 378}
	capped, plain := *m, *m
	capped.Hyper.FinalSoftCap = 0.5 // far below the logits' spread, so capping shows
	plain.Hyper.FinalSoftCap = 0
	got := engineLogits(t, &capped, prompt, len(prompt))[0]
	want := engineLogits(t, &plain, prompt, len(prompt))[0]
	kernels.SoftCap(want, 0.5)
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("logit %d = %v, want cap*tanh(x/cap) = %v", i, got[i], want[i])
		}
		if math.Abs(float64(got[i])) > 0.5 {
			t.Fatalf("logit %d = %v exceeds the cap", i, got[i])
		}
	}
}

func TestArchHyper(t *testing.T) {
	for _, tc := range []struct {
		file string
		want func(h Hyper) bool
	}{
		{"qwen3-tiny-f32.gguf", func(h Hyper) bool {
			return h.HeadDim == 128 && h.QDim() == 512 && h.QKNorm && h.RopeNeox && h.RopeBase == 1e6 && h.TiedEmbed
		}},
		{"gemma2-tiny-f32.gguf", func(h Hyper) bool {
			return h.Window == 16 && h.SWA[0] && !h.SWA[1] && h.SWA[2] && !h.SWA[3] && h.EmbedScale == 16 && h.GELU && h.PostNorms
		}},
		{"gemma3-tiny-f16.gguf", func(h Hyper) bool {
			return h.Window == 16 && h.SWA[4] && !h.SWA[5] && h.RopeBase == 1e6 && h.RopeBaseSWA == 1e4 && h.QKNorm && h.FinalSoftCap == 0
		}},
		{"phi3-tiny-f16.gguf", func(h Hyper) bool { return h.FusedQKV && h.HeadDim == 64 && !h.TiedEmbed && h.SWA == nil }},
	} {
		t.Run(tc.file, func(t *testing.T) {
			if h := loadArch(t, tc.file).Hyper; !tc.want(h) {
				t.Errorf("hyperparameters %+v", h)
			}
		})
	}
}

// TestEmbeddingTable: an embedding table that is also the output projection
// is repacked on a packing path and its rows read from the file, equal to
// the mapping's; one that is only looked up is not repacked.
func TestEmbeddingTable(t *testing.T) {
	tied, err := Load(refdatatest.Path(t, "models/synth/stories15m-shape-q8_0.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	defer tied.Close()
	if !tied.Hyper.TiedEmbed {
		t.Fatal("stories15m-shape-q8_0 is not tied")
	}
	if tied.embedEvicted != tied.Embed.Packed() {
		t.Fatalf("embedEvicted %v for a packed=%v table", tied.embedEvicted, tied.Embed.Packed())
	}
	buf := make([]byte, tied.Embed.RowBytes())
	got, want := make([]float32, tied.Hyper.Embd), make([]float32, tied.Hyper.Embd)
	for _, tok := range []int{0, 1, 12345, tied.Hyper.Vocab - 1} {
		tied.embedRow(tok, got, buf)
		tied.Embed.Row(tok, want)
		for k := range want {
			if math.Float32bits(got[k]) != math.Float32bits(want[k]) {
				t.Fatalf("token %d [%d]: %g, mapping has %g", tok, k, got[k], want[k])
			}
		}
	}
	untied, err := Load(refdatatest.Path(t, "models/quant/llama-tiny-q4_0.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	defer untied.Close()
	if untied.Hyper.TiedEmbed || untied.Embed.Packed() || untied.embedEvicted {
		t.Fatalf("untied table: tied %v, packed %v, evicted %v", untied.Hyper.TiedEmbed, untied.Embed.Packed(), untied.embedEvicted)
	}
}

// rewrite copies the GGUF file at src with edits to its metadata and tensors
// into a temporary file and returns its path.
func rewrite(t *testing.T, src string, edit func(keys map[string]gguf.Value, w *gguf.Writer)) string {
	t.Helper()
	f, err := gguf.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	kv := map[string]gguf.Value{}
	for k, v := range f.KV {
		kv[k] = v
	}
	w := gguf.NewWriter()
	edit(kv, w)
	for _, k := range f.Keys {
		if v, ok := kv[k]; ok {
			if err := w.Set(k, v); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, ti := range f.Tensors {
		_, data, err := f.Tensor(ti.Name)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.AddTensor(ti.Name, ti.Shape, ti.Type, data); err != nil {
			t.Fatal(err)
		}
	}
	out := filepath.Join(t.TempDir(), filepath.Base(src))
	if err := w.WriteFile(out); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestArchRefusals(t *testing.T) {
	for _, tc := range []struct {
		name, file string
		edit       func(kv map[string]gguf.Value, w *gguf.Writer)
		want       error
		text       string
	}{
		{"unknown architecture", "qwen3-tiny-f32.gguf", func(kv map[string]gguf.Value, _ *gguf.Writer) {
			kv["general.architecture"] = gguf.Value{Type: gguf.ValString, V: "mamba"}
		}, ErrUnsupportedArch, `"mamba"`},
		{"qwen3 without norm epsilon", "qwen3-tiny-f32.gguf", func(kv map[string]gguf.Value, _ *gguf.Writer) {
			delete(kv, "qwen3.attention.layer_norm_rms_epsilon")
		}, ErrBadModel, "qwen3.attention.layer_norm_rms_epsilon"},
		{"gemma2 without head count", "gemma2-tiny-f32.gguf", func(kv map[string]gguf.Value, _ *gguf.Writer) {
			delete(kv, "gemma2.attention.head_count")
		}, ErrBadModel, "gemma2.attention.head_count"},
		{"value length differs", "gemma3-tiny-f16.gguf", func(kv map[string]gguf.Value, _ *gguf.Writer) {
			kv["gemma3.attention.value_length"] = gguf.Value{Type: gguf.ValUint32, V: uint32(64)}
		}, ErrUnsupportedArch, "value_length"},
		{"phi3 LongRoPE", "phi3-tiny-f16.gguf", func(_ map[string]gguf.Value, w *gguf.Writer) {
			if err := w.AddTensor("rope_factors_long.weight", []uint64{32}, gguf.TypeF32, make([]byte, 128)); err != nil {
				t.Fatal(err)
			}
		}, ErrUnsupportedArch, "LongRoPE"},
		{"unedited copy loads", "qwen3-tiny-f32.gguf", func(map[string]gguf.Value, *gguf.Writer) {}, nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := rewrite(t, refdatatest.Path(t, "models/archs/"+tc.file), tc.edit)
			m, err := Load(path)
			if tc.want == nil {
				if err != nil {
					t.Fatalf("unedited copy refused: %v", err)
				}
				m.Close()
				return
			}
			if err == nil {
				m.Close()
				t.Fatal("loaded")
			}
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.text) {
				t.Fatalf("error %q, want %v naming %q", err, tc.want, tc.text)
			}
		})
	}
}

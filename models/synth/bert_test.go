package synth

import (
	"fmt"
	"testing"

	"github.com/bulkhead-ai/bulkhead/models/gguf"
)

// TestEncoderShapes builds the tiny encoder shapes and checks the keys
// llama.cpp's BERT loader reads, the tokenizer each family names, the
// tensors in order with their shapes, and that a seed repeats its bytes.
// (workers/encoder's tests run these files against llama.cpp's outputs.)
func TestEncoderShapes(t *testing.T) {
	for _, tc := range []struct {
		shape, tokenizer string
		pooling, types   uint64
		tensors          int
	}{
		{"bert-tiny", "bert", PoolCLS, 2, 5 + 2*16},
		{"bert-rank-tiny", "bert", PoolRank, 2, 5 + 2*16 + 4},
		{"xlmr-tiny", "t5", PoolMean, 1, 5 + 2*16},
		{"xlmr-rank-tiny", "t5", PoolRank, 1, 5 + 2*16 + 4},
	} {
		t.Run(tc.shape, func(t *testing.T) {
			s, err := LookupShape(tc.shape)
			if err != nil {
				t.Fatal(err)
			}
			cfg := Config{Shape: tc.shape, Type: gguf.TypeQ8_0, Seed: 3}
			f, err := gguf.Parse(generate(t, cfg))
			if err != nil {
				t.Fatal(err)
			}
			for k, want := range map[string]uint64{
				"bert.pooling_type": tc.pooling, "bert.embedding_length": uint64(s.Embd), "bert.block_count": uint64(s.Layers),
				"bert.attention.head_count": uint64(s.Heads), "bert.feed_forward_length": uint64(s.FFN),
				"bert.context_length": uint64(s.Context), "tokenizer.ggml.token_type_count": tc.types,
			} {
				if got, ok := f.Uint(k); !ok || got != want {
					t.Errorf("%s = %d (%v), want %d", k, got, ok, want)
				}
			}
			if eps, ok := f.Float("bert.attention.layer_norm_epsilon"); !ok || float32(eps) != s.RMSEps {
				t.Errorf("layer_norm_epsilon = %v (%v)", eps, ok)
			}
			if m, _ := f.String("tokenizer.ggml.model"); m != tc.tokenizer {
				t.Errorf("tokenizer %q, want %q", m, tc.tokenizer)
			}
			if toks, _ := f.Strings("tokenizer.ggml.tokens"); len(toks) != s.Vocab {
				t.Errorf("%d tokens, want %d", len(toks), s.Vocab)
			}
			if len(f.Tensors) != tc.tensors {
				t.Fatalf("%d tensors, want %d", len(f.Tensors), tc.tensors)
			}
			want := map[string][]uint64{
				"token_embd.weight": {uint64(s.Embd), uint64(s.Vocab)}, "token_types.weight": {uint64(s.Embd), tc.types},
				"position_embd.weight": {uint64(s.Embd), uint64(s.Context)}, "blk.1.ffn_up.weight": {uint64(s.Embd), uint64(s.FFN)},
				"blk.1.ffn_down.weight": {uint64(s.FFN), uint64(s.Embd)}, "blk.0.attn_output_norm.bias": {uint64(s.Embd)},
			}
			if tc.pooling == PoolRank {
				want["cls.output.weight"] = []uint64{uint64(s.Embd), 1}
			}
			for _, ti := range f.Tensors {
				if w, ok := want[ti.Name]; ok {
					if fmt.Sprint(ti.Shape) != fmt.Sprint(w) {
						t.Errorf("%s has shape %v, want %v", ti.Name, ti.Shape, w)
					}
					delete(want, ti.Name)
				}
			}
			for name := range want {
				t.Errorf("no tensor %s", name)
			}
			first := sum(t, cfg)
			if again := sum(t, cfg); again != first {
				t.Error("the same seed gave different bytes")
			}
		})
	}
}

// TestFamilyNames: --arch xlm-roberta names the bert architecture's XLM-R
// tiny shape.
func TestFamilyNames(t *testing.T) {
	s, err := ResolveShape("xlm-roberta", "")
	if err != nil || s.Name != "xlmr-tiny" || s.Arch != ArchBert || !s.Unigram {
		t.Fatalf("xlm-roberta: %+v %v", s, err)
	}
	if s, err := ResolveShape("bert", "e5-small"); err != nil || !s.Unigram {
		t.Fatalf("bert e5-small: %+v %v", s, err)
	}
}

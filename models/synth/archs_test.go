package synth

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/bulkhead-ai/bulkhead/models/gguf"
)

// archSpec is what llama.cpp's loader requires of an architecture
// (src/models/<arch>.cpp, load_arch_hparams and load_arch_tensors), written out
// independently of Tensors so that a wrong name or shape there fails here.
type archSpec struct {
	// keys are the <arch>.* metadata keys, exactly (llama.cpp requires
	// context_length, embedding_length, block_count, the head counts and
	// the RMS epsilon; the rest are what its converter writes and what the
	// shape needs).
	keys []string
	// layer lists each block's tensors in file order as "name dims": dims
	// in GGML order, in units e (width), q (heads*head size), kv (KV heads
	// *head size), ff (FFN), hd (head size).
	layer []string
}

var commonKeys = []string{
	"vocab_size", "context_length", "embedding_length", "block_count", "feed_forward_length",
	"rope.dimension_count", "attention.head_count", "attention.head_count_kv",
	"attention.layer_norm_rms_epsilon", "rope.freq_base",
}

var headKeys = []string{"attention.key_length", "attention.value_length"}

var llamaLayer = []string{
	"attn_norm.weight e", "attn_q.weight e q", "attn_k.weight e kv", "attn_v.weight e kv",
	"attn_output.weight q e", "ffn_norm.weight e", "ffn_gate.weight e ff", "ffn_up.weight e ff",
	"ffn_down.weight ff e",
}

var archSpecs = map[Arch]archSpec{
	ArchLlama: {keys: commonKeys, layer: llamaLayer},
	ArchQwen2: {keys: commonKeys, layer: []string{
		"attn_norm.weight e", "attn_q.weight e q", "attn_k.weight e kv", "attn_v.weight e kv",
		"attn_q.bias q", "attn_k.bias kv", "attn_v.bias kv",
		"attn_output.weight q e", "ffn_norm.weight e", "ffn_gate.weight e ff", "ffn_up.weight e ff",
		"ffn_down.weight ff e",
	}},
	ArchQwen3: {keys: append(append([]string{}, commonKeys...), headKeys...), layer: []string{
		"attn_norm.weight e", "attn_q.weight e q", "attn_k.weight e kv", "attn_v.weight e kv",
		"attn_q_norm.weight hd", "attn_k_norm.weight hd",
		"attn_output.weight q e", "ffn_norm.weight e", "ffn_gate.weight e ff", "ffn_up.weight e ff",
		"ffn_down.weight ff e",
	}},
	ArchGemma2: {keys: append(append([]string{"attention.sliding_window", "attn_logit_softcapping", "final_logit_softcapping"}, commonKeys...), headKeys...), layer: []string{
		"attn_norm.weight e", "attn_q.weight e q", "attn_k.weight e kv", "attn_v.weight e kv",
		"attn_output.weight q e", "post_attention_norm.weight e",
		"ffn_norm.weight e", "ffn_gate.weight e ff", "ffn_up.weight e ff", "ffn_down.weight ff e",
		"post_ffw_norm.weight e",
	}},
	ArchGemma3: {keys: append(append([]string{"attention.sliding_window", "rope.freq_base_swa"}, commonKeys...), headKeys...), layer: []string{
		"attn_norm.weight e", "attn_q.weight e q", "attn_k.weight e kv", "attn_v.weight e kv",
		"attn_q_norm.weight hd", "attn_k_norm.weight hd",
		"attn_output.weight q e", "post_attention_norm.weight e",
		"ffn_norm.weight e", "ffn_gate.weight e ff", "ffn_up.weight e ff", "ffn_down.weight ff e",
		"post_ffw_norm.weight e",
	}},
	ArchPhi3: {keys: append(append([]string{}, commonKeys...), headKeys...), layer: []string{
		"attn_norm.weight e", "attn_qkv.weight e q+2kv", "attn_output.weight q e",
		"ffn_norm.weight e", "ffn_up.weight e 2ff", "ffn_down.weight ff e",
	}},
}

type wantTensor struct {
	name  string
	shape []uint64
	typ   gguf.Type
}

// wantTensors lists the tensors a model of shape s and type typ must have, in
// order, from archSpecs and the type rules of Build.
func wantTensors(s Shape, typ gguf.Type) []wantTensor {
	hd := uint64(s.HeadDim())
	units := map[string]uint64{
		"e": uint64(s.Embd), "q": hd * uint64(s.Heads), "kv": hd * uint64(s.KVHeads), "ff": uint64(s.FFN), "hd": hd,
		"q+2kv": hd * uint64(s.Heads+2*s.KVHeads), "2ff": 2 * uint64(s.FFN), "v": uint64(s.Vocab),
	}
	mat := func(name string, dims []uint64, output bool) wantTensor {
		if len(dims) == 1 {
			return wantTensor{name, dims, gguf.TypeF32}
		}
		wt := typ
		if output && typ == gguf.TypeQ4_0 {
			wt = gguf.TypeQ8_0
		}
		if (wt == gguf.TypeQ8_0 || wt == gguf.TypeQ4_0) && dims[0]%32 != 0 {
			wt = gguf.TypeF16
		}
		return wantTensor{name, dims, wt}
	}
	parse := func(spec string) (string, []uint64) {
		f := strings.Fields(spec)
		var dims []uint64
		for _, u := range f[1:] {
			d, ok := units[u]
			if !ok {
				panic("unknown unit " + u)
			}
			dims = append(dims, d)
		}
		return f[0], dims
	}
	e, v := units["e"], units["v"]
	out := []wantTensor{mat("token_embd.weight", []uint64{e, v}, s.TiedEmbedding), mat("output_norm.weight", []uint64{e}, false)}
	if !s.TiedEmbedding {
		out = append(out, mat("output.weight", []uint64{e, v}, true))
	}
	for i := range s.Layers {
		for _, spec := range archSpecs[s.Arch].layer {
			name, dims := parse(spec)
			out = append(out, mat(fmt.Sprintf("blk.%d.%s", i, name), dims, false))
		}
	}
	return out
}

// checkArchKeys checks the file's <arch>.* keys are exactly the
// architecture's, and their values those of the shape.
func checkArchKeys(t *testing.T, f *gguf.File, s Shape) {
	t.Helper()
	prefix := string(s.Arch) + "."
	var got []string
	for _, k := range f.Keys {
		if strings.HasPrefix(k, prefix) {
			got = append(got, strings.TrimPrefix(k, prefix))
		}
	}
	want := append([]string{}, archSpecs[s.Arch].keys...)
	sort.Strings(got)
	sort.Strings(want)
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("%s keys:\n got %v\nwant %v", prefix, got, want)
	}
	uints := map[string]int{"attention.key_length": s.HeadDim(), "attention.value_length": s.HeadDim(), "attention.sliding_window": s.SlidingWindow}
	floats := map[string]float32{"rope.freq_base_swa": s.RopeBaseSWA, "attn_logit_softcapping": s.AttnSoftcap, "final_logit_softcapping": s.FinalSoftcap}
	for _, k := range want {
		if w, ok := uints[k]; ok {
			if v, _ := f.Uint(prefix + k); v != uint64(w) {
				t.Errorf("%s%s = %d, want %d", prefix, k, v, w)
			}
		}
		if w, ok := floats[k]; ok {
			if v, _ := f.Float(prefix + k); float32(v) != w {
				t.Errorf("%s%s = %g, want %g", prefix, k, v, w)
			}
		}
	}
}

// TestTinyArchs builds every architecture's tiny shape in every type and
// checks it against archSpecs.
func TestTinyArchs(t *testing.T) {
	for _, a := range Archs() {
		for _, typ := range []gguf.Type{gguf.TypeF32, gguf.TypeF16, gguf.TypeQ8_0, gguf.TypeQ4_0} {
			t.Run(string(a)+"/"+typ.String(), func(t *testing.T) {
				s, err := LookupShape(TinyShape(a))
				if err != nil {
					t.Fatal(err)
				}
				if s.Arch != a {
					t.Fatalf("%s is %s", s.Name, s.Arch)
				}
				f, err := gguf.Parse(generate(t, Config{Shape: s.Name, Type: typ, Seed: 1}))
				if err != nil {
					t.Fatal(err)
				}
				checkModel(t, f, s, typ)
			})
		}
	}
}

// TestTinyArchDeterminism checks the same seed gives the same bytes in every
// architecture and another seed other bytes.
func TestTinyArchDeterminism(t *testing.T) {
	for _, a := range Archs() {
		t.Run(string(a), func(t *testing.T) {
			cfg := Config{Shape: TinyShape(a), Type: gguf.TypeQ8_0, Seed: 4}
			if first, again := sum(t, cfg), sum(t, cfg); first != again {
				t.Fatal("the same seed gave different bytes")
			}
			other := cfg
			other.Seed = 5
			if sum(t, cfg) == sum(t, other) {
				t.Fatal("another seed gave the same bytes")
			}
		})
	}
}

// TestPhi3Vocabulary checks phi3's vocabulary holds <|endoftext|>, which
// llama.cpp looks up when it loads a model named phi3.
func TestPhi3Vocabulary(t *testing.T) {
	f, err := gguf.Parse(generate(t, Config{Shape: "phi3-tiny", Type: gguf.TypeF32}))
	if err != nil {
		t.Fatal(err)
	}
	toks, _ := f.Strings("tokenizer.ggml.tokens")
	types, _ := f.Int32s("tokenizer.ggml.token_type")
	last := len(toks) - 1
	if toks[last] != "<|endoftext|>" || types[last] != TokenControl {
		t.Fatalf("last token %q type %d, want <|endoftext|> control", toks[last], types[last])
	}
	g, _ := gguf.Parse(generate(t, Config{Shape: "qwen3-tiny", Type: gguf.TypeF32}))
	if toks, _ := g.Strings("tokenizer.ggml.tokens"); toks[len(toks)-1] == "<|endoftext|>" {
		t.Fatal("qwen3's vocabulary has phi3's token")
	}
}

// TestMatchesReferenceArchFiles compares the tiny shapes with the tiny
// architecture files of the shared data, written to llama.cpp's conventions
// and loaded by it: the same <arch>.* keys and tensor names; where the
// dimensions agree (qwen3, gemma2 and gemma3 share width, heads, head size,
// FFN and vocabulary), the same shapes and types too.
func TestMatchesReferenceArchFiles(t *testing.T) {
	for _, tc := range []struct {
		rel        string
		arch       Arch
		typ        gguf.Type
		sameShapes bool
	}{
		{"models/archs/qwen3-tiny-f32.gguf", ArchQwen3, gguf.TypeF32, true},
		{"models/archs/gemma2-tiny-f32.gguf", ArchGemma2, gguf.TypeF32, true},
		{"models/archs/gemma3-tiny-f16.gguf", ArchGemma3, gguf.TypeF16, true},
		{"models/archs/phi3-tiny-f16.gguf", ArchPhi3, gguf.TypeF16, false},
	} {
		t.Run(string(tc.arch), func(t *testing.T) {
			ref := openShared(t, tc.rel)
			ours, err := gguf.Parse(generate(t, Config{Shape: TinyShape(tc.arch), Type: tc.typ, Seed: 1}))
			if err != nil {
				t.Fatal(err)
			}
			prefix := string(tc.arch) + "."
			archKeys := func(f *gguf.File) string {
				var ks []string
				for _, k := range f.Keys {
					if strings.HasPrefix(k, prefix) {
						ks = append(ks, k)
					}
				}
				sort.Strings(ks)
				return strings.Join(ks, " ")
			}
			if g, w := archKeys(ours), archKeys(ref); g != w {
				t.Errorf("keys:\n ours %s\n  ref %s", g, w)
			}
			for _, k := range []string{"general.architecture", "tokenizer.ggml.model"} {
				if g, _ := ours.String(k); g != func() string { s, _ := ref.String(k); return s }() {
					t.Errorf("%s = %q, differs from the reference", k, g)
				}
			}
			for _, k := range ref.Keys {
				if !strings.HasPrefix(k, prefix) {
					continue
				}
				if rv, ov := ref.KV[k], ours.KV[k]; rv.Type != ov.Type {
					t.Errorf("%s: value type %d, reference %d", k, ov.Type, rv.Type)
				}
			}
			if len(ours.Tensors) != len(ref.Tensors) {
				t.Errorf("%d tensors, reference %d", len(ours.Tensors), len(ref.Tensors))
			}
			for _, rt := range ref.Tensors {
				ot, _, err := ours.Tensor(rt.Name)
				if err != nil {
					t.Errorf("missing %s", rt.Name)
					continue
				}
				if ot.Type != rt.Type || (tc.sameShapes && fmt.Sprint(ot.Shape) != fmt.Sprint(rt.Shape)) || len(ot.Shape) != len(rt.Shape) {
					t.Errorf("%s: %v %s, reference %v %s", rt.Name, ot.Shape, ot.Type, rt.Shape, rt.Type)
				}
			}
		})
	}
}

// TestRealShapes pins the real shapes' hyperparameters to the published
// checkpoints' (config.json; for gemma3 also the GGUF files llama.cpp's
// converter writes: key_length 256, sliding_window 512).
func TestRealShapes(t *testing.T) {
	for _, want := range []struct {
		name                                      string
		arch                                      Arch
		vocab, embd, layers, heads, kv, head, ffn int
		ctx                                       int
		rope, ropeSWA                             float32
		window                                    int
		eps                                       float32
		tied                                      bool
	}{
		{"qwen3-0.6b", ArchQwen3, 151936, 1024, 28, 16, 8, 128, 3072, 40960, 1e6, 0, 0, 1e-6, true},
		{"gemma3-270m", ArchGemma3, 262144, 640, 18, 4, 1, 256, 2048, 32768, 1e6, 1e4, 512, 1e-6, true},
		{"gemma3-1b", ArchGemma3, 262144, 1152, 26, 4, 1, 256, 6912, 32768, 1e6, 1e4, 512, 1e-6, true},
		{"llama-3.2-1b", ArchLlama, 128256, 2048, 16, 32, 8, 64, 8192, 131072, 500000, 0, 0, 1e-5, true},
		{"tinyllama-1.1b", ArchLlama, 32000, 2048, 22, 32, 4, 64, 5632, 2048, 10000, 0, 0, 1e-5, false},
		{"smollm2-135m", ArchLlama, 49152, 576, 30, 9, 3, 64, 1536, 8192, 100000, 0, 0, 1e-5, true},
		{"stories15m", ArchLlama, 32000, 288, 6, 6, 6, 48, 768, 256, 10000, 0, 0, 1e-5, true},
		{"stories260k", ArchLlama, 512, 64, 5, 8, 4, 8, 172, 512, 10000, 0, 0, 1e-5, false},
	} {
		t.Run(want.name, func(t *testing.T) {
			s, err := LookupShape(want.name)
			if err != nil {
				t.Fatal(err)
			}
			got := fmt.Sprint(s.Arch, s.Vocab, s.Embd, s.Layers, s.Heads, s.KVHeads, s.HeadDim(), s.FFN, s.Context,
				s.RopeFreqBase, s.RopeBaseSWA, s.SlidingWindow, s.RMSEps, s.TiedEmbedding, s.AttnSoftcap, s.FinalSoftcap)
			exp := fmt.Sprint(want.arch, want.vocab, want.embd, want.layers, want.heads, want.kv, want.head, want.ffn, want.ctx,
				want.rope, want.ropeSWA, want.window, want.eps, want.tied, 0, 0)
			if got != exp {
				t.Errorf("arch vocab embd layers heads kv head ffn ctx rope rope_swa window eps tied softcaps:\n got %s\nwant %s", got, exp)
			}
			if err := s.validate(); err != nil {
				t.Error(err)
			}
			if _, _, _, err := vocabulary(s.Vocab); err != nil {
				t.Errorf("vocabulary: %v", err)
			}
		})
	}
}

func TestResolveShape(t *testing.T) {
	for _, tc := range []struct {
		arch, shape string
		want        string
		err         error
	}{
		{"qwen3", "", "qwen3-tiny", nil},
		{"Gemma2", "", "gemma2-tiny", nil},
		{"", "gemma3-1b", "gemma3-1b", nil},
		{"gemma3", "gemma3-270m", "gemma3-270m", nil},
		{"llama", "stories15m", "stories15m", nil},
		{"llama", "qwen3-0.6b", "", ErrArchMismatch},
		{"phi3", "gemma2-tiny", "", ErrArchMismatch},
		{"mistral", "", "", ErrUnknownArch},
		{"mistral", "stories15m", "", ErrUnknownArch},
		{"", "gpt-5", "", ErrUnknownShape},
		{"", "", "", ErrUnknownShape},
	} {
		t.Run(tc.arch+"/"+tc.shape, func(t *testing.T) {
			s, err := ResolveShape(tc.arch, tc.shape)
			if !errors.Is(err, tc.err) || s.Name != tc.want {
				t.Fatalf("ResolveShape(%q, %q) = %q, %v; want %q, %v", tc.arch, tc.shape, s.Name, err, tc.want, tc.err)
			}
		})
	}
	for _, a := range Archs() {
		if s, err := ResolveShape(string(a), ""); err != nil || s.Arch != a {
			t.Errorf("--arch %s alone gave %s (%s), %v", a, s.Name, s.Arch, err)
		}
	}
}

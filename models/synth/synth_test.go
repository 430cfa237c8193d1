package synth

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bulkhead-ai/bulkhead/models/gguf"
)

func generate(t *testing.T, cfg Config) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := Generate(cfg, &buf); err != nil {
		t.Fatalf("Generate(%+v): %v", cfg, err)
	}
	return buf.Bytes()
}

// checkModel verifies a parsed model against its shape and type: metadata
// (the architecture's keys, exactly; see archSpecs), vocabulary, every
// tensor's name, shape and type in order, random norms around 1, and weight
// statistics on a sample of tensors.
func checkModel(t *testing.T, f *gguf.File, s Shape, typ gguf.Type) {
	t.Helper()
	a := string(s.Arch)
	strs := map[string]string{
		"general.architecture": a,
		"general.name":         "bulkhead-synth-" + s.Name,
		"tokenizer.ggml.model": "llama",
		"tokenizer.ggml.pre":   "default",
	}
	for k, want := range strs {
		if got, _ := f.String(k); got != want {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}
	uints := map[string]uint64{
		a + ".vocab_size":                 uint64(s.Vocab),
		a + ".context_length":             uint64(s.Context),
		a + ".embedding_length":           uint64(s.Embd),
		a + ".block_count":                uint64(s.Layers),
		a + ".feed_forward_length":        uint64(s.FFN),
		a + ".rope.dimension_count":       uint64(s.HeadDim()),
		a + ".attention.head_count":       uint64(s.Heads),
		a + ".attention.head_count_kv":    uint64(s.KVHeads),
		"general.file_type":               uint64(fileType[typ]),
		"tokenizer.ggml.bos_token_id":     1,
		"tokenizer.ggml.eos_token_id":     2,
		"tokenizer.ggml.unknown_token_id": 0,
	}
	for k, want := range uints {
		if got, ok := f.Uint(k); !ok || got != want {
			t.Errorf("%s = %d (%v), want %d", k, got, ok, want)
		}
	}
	if v, _ := f.Float(a + ".rope.freq_base"); float32(v) != s.RopeFreqBase {
		t.Errorf("rope.freq_base = %g, want %g", v, s.RopeFreqBase)
	}
	if v, _ := f.Float(a + ".attention.layer_norm_rms_epsilon"); float32(v) != s.RMSEps {
		t.Errorf("rms eps = %g, want %g", v, s.RMSEps)
	}
	checkArchKeys(t, f, s)
	if b, ok := f.Bool("tokenizer.ggml.add_bos_token"); !ok || !b {
		t.Error("add_bos_token is not true")
	}
	if b, ok := f.Bool("tokenizer.ggml.add_eos_token"); !ok || b {
		t.Error("add_eos_token is not false")
	}
	_, quantized := f.KV["general.quantization_version"]
	if quantized != (typ == gguf.TypeQ8_0 || typ == gguf.TypeQ4_0) {
		t.Errorf("general.quantization_version present = %v for %s", quantized, typ)
	}
	toks, _ := f.Strings("tokenizer.ggml.tokens")
	scores, _ := f.Float32s("tokenizer.ggml.scores")
	types, _ := f.Int32s("tokenizer.ggml.token_type")
	if len(toks) != s.Vocab || len(scores) != s.Vocab || len(types) != s.Vocab {
		t.Fatalf("vocabulary of %d tokens, %d scores, %d types; want %d", len(toks), len(scores), len(types), s.Vocab)
	}

	// Tensors: exactly the architecture's set, in order, with llama.cpp's
	// shapes.
	wants := wantTensors(s, typ)
	if len(f.Tensors) != len(wants) {
		t.Fatalf("%d tensors, want %d", len(f.Tensors), len(wants))
	}
	for i, ti := range f.Tensors {
		w := wants[i]
		if ti.Name != w.name || fmt.Sprint(ti.Shape) != fmt.Sprint(w.shape) || ti.Type != w.typ {
			t.Errorf("tensor %d: %s %v %s, want %s %v %s", i, ti.Name, ti.Shape, ti.Type, w.name, w.shape, w.typ)
		}
	}

	// Values: norms are 1 + normal(0, NormStd), not all ones; biases and
	// weights are centred normals of their standard deviations.
	sample := []string{"output_norm.weight", "blk.0.ffn_norm.weight", "blk.0.ffn_down.weight", "token_embd.weight"}
	if s.Arch.fusedQKV() {
		sample = append(sample, "blk.0.attn_qkv.weight", fmt.Sprintf("blk.%d.ffn_up.weight", s.Layers-1))
	} else {
		sample = append(sample, "blk.0.attn_q.weight", fmt.Sprintf("blk.%d.attn_v.weight", s.Layers-1))
	}
	if s.Arch.qkvBias() {
		sample = append(sample, "blk.0.attn_q.bias", "blk.1.attn_v.bias")
	}
	if s.Arch.qkNorm() {
		sample = append(sample, "blk.0.attn_k_norm.weight")
	}
	if s.Arch.postNorms() {
		sample = append(sample, "blk.0.post_attention_norm.weight", "blk.1.post_ffw_norm.weight")
	}
	for _, name := range sample {
		x := dequant(t, f, name)
		mean, std := stats(x)
		wantMean, wantStd := 0.0, s.MatrixStd()
		switch {
		case name == "token_embd.weight":
			wantStd = s.EmbeddingStd()
		case name == "output_norm.weight" && s.OutputNorm != 0:
			wantMean, wantStd = s.OutputNorm, NormStd
		case strings.HasSuffix(name, "norm.weight"):
			wantMean, wantStd = 1, NormStd
		case strings.HasSuffix(name, ".bias"):
			wantStd = BiasStd
		}
		ones := 0
		for _, v := range x {
			if v == 1 {
				ones++
			}
		}
		if ones > len(x)/100 {
			t.Errorf("%s: %d of %d values are exactly 1", name, ones, len(x))
		}
		// Quantization adds at most a few percent of variance. The sampling
		// error of the std is std/sqrt(2n): under 3% for the shortest
		// vector sampled (128 values) at 5 sigma, tighter for matrices.
		tol := 5 / math.Sqrt(2*float64(len(x)))
		if math.Abs(mean-wantMean) > (5/math.Sqrt(float64(len(x)))+0.05)*wantStd || math.Abs(std-wantStd) > (tol+0.03)*wantStd {
			t.Errorf("%s (%s): mean %g std %g, want about %g and %g", name, typ, mean, std, wantMean, wantStd)
		}
	}
}

func stats(x []float32) (mean, std float64) {
	var sum, sq float64
	for _, v := range x {
		sum += float64(v)
	}
	mean = sum / float64(len(x))
	for _, v := range x {
		d := float64(v) - mean
		sq += d * d
	}
	return mean, math.Sqrt(sq / float64(len(x)))
}

func dequant(t *testing.T, f *gguf.File, name string) []float32 {
	t.Helper()
	ti, data, err := f.Tensor(name)
	if err != nil {
		t.Fatal(err)
	}
	x := make([]float32, ti.Elements())
	if err := gguf.Dequantize(ti.Type, data, x); err != nil {
		t.Fatal(err)
	}
	return x
}

func TestGenerate(t *testing.T) {
	types := []gguf.Type{gguf.TypeF32, gguf.TypeF16, gguf.TypeQ8_0, gguf.TypeQ4_0}
	for _, shape := range []string{"stories260k", "stories15m"} {
		for _, typ := range types {
			t.Run(shape+"/"+typ.String(), func(t *testing.T) {
				s, err := LookupShape(shape)
				if err != nil {
					t.Fatal(err)
				}
				f, err := gguf.Parse(generate(t, Config{Shape: shape, Type: typ, Seed: 1}))
				if err != nil {
					t.Fatalf("Parse: %v", err)
				}
				checkModel(t, f, s, typ)
			})
		}
	}
}

// TestGenerateSmolLM2 writes the one large shape to disk, once, as Q4_0.
func TestGenerateSmolLM2(t *testing.T) {
	s, _ := LookupShape("smollm2-135m")
	path := filepath.Join(t.TempDir(), "smollm2.gguf")
	if err := GenerateFile(Config{Shape: s.Name, Type: gguf.TypeQ4_0, Seed: 3}, path); err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	checkModel(t, f, s, gguf.TypeQ4_0)
}

func sum(t *testing.T, cfg Config) [32]byte { return sha256.Sum256(generate(t, cfg)) }

func TestDeterminism(t *testing.T) {
	for _, tc := range []struct {
		name string
		a, b Config
		same bool
	}{
		{"same seed f32", Config{"stories260k", gguf.TypeF32, 5}, Config{"stories260k", gguf.TypeF32, 5}, true},
		{"same seed q4_0", Config{"stories15m", gguf.TypeQ4_0, 5}, Config{"stories15m", gguf.TypeQ4_0, 5}, true},
		{"shape name case", Config{"stories260k", gguf.TypeQ8_0, 5}, Config{"Stories260K", gguf.TypeQ8_0, 5}, true},
		{"different seed f32", Config{"stories260k", gguf.TypeF32, 5}, Config{"stories260k", gguf.TypeF32, 6}, false},
		{"different seed q8_0", Config{"stories15m", gguf.TypeQ8_0, 0}, Config{"stories15m", gguf.TypeQ8_0, 1}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if same := sum(t, tc.a) == sum(t, tc.b); same != tc.same {
				t.Fatalf("identical output = %v, want %v", same, tc.same)
			}
		})
	}
	t.Run("a built writer writes the same bytes twice", func(t *testing.T) {
		w, err := Build(Config{"stories260k", gguf.TypeQ4_0, 9})
		if err != nil {
			t.Fatal(err)
		}
		var a, b bytes.Buffer
		if _, err := w.WriteTo(&a); err != nil {
			t.Fatal(err)
		}
		if _, err := w.WriteTo(&b); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(a.Bytes(), b.Bytes()) {
			t.Fatal("second WriteTo differs")
		}
	})
}

// TestTypesShareWeights checks that one seed gives the same weights in every
// type: the F16 file holds the F32 file's values rounded to half, and the
// quantized files hold exactly what gguf's quantizers make of them.
func TestTypesShareWeights(t *testing.T) {
	files := map[gguf.Type]*gguf.File{}
	for _, typ := range []gguf.Type{gguf.TypeF32, gguf.TypeF16, gguf.TypeQ8_0, gguf.TypeQ4_0} {
		f, err := gguf.Parse(generate(t, Config{"stories15m", typ, 11}))
		if err != nil {
			t.Fatal(err)
		}
		files[typ] = f
	}
	for _, ti := range files[gguf.TypeF32].Tensors {
		x := dequant(t, files[gguf.TypeF32], ti.Name)
		for _, typ := range []gguf.Type{gguf.TypeF16, gguf.TypeQ8_0, gguf.TypeQ4_0} {
			info, got, _ := files[typ].Tensor(ti.Name)
			want, err := encode(info.Type, x, nil)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("%s in %s (%s) is not the F32 weights encoded", ti.Name, typ, info.Type)
			}
		}
	}
}

func TestVocabulary(t *testing.T) {
	for _, n := range []int{260, 512, 32000, 49152, 262144} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			toks, scores, types, err := vocabulary(n)
			if err != nil {
				t.Fatal(err)
			}
			if len(toks) != n || len(scores) != n || len(types) != n {
				t.Fatalf("lengths %d %d %d, want %d", len(toks), len(scores), len(types), n)
			}
			if toks[0] != "<unk>" || types[0] != TokenUnknown || toks[1] != "<s>" || types[1] != TokenControl || toks[2] != "</s>" || types[2] != TokenControl {
				t.Errorf("special tokens %q %q %q types %v", toks[0], toks[1], toks[2], types[:3])
			}
			for b := range 256 {
				if want := fmt.Sprintf("<0x%02X>", b); toks[3+b] != want || types[3+b] != TokenByte {
					t.Fatalf("token %d = %q type %d, want %q type 6", 3+b, toks[3+b], types[3+b], want)
				}
			}
			seen := map[string]bool{}
			for i, tok := range toks {
				if seen[tok] || tok == "" {
					t.Fatalf("token %d %q is empty or repeated", i, tok)
				}
				seen[tok] = true
				if i > firstPiece && !(scores[i] < scores[i-1]) {
					t.Fatalf("score of %d (%g) not below %d's (%g)", i, scores[i], i-1, scores[i-1])
				}
				if i >= firstPiece && types[i] != TokenNormal {
					t.Fatalf("token %d has type %d, want normal", i, types[i])
				}
			}
			if toks[firstPiece] != "▁" {
				t.Errorf("first piece %q, want ▁", toks[firstPiece])
			}
			for _, p := range []string{"a", "~", "▁a"} {
				if n >= 512 && !seen[p] {
					t.Errorf("piece %q missing", p)
				}
			}
			if n >= 1000 {
				for _, p := range []string{"▁the", "▁once", "th", "▁th", "abc"} {
					if !seen[p] {
						t.Errorf("piece %q missing", p)
					}
				}
			}
		})
	}
	if _, _, _, err := vocabulary(2_000_000); !errors.Is(err, ErrBadShape) {
		t.Errorf("an impossible vocabulary gave %v, want ErrBadShape", err)
	}
}

func TestConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		want error
	}{
		{"unknown shape", Config{Shape: "gpt-5", Type: gguf.TypeF32}, ErrUnknownShape},
		{"empty shape", Config{Type: gguf.TypeF32}, ErrUnknownShape},
		{"q4_k", Config{Shape: "stories15m", Type: gguf.TypeQ4_K}, ErrUnsupportedType},
		{"bf16", Config{Shape: "stories15m", Type: gguf.TypeBF16}, ErrUnsupportedType},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := Generate(tc.cfg, &bytes.Buffer{}); !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
	for _, tc := range []struct {
		name string
		s    Shape
	}{
		{"heads do not divide embedding", Shape{Name: "x", Arch: ArchLlama, Vocab: 512, Embd: 65, Layers: 1, Heads: 8, KVHeads: 4, FFN: 32, Context: 8}},
		{"kv heads do not divide heads", Shape{Name: "x", Arch: ArchLlama, Vocab: 512, Embd: 64, Layers: 1, Heads: 8, KVHeads: 3, FFN: 32, Context: 8}},
		{"vocabulary too small", Shape{Name: "x", Arch: ArchLlama, Vocab: 100, Embd: 64, Layers: 1, Heads: 8, KVHeads: 4, FFN: 32, Context: 8}},
		{"no layers", Shape{Name: "x", Arch: ArchLlama, Vocab: 512, Embd: 64, Heads: 8, KVHeads: 4, FFN: 32, Context: 8}},
		{"no architecture", Shape{Name: "x", Vocab: 512, Embd: 64, Layers: 1, Heads: 8, KVHeads: 4, FFN: 32, Context: 8}},
		{"unknown architecture", Shape{Name: "x", Arch: "mamba", Vocab: 512, Embd: 64, Layers: 1, Heads: 8, KVHeads: 4, FFN: 32, Context: 8}},
		{"llama head size not width/heads", Shape{Name: "x", Arch: ArchLlama, Vocab: 512, Embd: 64, Layers: 1, Heads: 8, KVHeads: 4, Head: 16, FFN: 32, Context: 8}},
		{"untied gemma2", Shape{Name: "x", Arch: ArchGemma2, Vocab: 512, Embd: 64, Layers: 1, Heads: 8, KVHeads: 4, FFN: 32, Context: 8, SlidingWindow: 4}},
		{"gemma3 without a window", Shape{Name: "x", Arch: ArchGemma3, Vocab: 512, Embd: 64, Layers: 1, Heads: 8, KVHeads: 4, FFN: 32, Context: 8, TiedEmbedding: true}},
		{"llama with a window", Shape{Name: "x", Arch: ArchLlama, Vocab: 512, Embd: 64, Layers: 1, Heads: 8, KVHeads: 4, FFN: 32, Context: 8, SlidingWindow: 4}},
		{"qwen3 soft-caps", Shape{Name: "x", Arch: ArchQwen3, Vocab: 512, Embd: 64, Layers: 1, Heads: 8, KVHeads: 4, FFN: 32, Context: 8, AttnSoftcap: 50}},
		{"negative std", Shape{Name: "x", Arch: ArchLlama, Vocab: 512, Embd: 64, Layers: 1, Heads: 8, KVHeads: 4, FFN: 32, Context: 8, Std: -1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.s.validate(); !errors.Is(err, ErrBadShape) {
				t.Fatalf("got %v, want ErrBadShape", err)
			}
		})
	}
	for _, s := range Shapes() {
		if err := s.validate(); err != nil {
			t.Errorf("shape %s: %v", s.Name, err)
		}
	}
}

func TestGenerateReportsWriteErrors(t *testing.T) {
	err := Generate(Config{"stories260k", gguf.TypeF32, 1}, failing{})
	if err == nil {
		t.Fatal("Generate to a failing writer succeeded")
	}
}

type failing struct{}

func (failing) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func BenchmarkGenerateStories15mQ4_0(b *testing.B) {
	for b.Loop() {
		var n countingDiscard
		if err := Generate(Config{"stories15m", gguf.TypeQ4_0, 1}, &n); err != nil {
			b.Fatal(err)
		}
		b.SetBytes(int64(n))
	}
}

type countingDiscard int

func (c *countingDiscard) Write(p []byte) (int, error) {
	*c += countingDiscard(len(p))
	return len(p), nil
}

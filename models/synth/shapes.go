package synth

import (
	"fmt"
	"strings"
)

// Arch is a model architecture, as general.architecture names it and as the
// prefix of its hyperparameter keys.
type Arch string

// The architectures synth writes, each to llama.cpp's conventions.
const (
	ArchLlama  Arch = "llama"
	ArchQwen2  Arch = "qwen2"  // llama plus Q/K/V biases
	ArchQwen3  Arch = "qwen3"  // per-head Q/K RMS norms; head size set by attention.key_length
	ArchGemma2 Arch = "gemma2" // post norms, soft-capping, sliding window on alternate layers, GELU
	ArchGemma3 Arch = "gemma3" // gemma2's layout plus Q/K norms; 5 local : 1 global layers
	ArchPhi3   Arch = "phi3"   // fused attn_qkv and gate/up (ffn_up), separate output
)

// Archs lists the architectures in a fixed order.
func Archs() []Arch {
	return []Arch{ArchLlama, ArchQwen2, ArchQwen3, ArchGemma2, ArchGemma3, ArchPhi3}
}

// ParseArch returns the named architecture, decoder or encoder
// (case-insensitive).
func ParseArch(name string) (Arch, error) {
	var names []string
	for _, a := range append(Archs(), EncoderArchs()...) {
		if strings.EqualFold(string(a), name) {
			return a, nil
		}
		names = append(names, string(a))
	}
	return "", fmt.Errorf("%w: %q (known: %s)", ErrUnknownArch, name, strings.Join(names, ", "))
}

// TinyShape is the name of an architecture's small test shape, e.g. "qwen3-tiny".
func TinyShape(a Arch) string { return string(a) + "-tiny" }

// fusedQKV reports whether the architecture stores Q, K and V as one attn_qkv
// matrix and gate and up as one ffn_up matrix of 2*FFN rows (phi3).
func (a Arch) fusedQKV() bool { return a == ArchPhi3 }

// qkvBias reports whether attention has Q, K and V biases (qwen2).
func (a Arch) qkvBias() bool { return a == ArchQwen2 }

// qkNorm reports whether Q and K are RMS-normalized per head (qwen3, gemma3).
func (a Arch) qkNorm() bool { return a == ArchQwen3 || a == ArchGemma3 }

// postNorms reports whether attention and FFN outputs are normalized before
// the residual add (gemma2, gemma3).
func (a Arch) postNorms() bool { return a == ArchGemma2 || a == ArchGemma3 }

// writesHeadLength reports whether the architecture's converter writes
// attention.key_length and value_length (llama's and qwen2's do not: their
// head size is always embedding/heads).
func (a Arch) writesHeadLength() bool { return a != ArchLlama && a != ArchQwen2 }

// Shape is the architecture of a model: everything but its weights.
type Shape struct {
	Name          string
	Arch          Arch
	Vocab         int
	Embd          int // embedding length
	Layers        int
	Heads         int
	KVHeads       int
	Head          int // per-head dimension (attention.key_length); 0 means Embd/Heads
	FFN           int // feed-forward length (phi3: half the rows of its fused ffn_up)
	Context       int
	RopeFreqBase  float32 // gemma3: of the global layers
	RopeBaseSWA   float32 // gemma3: of the sliding-window layers (rope.freq_base_swa)
	SlidingWindow int     // gemma2, gemma3: attention.sliding_window
	AttnSoftcap   float32 // gemma2: attn_logit_softcapping
	FinalSoftcap  float32 // gemma2: final_logit_softcapping
	RMSEps        float32
	TiedEmbedding bool    // no output.weight: the output projection reuses token_embd
	Std           float64 // of the weight matrices; 0 means WeightStd
	EmbdStd       float64 // of token_embd; 0 means Std
	OutputNorm    float64 // mean of output_norm.weight; 0 means 1 as every norm's
	Pooling       int     // <arch>.pooling_type: encoders PoolMean, PoolCLS, PoolRank; embedding decoders PoolMean, PoolLast
	Unigram       bool    // encoders: an XLM-RoBERTa Unigram vocabulary instead of WordPiece
}

// MatrixStd is the standard deviation of the shape's weight matrices.
func (s Shape) MatrixStd() float64 {
	if s.Std != 0 {
		return s.Std
	}
	return WeightStd
}

// EmbeddingStd is the standard deviation of the shape's token embeddings.
func (s Shape) EmbeddingStd() float64 {
	if s.EmbdStd != 0 {
		return s.EmbdStd
	}
	return s.MatrixStd()
}

// HeadDim is the per-head dimension (also the rope dimension count).
func (s Shape) HeadDim() int {
	if s.Head != 0 {
		return s.Head
	}
	return s.Embd / s.Heads
}

// QDim is the width of the Q projection and of attn_output's input.
func (s Shape) QDim() int { return s.HeadDim() * s.Heads }

// KVDim is the width of the K and V projections.
func (s Shape) KVDim() int { return s.HeadDim() * s.KVHeads }

// tiny returns an architecture's small shape: width 256, 4 heads / 2 KV heads,
// FFN 768, 4 layers (gemma3: 6, so one global layer follows five local ones),
// context 2048, 512 tokens of the synthetic vocabulary. Its matrices have the
// larger TinyWeightStd, so that every layer moves the residual stream and
// greedy decoding does not just repeat one token.
func tiny(a Arch) Shape {
	return Shape{Name: TinyShape(a), Arch: a, Vocab: 512, Embd: 256, Layers: 4, Heads: 4, KVHeads: 2, FFN: 768,
		Context: 2048, RopeFreqBase: 10000, RMSEps: 1e-5, Std: TinyWeightStd}
}

// gemmaTinyEmbdStd is the token-embedding std of the tiny gemma shapes. Gemma
// scales embeddings by sqrt(width) and ties its output to them, so with
// TinyWeightStd embeddings each position's own token would outscore every
// other by several standard deviations and greedy decoding would repeat it.
// Embeddings that small make the logits small (std 0.16), so the output norm
// is scaled up (gemmaTinyOutputNorm) to keep the top two logits apart.
const (
	gemmaTinyEmbdStd    = 0.01
	gemmaTinyOutputNorm = 8
)

// Shapes returns the known shapes.
//
// The tiny shapes exercise what each architecture adds to llama: qwen2's
// biases; qwen3's Q/K norms with a head size (128) independent of the width;
// gemma2's post norms, soft-caps (10 on attention scores, 30 on logits) and a
// sliding window of 8 on alternate layers, so short prompts already reach it;
// gemma3's Q/K norms and 6 layers, the sixth global with RoPE base 1e6, the
// five local ones 1e4 and window 8; phi3's fused matrices and separate output.
// llama-tiny is untied, qwen2, qwen3, gemma2 and gemma3 are tied as their real
// models are (gemma2 always is).
//
// The real shapes have the hyperparameters of the published checkpoints (and
// of the GGUF files llama.cpp's converter makes of them). Their vocabulary is
// the synthetic SentencePiece one, just that many entries. llama-3.2-1b's
// llama3 RoPE scaling (the rope_freqs.weight tensor) is not written: llama.cpp
// treats it as optional and the file runs with plain RoPE.
//
// The stories shapes follow llama2.c's TinyStories models; stories15m is tied
// as the reference synthetic file in the shared data is (it has no
// output.weight), stories260k untied as the real stories260K.gguf is.
func Shapes() []Shape {
	llama := tiny(ArchLlama)

	qwen2 := tiny(ArchQwen2)
	qwen2.RopeFreqBase, qwen2.RMSEps, qwen2.TiedEmbedding = 1e6, 1e-6, true

	qwen3 := tiny(ArchQwen3)
	qwen3.Head, qwen3.RopeFreqBase, qwen3.RMSEps, qwen3.TiedEmbedding = 128, 1e6, 1e-6, true

	gemma2 := tiny(ArchGemma2)
	gemma2.Head, gemma2.RMSEps, gemma2.TiedEmbedding = 128, 1e-6, true
	gemma2.EmbdStd, gemma2.OutputNorm = gemmaTinyEmbdStd, gemmaTinyOutputNorm
	gemma2.SlidingWindow, gemma2.AttnSoftcap, gemma2.FinalSoftcap = 8, 10, 30

	gemma3 := tiny(ArchGemma3)
	gemma3.Layers, gemma3.Head, gemma3.RMSEps, gemma3.TiedEmbedding = 6, 128, 1e-6, true
	gemma3.EmbdStd, gemma3.OutputNorm = gemmaTinyEmbdStd, gemmaTinyOutputNorm
	gemma3.RopeFreqBase, gemma3.RopeBaseSWA, gemma3.SlidingWindow = 1e6, 1e4, 8

	phi3 := tiny(ArchPhi3)

	// qwen3-embed-tiny is qwen3-tiny as an embedding model: last-token
	// pooling and EOS added, as Qwen3-Embedding's files are.
	qwen3Embed := qwen3
	qwen3Embed.Name, qwen3Embed.Pooling = "qwen3-embed-tiny", PoolLast

	return append([]Shape{
		llama, qwen2, qwen3, gemma2, gemma3, phi3, qwen3Embed,
		{Name: "qwen3-embedding-0.6b", Arch: ArchQwen3, Vocab: 151669, Embd: 1024, Layers: 28, Heads: 16, KVHeads: 8, Head: 128,
			FFN: 3072, Context: 32768, RopeFreqBase: 1e6, RMSEps: 1e-6, TiedEmbedding: true, Pooling: PoolLast},
		{Name: "qwen3-0.6b", Arch: ArchQwen3, Vocab: 151936, Embd: 1024, Layers: 28, Heads: 16, KVHeads: 8, Head: 128,
			FFN: 3072, Context: 40960, RopeFreqBase: 1e6, RMSEps: 1e-6, TiedEmbedding: true},
		{Name: "gemma3-270m", Arch: ArchGemma3, Vocab: 262144, Embd: 640, Layers: 18, Heads: 4, KVHeads: 1, Head: 256,
			FFN: 2048, Context: 32768, RopeFreqBase: 1e6, RopeBaseSWA: 1e4, SlidingWindow: 512, RMSEps: 1e-6, TiedEmbedding: true},
		{Name: "gemma3-1b", Arch: ArchGemma3, Vocab: 262144, Embd: 1152, Layers: 26, Heads: 4, KVHeads: 1, Head: 256,
			FFN: 6912, Context: 32768, RopeFreqBase: 1e6, RopeBaseSWA: 1e4, SlidingWindow: 512, RMSEps: 1e-6, TiedEmbedding: true},
		{Name: "llama-3.2-1b", Arch: ArchLlama, Vocab: 128256, Embd: 2048, Layers: 16, Heads: 32, KVHeads: 8,
			FFN: 8192, Context: 131072, RopeFreqBase: 500000, RMSEps: 1e-5, TiedEmbedding: true},
		{Name: "tinyllama-1.1b", Arch: ArchLlama, Vocab: 32000, Embd: 2048, Layers: 22, Heads: 32, KVHeads: 4,
			FFN: 5632, Context: 2048, RopeFreqBase: 10000, RMSEps: 1e-5},
		{Name: "smollm2-135m", Arch: ArchLlama, Vocab: 49152, Embd: 576, Layers: 30, Heads: 9, KVHeads: 3, FFN: 1536,
			Context: 8192, RopeFreqBase: 100000, RMSEps: 1e-5, TiedEmbedding: true},
		{Name: "stories15m", Arch: ArchLlama, Vocab: 32000, Embd: 288, Layers: 6, Heads: 6, KVHeads: 6, FFN: 768,
			Context: 256, RopeFreqBase: 10000, RMSEps: 1e-5, TiedEmbedding: true},
		{Name: "stories260k", Arch: ArchLlama, Vocab: 512, Embd: 64, Layers: 5, Heads: 8, KVHeads: 4, FFN: 172,
			Context: 512, RopeFreqBase: 10000, RMSEps: 1e-5},
	}, bertShapes()...)
}

// LookupShape returns the named shape (case-insensitive).
func LookupShape(name string) (Shape, error) {
	var names []string
	for _, s := range Shapes() {
		if strings.EqualFold(s.Name, name) {
			return s, nil
		}
		names = append(names, s.Name)
	}
	return Shape{}, fmt.Errorf("%w: %q (known: %s)", ErrUnknownShape, name, strings.Join(names, ", "))
}

// families are the model families a command line may name that llama.cpp
// writes as another architecture, with their tiny shape.
var families = map[string]struct {
	arch Arch
	tiny string
}{
	"xlm-roberta": {ArchBert, "xlmr-tiny"},
}

// ResolveShape returns the shape a command line names: the named shape, which
// must be of arch when arch is not empty (ErrArchMismatch otherwise), or arch's
// tiny shape when shape is empty.
func ResolveShape(arch, shape string) (Shape, error) {
	var a Arch
	if fam, ok := families[strings.ToLower(arch)]; ok {
		// A model family llama.cpp writes as another architecture.
		arch = string(fam.arch)
		if shape == "" {
			shape = fam.tiny
		}
	}
	if arch != "" {
		var err error
		if a, err = ParseArch(arch); err != nil {
			return Shape{}, err
		}
	}
	switch {
	case shape == "" && a == "":
		return Shape{}, fmt.Errorf("%w: no shape and no architecture", ErrUnknownShape)
	case shape == "":
		shape = TinyShape(a)
	}
	s, err := LookupShape(shape)
	if err != nil {
		return Shape{}, err
	}
	if a != "" && s.Arch != a {
		return Shape{}, fmt.Errorf("%w: shape %s is %s, not %s", ErrArchMismatch, s.Name, s.Arch, a)
	}
	return s, nil
}

// validate checks the shape's numbers are consistent.
func (s Shape) validate() error {
	if _, err := ParseArch(string(s.Arch)); err != nil || s.Arch == "" {
		return fmt.Errorf("%w: %s: architecture %q", ErrBadShape, s.Name, s.Arch)
	}
	switch {
	case s.Std < 0 || s.EmbdStd < 0 || s.OutputNorm < 0 || s.Vocab < firstPiece+1 || s.Embd <= 0 || s.Layers <= 0 || s.Heads <= 0 || s.KVHeads <= 0 || s.FFN <= 0 || s.Context <= 0 || s.Head < 0:
		return fmt.Errorf("%w: %s has a non-positive dimension or a vocabulary under %d", ErrBadShape, s.Name, firstPiece+1)
	case s.Head == 0 && s.Embd%s.Heads != 0:
		return fmt.Errorf("%w: %s: embedding %d is not a multiple of %d heads", ErrBadShape, s.Name, s.Embd, s.Heads)
	case s.Head != 0 && !s.Arch.writesHeadLength() && s.Head*s.Heads != s.Embd:
		return fmt.Errorf("%w: %s: %s cannot have a head size (%d) other than embedding/heads", ErrBadShape, s.Name, s.Arch, s.Head)
	case s.Heads%s.KVHeads != 0:
		return fmt.Errorf("%w: %s: %d heads are not a multiple of %d KV heads", ErrBadShape, s.Name, s.Heads, s.KVHeads)
	case s.HeadDim()%2 != 0:
		return fmt.Errorf("%w: %s: odd head size %d cannot be rotated", ErrBadShape, s.Name, s.HeadDim())
	case s.Arch == ArchGemma2 && !s.TiedEmbedding:
		return fmt.Errorf("%w: %s: gemma2 always ties its output to token_embd", ErrBadShape, s.Name)
	case s.Arch.postNorms() && s.SlidingWindow <= 0:
		return fmt.Errorf("%w: %s: %s needs a sliding window", ErrBadShape, s.Name, s.Arch)
	case !s.Arch.postNorms() && (s.SlidingWindow != 0 || s.RopeBaseSWA != 0):
		return fmt.Errorf("%w: %s: only gemma2 and gemma3 have a sliding window here", ErrBadShape, s.Name)
	case s.Arch != ArchGemma2 && (s.AttnSoftcap != 0 || s.FinalSoftcap != 0):
		return fmt.Errorf("%w: %s: only gemma2 soft-caps here", ErrBadShape, s.Name)
	case s.Arch == ArchBert && (s.KVHeads != s.Heads || s.Head != 0 || s.TiedEmbedding):
		return fmt.Errorf("%w: %s: bert has one KV head per head, width/heads per head and no output", ErrBadShape, s.Name)
	case s.Arch == ArchBert && s.Pooling != PoolMean && s.Pooling != PoolCLS && s.Pooling != PoolRank:
		return fmt.Errorf("%w: %s: bert needs a pooling type (mean, cls or rank)", ErrBadShape, s.Name)
	case s.Arch != ArchBert && (s.Unigram || s.Pooling != 0 && s.Pooling != PoolMean && s.Pooling != PoolLast):
		return fmt.Errorf("%w: %s: a decoder pools by mean or last token, with its SentencePiece vocabulary", ErrBadShape, s.Name)
	}
	return nil
}

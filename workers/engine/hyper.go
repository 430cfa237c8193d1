package engine

import (
	"fmt"
	"math"
	"strings"

	"github.com/bulkhead-ai/bulkhead/models/gguf"
)

// Hyper are a model's hyperparameters, read from GGUF metadata.
type Hyper struct {
	Arch      string // one of Architectures()
	Vocab     int
	Embd      int
	Layers    int
	Heads     int
	KVHeads   int
	HeadDim   int // attention.key_length, else Embd/Heads
	RopeDims  int // dimensions rotated per head (rope.dimension_count)
	FFN       int
	Context   int // trained context window
	RopeBase  float32
	RopeNeox  bool // rotate (i, i+d/2) pairs instead of (2i, 2i+1)
	NormEps   float32
	QKVBias   bool
	TiedEmbed bool

	QKNorm     bool    // per-head RMSNorm of Q and K before RoPE (qwen3, gemma3)
	PostNorms  bool    // RMSNorm of the attention and FFN outputs before the residual add (gemma2, gemma3)
	GELU       bool    // GELU-gated FFN instead of SiLU-gated (gemma)
	FusedQKV   bool    // attn_qkv holds Q, K, V stacked; ffn_up holds gate and up (phi3)
	EmbedScale float32 // embeddings are multiplied by this (gemma: sqrt(Embd)); 0: not scaled
	// QueryScale, when non-zero, multiplies Q before Q·K and the scores are
	// not scaled after (gemma, phi3); otherwise scores are scaled by
	// 1/sqrt(HeadDim) after Q·K (llama, qwen).
	QueryScale   float32
	AttnSoftCap  float32 // scores become cap*tanh(scores/cap) before softmax; 0: none
	FinalSoftCap float32 // the same on the output logits; 0: none
	Window       int     // sliding-window layers attend to the last Window positions
	SWA          []bool  // per layer: a sliding-window layer (nil: none)
	RopeBaseSWA  float32 // RoPE base of the sliding-window layers
	// Pooling is <arch>.pooling_type, set by embedding models
	// (Qwen3-Embedding: PoolLast); 0 for a generation model.
	Pooling int
}

// KVDim is the width of one token's K (or V) row.
func (h Hyper) KVDim() int { return h.KVHeads * h.HeadDim }

// QDim is the width of all heads' queries.
func (h Hyper) QDim() int { return h.Heads * h.HeadDim }

// arch is what one architecture changes in the llama block.
type arch struct {
	neox, qkvBias, qkNorm, postNorms, gelu, fused bool
	embedScale, preScaleQ                         bool
	swaPattern                                    int  // every swaPattern-th layer is global, the rest sliding (0: none)
	swaDefault                                    int  // window when the file gives none (0: SWA only when given)
	needEps                                       bool // attention.layer_norm_rms_epsilon is required
}

var archs = map[string]arch{
	"llama":  {},
	"qwen2":  {neox: true, qkvBias: true},
	"qwen3":  {neox: true, qkNorm: true, needEps: true},
	"gemma2": {neox: true, postNorms: true, gelu: true, embedScale: true, preScaleQ: true, swaPattern: 2, swaDefault: 4096, needEps: true},
	"gemma3": {neox: true, qkNorm: true, postNorms: true, gelu: true, embedScale: true, preScaleQ: true, swaPattern: 6, needEps: true},
	"phi3":   {neox: true, fused: true, preScaleQ: true, needEps: true},
}

// Architectures lists the model architectures the engine runs.
func Architectures() []string {
	return []string{"llama", "qwen2", "qwen3", "gemma2", "gemma3", "phi3"}
}

// meta reads one architecture's metadata keys, remembering the first problem.
type meta struct {
	f    *gguf.File
	arch string
	err  error
}

func (m *meta) fail(format string, args ...any) {
	if m.err == nil {
		m.err = fmt.Errorf(format, args...)
	}
}

// need returns a required positive integer key.
func (m *meta) need(key string) int {
	v, ok := m.f.Uint(m.arch + "." + key)
	if !ok || v == 0 || v > 1<<24 {
		m.fail("%w: metadata %s.%s missing or out of range", ErrBadModel, m.arch, key)
		return 0
	}
	return int(v)
}

// uint returns an optional integer key, or def.
func (m *meta) uint(key string, def int) int {
	v, ok := m.f.Uint(m.arch + "." + key)
	if !ok {
		return def
	}
	if v > 1<<24 {
		m.fail("%w: metadata %s.%s = %d out of range", ErrBadModel, m.arch, key, v)
		return def
	}
	return int(v)
}

// float returns an optional float key, or def; required keys fail when absent.
func (m *meta) float(key string, def float32, required bool) float32 {
	v, ok := m.f.Float(m.arch + "." + key)
	if !ok {
		if required {
			m.fail("%w: metadata %s.%s missing", ErrBadModel, m.arch, key)
		}
		return def
	}
	if !(v > 0) || math.IsInf(v, 0) {
		m.fail("%w: metadata %s.%s = %v must be positive", ErrBadModel, m.arch, key, v)
		return def
	}
	return float32(v)
}

func readHyper(f *gguf.File) (Hyper, error) {
	name, _ := f.String("general.architecture")
	a, ok := archs[name]
	h := Hyper{Arch: name}
	if !ok {
		return h, fmt.Errorf("%w: %q (supported: %s)", ErrUnsupportedArch, name, strings.Join(Architectures(), ", "))
	}
	h.RopeNeox, h.QKVBias, h.QKNorm, h.PostNorms, h.GELU, h.FusedQKV = a.neox, a.qkvBias, a.qkNorm, a.postNorms, a.gelu, a.fused
	m := &meta{f: f, arch: name}
	h.Embd = m.need("embedding_length")
	h.Layers = m.need("block_count")
	h.Heads = m.need("attention.head_count")
	h.FFN = m.need("feed_forward_length")
	h.Context = m.need("context_length")
	h.KVHeads = m.uint("attention.head_count_kv", h.Heads)
	if m.err != nil {
		return h, m.err
	}
	if h.KVHeads == 0 || h.Heads%h.KVHeads != 0 {
		return h, fmt.Errorf("%w: %d heads and %d KV heads do not divide", ErrBadModel, h.Heads, h.KVHeads)
	}
	if err := h.readHeads(m); err != nil {
		return h, err
	}
	h.NormEps = m.float("attention.layer_norm_rms_epsilon", 1e-5, a.needEps)
	h.Pooling = m.uint("pooling_type", 0)
	h.readAttention(m, a)
	if m.err != nil {
		return h, m.err
	}
	if err := refuseScaling(f, name); err != nil {
		return h, err
	}
	info, _, terr := f.Tensor("token_embd.weight")
	if terr != nil {
		return h, fmt.Errorf("%w: %v", ErrBadModel, terr)
	}
	if len(info.Shape) != 2 {
		return h, fmt.Errorf("%w: token_embd.weight has shape %v", ErrBadModel, info.Shape)
	}
	h.Vocab = int(info.Shape[1])
	return h, nil
}

// readHeads reads the head size and the rotated dimensions.
func (h *Hyper) readHeads(m *meta) error {
	if h.Embd%h.Heads != 0 && m.uint("attention.key_length", 0) == 0 {
		return fmt.Errorf("%w: width %d is not a multiple of %d heads and attention.key_length is missing", ErrBadModel, h.Embd, h.Heads)
	}
	h.HeadDim = m.uint("attention.key_length", h.Embd/max(h.Heads, 1))
	if v := m.uint("attention.value_length", h.HeadDim); v != h.HeadDim {
		return fmt.Errorf("%w: attention.value_length %d differs from key_length %d", ErrUnsupportedArch, v, h.HeadDim)
	}
	h.RopeDims = m.uint("rope.dimension_count", h.HeadDim)
	if m.err != nil {
		return m.err
	}
	if h.HeadDim <= 0 || h.HeadDim%2 != 0 || h.RopeDims <= 0 || h.RopeDims > h.HeadDim || h.RopeDims%2 != 0 {
		return fmt.Errorf("%w: head size %d, rope.dimension_count %d", ErrBadModel, h.HeadDim, h.RopeDims)
	}
	return nil
}

// readAttention reads RoPE bases, query scaling, soft-capping and the
// sliding-window layout, following llama.cpp's defaults for each architecture.
func (h *Hyper) readAttention(m *meta, a arch) {
	h.RopeBase = m.float("rope.freq_base", 10000, false)
	h.RopeBaseSWA = m.float("rope.freq_base_swa", 10000, false)
	if h.Arch == "gemma2" {
		h.RopeBaseSWA = m.float("rope.freq_base_swa", h.RopeBase, false)
	}
	if a.embedScale {
		h.EmbedScale = float32(math.Sqrt(float64(h.Embd)))
	}
	if a.preScaleQ {
		// gemma's 27B models scale by width/heads, every other size by the
		// head size (llama.cpp, after gemma_pytorch's config).
		d := h.HeadDim
		if (h.Arch == "gemma2" && h.Layers == 46) || (h.Arch == "gemma3" && h.Layers == 62) {
			d = h.Embd / h.Heads
		}
		h.QueryScale = 1 / float32(math.Sqrt(float64(d)))
	}
	if h.Arch == "gemma2" {
		h.AttnSoftCap = m.float("attn_logit_softcapping", 50, false)
		h.FinalSoftCap = m.float("final_logit_softcapping", 30, false)
	} else {
		h.FinalSoftCap = m.float("final_logit_softcapping", 0, false)
	}
	if a.swaPattern == 0 {
		return
	}
	h.Window = m.uint("attention.sliding_window", a.swaDefault)
	if h.Window == 0 {
		return
	}
	pattern := m.uint("attention.sliding_window_pattern", a.swaPattern)
	h.SWA = make([]bool, h.Layers)
	for l := range h.SWA {
		h.SWA[l] = pattern == 0 || l%pattern < pattern-1
	}
}

// refuseScaling refuses RoPE scaling schemes the engine does not implement,
// by name: linear/YaRN factors and LongRoPE (phi3's rope_factors tensors).
func refuseScaling(f *gguf.File, arch string) error {
	if v, ok := f.String(arch + ".rope.scaling.type"); ok && v != "none" && v != "" {
		if s, _ := f.Float(arch + ".rope.scaling.factor"); s != 0 && s != 1 {
			return fmt.Errorf("%w: rope scaling %q is not supported", ErrUnsupportedArch, v)
		}
	}
	for _, t := range []string{"rope_factors_long.weight", "rope_factors_short.weight", "blk.0.rope_factors_long.weight"} {
		if f.HasTensor(t) {
			return fmt.Errorf("%w: LongRoPE scaling (tensor %s) is not supported", ErrUnsupportedArch, t)
		}
	}
	return nil
}

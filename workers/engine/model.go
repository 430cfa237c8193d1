package engine

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"os"

	"github.com/bulkhead-ai/bulkhead/models/gguf"
	"github.com/bulkhead-ai/bulkhead/models/tokenizer"
	"github.com/bulkhead-ai/bulkhead/workers/kernels"
)

// Errors returned when a model cannot be loaded.
var (
	ErrUnsupportedArch = errors.New("engine: unsupported model architecture")
	ErrBadModel        = errors.New("engine: invalid model")
)

// Hyper are a model's hyperparameters, read from GGUF metadata.
type Hyper struct {
	Arch      string // "llama" or "qwen2"
	Vocab     int
	Embd      int
	Layers    int
	Heads     int
	KVHeads   int
	HeadDim   int
	RopeDims  int // dimensions rotated per head (rope.dimension_count)
	FFN       int
	Context   int // trained context window
	RopeBase  float32
	RopeNeox  bool // rotate (i, i+d/2) pairs instead of (2i, 2i+1)
	NormEps   float32
	QKVBias   bool
	TiedEmbed bool
}

// KVDim is the width of one token's K (or V) row.
func (h Hyper) KVDim() int { return h.KVHeads * h.HeadDim }

// Layer holds one transformer block's weights.
type Layer struct {
	AttnNorm            []float32
	Q, K, V, O          kernels.Matrix
	QBias, KBias, VBias []float32 // nil unless Hyper.QKVBias
	FFNNorm             []float32
	Gate, Up, Down      kernels.Matrix
}

// Model is a loaded model: weights alias the file's mapping.
type Model struct {
	Hyper     Hyper
	Name      string
	Tokenizer *tokenizer.Tokenizer
	Embed     kernels.Matrix // token_embd: Vocab rows of Embd
	OutNorm   []float32
	Output    kernels.Matrix // Vocab rows of Embd (== Embed when tied)
	Layers    []Layer
	Digest    string // sha256 of the tensor data section, hex; identifies the weights

	file *gguf.File
}

// Load opens a GGUF model file and prepares it for the engine. Anything the
// engine cannot run (architecture, tensor type, missing tensor, inconsistent
// shape) is refused by name.
func Load(path string) (*Model, error) {
	f, err := gguf.Open(path)
	if err != nil {
		return nil, err
	}
	m, err := fromFile(f)
	if err != nil {
		f.Close()
		return nil, err
	}
	m.Digest, err = fileDigest(path)
	if err != nil {
		f.Close()
		return nil, err
	}
	return m, nil
}

// Close releases the model's mapping. The model must not be used after.
func (m *Model) Close() error { return m.file.Close() }

func fromFile(f *gguf.File) (*Model, error) {
	h, err := readHyper(f)
	if err != nil {
		return nil, err
	}
	tok, err := tokenizer.FromGGUF(f)
	if err != nil {
		return nil, err
	}
	if tok.VocabSize() != h.Vocab {
		return nil, fmt.Errorf("%w: tokenizer has %d tokens, embeddings %d", ErrBadModel, tok.VocabSize(), h.Vocab)
	}
	m := &Model{Hyper: h, Tokenizer: tok, file: f}
	m.Name, _ = f.String("general.name")
	l := loader{f: f}
	m.Embed = l.matrix("token_embd.weight", h.Vocab, h.Embd)
	m.OutNorm = l.vector("output_norm.weight", h.Embd)
	if f.HasTensor("output.weight") {
		m.Output = l.matrix("output.weight", h.Vocab, h.Embd)
	} else {
		m.Output = m.Embed
		m.Hyper.TiedEmbed = true
	}
	kv := h.KVDim()
	qd := h.Heads * h.HeadDim
	m.Layers = make([]Layer, h.Layers)
	for i := range m.Layers {
		p := fmt.Sprintf("blk.%d.", i)
		L := &m.Layers[i]
		L.AttnNorm = l.vector(p+"attn_norm.weight", h.Embd)
		L.Q = l.matrix(p+"attn_q.weight", qd, h.Embd)
		L.K = l.matrix(p+"attn_k.weight", kv, h.Embd)
		L.V = l.matrix(p+"attn_v.weight", kv, h.Embd)
		L.O = l.matrix(p+"attn_output.weight", h.Embd, qd)
		if h.QKVBias {
			L.QBias = l.vector(p+"attn_q.bias", qd)
			L.KBias = l.vector(p+"attn_k.bias", kv)
			L.VBias = l.vector(p+"attn_v.bias", kv)
		}
		L.FFNNorm = l.vector(p+"ffn_norm.weight", h.Embd)
		L.Gate = l.matrix(p+"ffn_gate.weight", h.FFN, h.Embd)
		L.Up = l.matrix(p+"ffn_up.weight", h.FFN, h.Embd)
		L.Down = l.matrix(p+"ffn_down.weight", h.Embd, h.FFN)
	}
	if l.err != nil {
		return nil, l.err
	}
	return m, nil
}

func readHyper(f *gguf.File) (Hyper, error) {
	arch, _ := f.String("general.architecture")
	h := Hyper{Arch: arch}
	switch arch {
	case "llama":
	case "qwen2":
		h.RopeNeox, h.QKVBias = true, true
	default:
		return h, fmt.Errorf("%w: %q (supported: llama, qwen2)", ErrUnsupportedArch, arch)
	}
	var err error
	need := func(key string) int {
		v, ok := f.Uint(arch + "." + key)
		if !ok || v == 0 || v > 1<<24 {
			if err == nil {
				err = fmt.Errorf("%w: metadata %s.%s missing or out of range", ErrBadModel, arch, key)
			}
			return 0
		}
		return int(v)
	}
	h.Embd = need("embedding_length")
	h.Layers = need("block_count")
	h.Heads = need("attention.head_count")
	h.FFN = need("feed_forward_length")
	h.Context = need("context_length")
	if err != nil {
		return h, err
	}
	h.KVHeads = h.Heads
	if v, ok := f.Uint(arch + ".attention.head_count_kv"); ok {
		h.KVHeads = int(v)
	}
	if h.KVHeads == 0 || h.Heads%h.KVHeads != 0 || h.Embd%h.Heads != 0 {
		return h, fmt.Errorf("%w: %d heads, %d KV heads, width %d do not divide", ErrBadModel, h.Heads, h.KVHeads, h.Embd)
	}
	h.HeadDim = h.Embd / h.Heads
	if v, ok := f.Uint(arch + ".attention.key_length"); ok && int(v) != h.HeadDim {
		return h, fmt.Errorf("%w: attention.key_length %d != width/heads %d", ErrUnsupportedArch, v, h.HeadDim)
	}
	h.RopeDims = h.HeadDim
	if v, ok := f.Uint(arch + ".rope.dimension_count"); ok {
		h.RopeDims = int(v)
	}
	if h.RopeDims <= 0 || h.RopeDims > h.HeadDim || h.RopeDims%2 != 0 {
		return h, fmt.Errorf("%w: rope.dimension_count %d for head size %d", ErrBadModel, h.RopeDims, h.HeadDim)
	}
	h.RopeBase = 10000
	if v, ok := f.Float(arch + ".rope.freq_base"); ok {
		h.RopeBase = float32(v)
	}
	if v, ok := f.String(arch + ".rope.scaling.type"); ok && v != "none" && v != "" {
		if s, _ := f.Float(arch + ".rope.scaling.factor"); s != 0 && s != 1 {
			return h, fmt.Errorf("%w: rope scaling %q is not supported", ErrUnsupportedArch, v)
		}
	}
	h.NormEps = 1e-5
	if v, ok := f.Float(arch + ".attention.layer_norm_rms_epsilon"); ok {
		h.NormEps = float32(v)
	}
	if !(h.RopeBase > 0) || !(h.NormEps > 0) {
		return h, fmt.Errorf("%w: rope base %v, norm epsilon %v", ErrBadModel, h.RopeBase, h.NormEps)
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

// loader reads tensors, remembering the first error.
type loader struct {
	f   *gguf.File
	err error
}

func (l *loader) fail(err error) {
	if l.err == nil {
		l.err = err
	}
}

func (l *loader) matrix(name string, rows, cols int) kernels.Matrix {
	if l.err != nil {
		return kernels.Matrix{}
	}
	info, data, err := l.f.Tensor(name)
	if err != nil {
		l.fail(fmt.Errorf("%w: %v", ErrBadModel, err))
		return kernels.Matrix{}
	}
	if len(info.Shape) != 2 || info.Shape[0] != uint64(cols) || info.Shape[1] != uint64(rows) {
		l.fail(fmt.Errorf("%w: tensor %s has shape %v, want [%d %d]", ErrBadModel, name, info.Shape, cols, rows))
		return kernels.Matrix{}
	}
	if !info.Type.Supported() {
		l.fail(fmt.Errorf("%w: tensor %s has type %s", gguf.ErrUnsupportedType, name, info.Type))
		return kernels.Matrix{}
	}
	m, err := kernels.NewMatrix(info.Type, rows, cols, data)
	if err != nil {
		l.fail(fmt.Errorf("%w: tensor %s: %v", ErrBadModel, name, err))
	}
	return m
}

// vector reads a small 1-D tensor (norm weights, biases) into float32s.
func (l *loader) vector(name string, n int) []float32 {
	if l.err != nil {
		return nil
	}
	info, data, err := l.f.Tensor(name)
	if err != nil {
		l.fail(fmt.Errorf("%w: %v", ErrBadModel, err))
		return nil
	}
	if len(info.Shape) != 1 || info.Shape[0] != uint64(n) {
		l.fail(fmt.Errorf("%w: tensor %s has shape %v, want [%d]", ErrBadModel, name, info.Shape, n))
		return nil
	}
	out := make([]float32, n)
	switch info.Type {
	case gguf.TypeF32:
		for i := range out {
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(data[4*i:]))
		}
	case gguf.TypeF16:
		for i := range out {
			out[i] = gguf.F16ToF32(binary.LittleEndian.Uint16(data[2*i:]))
		}
	case gguf.TypeBF16:
		for i := range out {
			out[i] = gguf.BF16ToF32(binary.LittleEndian.Uint16(data[2*i:]))
		}
	default:
		l.fail(fmt.Errorf("%w: tensor %s has type %s (want F32, F16 or BF16)", ErrBadModel, name, info.Type))
		return nil
	}
	return out
}

// fileDigest hashes the model file. It is read once at load, sequentially.
func fileDigest(path string) (string, error) {
	fd, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer fd.Close()
	h := sha256.New()
	if _, err := io.Copy(h, fd); err != nil {
		return "", fmt.Errorf("engine: hashing %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

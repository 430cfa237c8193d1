package engine

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"

	"github.com/bulkhead-ai/bulkhead/models/gguf"
	"github.com/bulkhead-ai/bulkhead/models/tokenizer"
	"github.com/bulkhead-ai/bulkhead/workers/kernels"
)

// Errors returned when a model cannot be loaded.
var (
	ErrUnsupportedArch = errors.New("engine: unsupported model architecture")
	ErrBadModel        = errors.New("engine: invalid model")
)

// Layer holds one transformer block's weights.
type Layer struct {
	AttnNorm            []float32
	Q, K, V, O          kernels.Matrix
	QBias, KBias, VBias []float32 // nil unless Hyper.QKVBias
	QNorm, KNorm        []float32 // per-head RMSNorm weights (HeadDim), nil unless Hyper.QKNorm
	PostAttnNorm        []float32 // nil unless Hyper.PostNorms
	FFNNorm             []float32
	Gate, Up, Down      kernels.Matrix
	PostFFNNorm         []float32 // nil unless Hyper.PostNorms
}

// Model is a loaded model: weights alias the file's mapping.
type Model struct {
	Hyper     Hyper
	Name      string
	Tokenizer *tokenizer.Tokenizer
	Embed     kernels.Matrix // token_embd: Vocab rows of Embd
	OutNorm   []float32
	Output    kernels.Matrix // Vocab rows of Embd (== Embed when tied)
	OutBias   []float32      // output.bias (phi3 variants), nil when absent
	Layers    []Layer
	Digest    string // sha256 of the tensor data section, hex; identifies the weights

	kernels kernels.Set // the set the weights are laid out for; every op of its engines runs it
	file    *gguf.File
	// embedEvicted: Embed is also the output projection, repacked, and its
	// mapped original evicted; lookups read its rows from the file (embedRow).
	embedEvicted bool
}

// embedRow writes token tok's embedding into x; buf holds one row of Embed.
// A row of an evicted table is read from the file, not the mapping: through
// the mapping each lookup would bring back up to 2 MiB of the table
// (gguf.File.CopyData), and a few hundred prompt tokens all of it.
func (m *Model) embedRow(tok int, x []float32, buf []byte) {
	if m.embedEvicted {
		rs := len(buf)
		if m.file.CopyData(buf, m.Embed.Data[tok*rs:(tok+1)*rs]) == nil {
			m.Embed.DecodeRow(buf, x)
			return
		}
	}
	m.Embed.Row(tok, x)
}

// Load opens a GGUF model file and prepares it for the engine, on the
// process's kernel set (kernels.Active). Anything the engine cannot run
// (architecture, tensor type, missing tensor, inconsistent shape) is refused
// by name.
func Load(path string) (*Model, error) { return LoadOn(path, kernels.Active()) }

// LoadOn is Load with the weights laid out for the kernel set ks: every engine
// built on the model computes with ks (tests run every set the CPU has).
func LoadOn(path string, ks kernels.Set) (*Model, error) {
	f, err := gguf.Open(path)
	if err != nil {
		return nil, err
	}
	m, err := fromFile(f, ks)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	m.Digest, err = fileDigest(path)
	if err != nil {
		f.Close()
		return nil, err
	}
	// Loading leaves garbage in the heap (the file's metadata arrays, the
	// tokenizer's working copies): hand it back to the system now, rather
	// than have the KV pool and the step buffers that come next land on top
	// of it while the runtime returns it slowly.
	debug.FreeOSMemory()
	return m, nil
}

// Kernels is the kernel set the model's weights are laid out for.
func (m *Model) Kernels() kernels.Set { return m.kernels }

// FileBytes is the size of the model file.
func (m *Model) FileBytes() int64 { return m.file.Size() }

// Close releases the model's mapping. The model must not be used after.
func (m *Model) Close() error { return m.file.Close() }

func fromFile(f *gguf.File, ks kernels.Set) (*Model, error) {
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
	m := &Model{Hyper: h, Tokenizer: tok, kernels: ks, file: f}
	m.Name, _ = f.String("general.name")
	l := loader{f: f, ks: ks}
	m.OutNorm = l.vector("output_norm.weight", h.Embd)
	if f.HasTensor("output.weight") {
		m.Embed = l.table("token_embd.weight", h.Vocab, h.Embd)
		m.Output = l.matrix("output.weight", h.Vocab, h.Embd)
	} else {
		m.Embed = l.matrix("token_embd.weight", h.Vocab, h.Embd)
		m.Output = m.Embed
		m.Hyper.TiedEmbed = true
		m.embedEvicted = m.Embed.Packed()
	}
	if f.HasTensor("output.bias") {
		m.OutBias = l.vector("output.bias", h.Vocab)
	}
	m.Layers = make([]Layer, h.Layers)
	for i := range m.Layers {
		l.layer(&m.Layers[i], fmt.Sprintf("blk.%d.", i), h)
	}
	if l.err != nil {
		return nil, l.err
	}
	l.evictAgain()
	// The tokenizer copied what it needs of the vocabulary; the model keeps f
	// for the embedding rows it reads from the file, not for the arrays
	// (12 MB for a 128k-token, 280k-merge vocabulary).
	f.DropArrays()
	return m, nil
}

// layer reads block p's tensors (p is "blk.N.").
func (l *loader) layer(L *Layer, p string, h Hyper) {
	kv, qd := h.KVDim(), h.QDim()
	L.AttnNorm = l.vector(p+"attn_norm.weight", h.Embd)
	if h.FusedQKV {
		qkv := l.fused(p+"attn_qkv.weight", h.Embd, qd, kv, kv)
		L.Q, L.K, L.V = qkv[0], qkv[1], qkv[2]
	} else {
		L.Q = l.matrix(p+"attn_q.weight", qd, h.Embd)
		L.K = l.matrix(p+"attn_k.weight", kv, h.Embd)
		L.V = l.matrix(p+"attn_v.weight", kv, h.Embd)
	}
	L.O = l.matrix(p+"attn_output.weight", h.Embd, qd)
	if h.QKVBias {
		L.QBias = l.vector(p+"attn_q.bias", qd)
		L.KBias = l.vector(p+"attn_k.bias", kv)
		L.VBias = l.vector(p+"attn_v.bias", kv)
	}
	if h.QKNorm {
		L.QNorm = l.vector(p+"attn_q_norm.weight", h.HeadDim)
		L.KNorm = l.vector(p+"attn_k_norm.weight", h.HeadDim)
	}
	L.FFNNorm = l.vector(p+"ffn_norm.weight", h.Embd)
	if h.FusedQKV {
		// ffn_up holds the gate rows, then the up rows (llama.cpp's SwiGLU split).
		up := l.fused(p+"ffn_up.weight", h.Embd, h.FFN, h.FFN)
		L.Gate, L.Up = up[0], up[1]
	} else {
		L.Gate = l.matrix(p+"ffn_gate.weight", h.FFN, h.Embd)
		L.Up = l.matrix(p+"ffn_up.weight", h.FFN, h.Embd)
	}
	L.Down = l.matrix(p+"ffn_down.weight", h.Embd, h.FFN)
	if h.PostNorms {
		L.PostAttnNorm = l.vector(p+"post_attention_norm.weight", h.Embd)
		L.PostFFNNorm = l.vector(p+"post_ffw_norm.weight", h.Embd)
	}
}

// loader reads tensors, remembering the first error.
type loader struct {
	f       *gguf.File
	ks      kernels.Set
	err     error
	evicted [][]byte // the repacked tensors' mapped originals
}

// evictAgain evicts the repacked tensors' originals once more when all are
// loaded: reading a tensor faults in whole page-cache folios (up to 2 MiB),
// which reach back into its neighbour, evicted already (qwen3-0.6b: 73 MB of
// the file resident again after the load).
func (l *loader) evictAgain() {
	for _, b := range l.evicted {
		l.f.Evict(b)
	}
	l.evicted = nil
}

func (l *loader) fail(err error) {
	if l.err == nil {
		l.err = err
	}
}

func (l *loader) matrix(name string, rows, cols int) kernels.Matrix {
	return l.fused(name, cols, rows)[0]
}

// table reads a matrix that is only looked up by row (kernels.NewTable): it
// stays in the mapping, which is not evicted.
func (l *loader) table(name string, rows, cols int) kernels.Matrix {
	return l.load(name, cols, true, rows)[0]
}

// fused reads a matrix whose rows stack several parts (phi3's attn_qkv and
// gate|up; a plain matrix is one part) and returns one Matrix per part, each
// over its own row range of the mapping. Every output element of a matrix
// product depends on its own weight row only, so the parts compute exactly
// what the fused product would; each part is built (and repacked) once.
func (l *loader) fused(name string, cols int, parts ...int) []kernels.Matrix {
	return l.load(name, cols, false, parts...)
}

// load is fused, or table when table is set.
func (l *loader) load(name string, cols int, table bool, parts ...int) []kernels.Matrix {
	out := make([]kernels.Matrix, len(parts))
	if l.err != nil {
		return out
	}
	rows := 0
	for _, n := range parts {
		rows += n
	}
	info, data, err := l.f.Tensor(name)
	if err != nil {
		l.fail(fmt.Errorf("%w: %v", ErrBadModel, err))
		return out
	}
	if len(info.Shape) != 2 || info.Shape[0] != uint64(cols) || info.Shape[1] != uint64(rows) {
		l.fail(fmt.Errorf("%w: tensor %s has shape %v, want [%d %d]", ErrBadModel, name, info.Shape, cols, rows))
		return out
	}
	if !info.Type.Supported() {
		l.fail(&gguf.UnsupportedTypeError{Tensor: name, Type: info.Type})
		return out
	}
	rs := len(data) / rows
	packed := false
	for i, lo := 0, 0; i < len(parts); lo, i = lo+parts[i], i+1 {
		newMatrix := l.ks.NewMatrix
		if table {
			newMatrix = l.ks.NewTable
		}
		m, err := newMatrix(info.Type, parts[i], cols, data[lo*rs:(lo+parts[i])*rs])
		if err != nil {
			l.fail(fmt.Errorf("%w: tensor %s: %v", ErrBadModel, name, err))
			return out
		}
		out[i], packed = m, packed || m.Packed()
	}
	if packed {
		// The products read the interleaved copy; the mapped original (read
		// once to make it, and by embedding lookups) need not stay resident.
		l.f.Evict(data)
		if n := len(l.evicted); n > 0 {
			l.f.Evict(l.evicted[n-1]) // what this one's folios brought back
		}
		l.evicted = append(l.evicted, data)
	}
	return out
}

// vector reads a small 1-D tensor (norm weights, biases) into float32s.
func (l *loader) vector(name string, n int) []float32 {
	if l.err != nil {
		return nil
	}
	v, err := l.f.Vector(name, n)
	if err != nil {
		l.fail(fmt.Errorf("%w: %v", ErrBadModel, err))
	}
	return v
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

// DecodeWeights is the weights one decode step reads for a sequence, in the
// order it reads them: every block's projections, then the output matrix (the
// embedding lookup reads one row). They must not be written.
func (m *Model) DecodeWeights() [][]byte {
	var ws [][]byte
	for i := range m.Layers {
		L := &m.Layers[i]
		for _, w := range []*kernels.Matrix{&L.Q, &L.K, &L.V, &L.O, &L.Gate, &L.Up, &L.Down} {
			ws = append(ws, w.Weights())
		}
	}
	return append(ws, m.Output.Weights())
}

// DecodeBytes is how many bytes of weights one decode step reads for a
// sequence (DecodeWeights). Divided into the memory bandwidth it bounds
// decode tokens/s.
func (m *Model) DecodeBytes() int {
	n := 0
	for _, w := range m.DecodeWeights() {
		n += len(w)
	}
	return n
}

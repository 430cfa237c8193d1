package encoder

import (
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/bulkhead-ai/bulkhead/models/gguf"
	"github.com/bulkhead-ai/bulkhead/models/tokenizer"
	"github.com/bulkhead-ai/bulkhead/workers/kernels"
)

// Errors returned when a model cannot be loaded.
var (
	ErrUnsupportedArch = errors.New("encoder: unsupported model architecture")
	ErrBadModel        = errors.New("encoder: invalid model")
)

// Pooling is how an input's token vectors become its one vector, numbered as
// llama.cpp numbers <arch>.pooling_type.
type Pooling int

// The pooling types.
const (
	PoolNone Pooling = 0 // no pooling: refused, Bulkhead serves one vector per input
	PoolMean Pooling = 1 // the mean of the token vectors
	PoolCLS  Pooling = 2 // the first token's vector ([CLS])
	PoolLast Pooling = 3 // the last token's vector
	PoolRank Pooling = 4 // [CLS] through the classification head: relevance scores
)

var poolingNames = []string{"none", "mean", "cls", "last", "rank"}

func (p Pooling) String() string {
	if p < 0 || int(p) >= len(poolingNames) {
		return fmt.Sprintf("pooling(%d)", int(p))
	}
	return poolingNames[p]
}

// ParsePooling returns the pooling type named s (mean, cls, last or rank).
func ParsePooling(s string) (Pooling, error) {
	for i, n := range poolingNames[1:] {
		if strings.EqualFold(s, n) {
			return Pooling(i + 1), nil
		}
	}
	return 0, fmt.Errorf("encoder: unknown pooling %q (want mean, cls, last or rank)", s)
}

// Architectures lists the encoder architectures this package runs.
func Architectures() []string { return []string{"bert"} }

// IsEncoder reports whether the GGUF architecture name is one this package runs.
func IsEncoder(arch string) bool {
	for _, a := range Architectures() {
		if a == arch {
			return true
		}
	}
	return false
}

// Hyper are an encoder's hyperparameters, read from GGUF metadata.
type Hyper struct {
	Arch    string
	Vocab   int
	Embd    int
	Layers  int
	Heads   int
	HeadDim int
	FFN     int
	Context int // position embeddings: the longest input
	NormEps float32
	Pooling Pooling
	Labels  int // rank pooling: the classification head's outputs; 0 otherwise
}

// Layer holds one encoder block's weights (BERT: attention, then the FFN,
// each followed by a LayerNorm of its output plus its input).
type Layer struct {
	Q, K, V, O          kernels.Matrix
	QB, KB, VB, OB      []float32
	AttnNorm, AttnNormB []float32
	Up, Down            kernels.Matrix
	UpB, DownB          []float32
	OutNorm, OutNormB   []float32
}

// Model is a loaded encoder: weights alias the file's mapping.
type Model struct {
	Hyper     Hyper
	Name      string
	Tokenizer *tokenizer.Tokenizer

	TokEmbd             kernels.Matrix // Vocab rows of Embd
	TypeRow             []float32      // token type 0's embedding, nil when the file has none
	PosEmbd             kernels.Matrix // Context rows of Embd
	EmbdNorm, EmbdNormB []float32
	Layers              []Layer

	// The classification head of rank pooling: Cls (Embd x Embd, tanh after)
	// when present, then ClsOut (Labels x Embd).
	Cls, ClsOut   kernels.Matrix
	ClsB, ClsOutB []float32
	HasCls        bool

	kernels kernels.Set
	file    *gguf.File
}

// Load opens a GGUF encoder on the process's kernel set.
func Load(path string) (*Model, error) { return LoadOn(path, kernels.Active()) }

// LoadOn is Load with the weights laid out for the kernel set ks.
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
	return m, nil
}

// Close releases the model's mapping. The model must not be used after.
func (m *Model) Close() error { return m.file.Close() }

// Kernels is the kernel set the model's weights are laid out for.
func (m *Model) Kernels() kernels.Set { return m.kernels }

// Tokenize returns text's ids as the model's tokenizer makes them, its
// special tokens added ([CLS] ... [SEP] for BERT) and none parsed from text.
func (m *Model) Tokenize(text string) []int32 { return m.Tokenizer.Encode(text, true, false) }

// PairTokens returns the ids of a query and document pair for rank
// pooling (tokenizer.EncodePair): [CLS] query [SEP] document for BERT,
// <s> query </s></s> document </s> for XLM-RoBERTa; every token of type 0.
func (m *Model) PairTokens(query, doc string) []int32 { return m.Tokenizer.EncodePair(query, doc) }

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
	e := h.Embd
	m.TokEmbd = l.table("token_embd.weight", h.Vocab, e)
	if f.HasTensor("token_types.weight") {
		// [Embd, types]; one type is often written as [Embd] (llama-quantize
		// drops a trailing dimension of 1).
		info, _, _ := f.Tensor("token_types.weight")
		types := l.table("token_types.weight", max(1, int(rowsOf(info.Shape))), e)
		if l.err == nil {
			m.TypeRow = make([]float32, e)
			types.Row(0, m.TypeRow)
		}
	}
	m.PosEmbd = l.table("position_embd.weight", h.Context, e)
	m.EmbdNorm, m.EmbdNormB = l.vector("token_embd_norm.weight", e), l.vector("token_embd_norm.bias", e)
	m.Layers = make([]Layer, h.Layers)
	for i := range m.Layers {
		l.layer(&m.Layers[i], fmt.Sprintf("blk.%d.", i), h)
	}
	if h.Pooling == PoolRank {
		l.head(m)
	}
	if l.err != nil {
		return nil, l.err
	}
	l.evictAgain()
	f.DropArrays() // the tokenizer copied what it needs; the model keeps f for its weights
	return m, nil
}

// readHyper reads the <arch>.* keys llama.cpp reads for BERT.
func readHyper(f *gguf.File) (Hyper, error) {
	arch, _ := f.String("general.architecture")
	h := Hyper{Arch: arch}
	if !IsEncoder(arch) {
		return h, fmt.Errorf("%w: %q (supported: %s)", ErrUnsupportedArch, arch, strings.Join(Architectures(), ", "))
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
	if kv, ok := f.Uint(arch + ".attention.head_count_kv"); ok && int(kv) != h.Heads {
		return h, fmt.Errorf("%w: %d KV heads for %d heads (BERT's attention has one per head)", ErrBadModel, kv, h.Heads)
	}
	if h.Embd%h.Heads != 0 {
		return h, fmt.Errorf("%w: width %d is not a multiple of %d heads", ErrBadModel, h.Embd, h.Heads)
	}
	h.HeadDim = h.Embd / h.Heads
	info, _, terr := f.Tensor("token_embd.weight")
	if terr != nil || len(info.Shape) != 2 || info.Shape[1] == 0 || info.Shape[1] > 1<<24 {
		return h, fmt.Errorf("%w: no usable token_embd.weight", ErrBadModel)
	}
	h.Vocab = int(info.Shape[1])
	eps, ok := f.Float(arch + ".attention.layer_norm_epsilon")
	if !ok || !(eps > 0) || math.IsInf(eps, 0) {
		return h, fmt.Errorf("%w: metadata %s.attention.layer_norm_epsilon missing or not positive", ErrBadModel, arch)
	}
	h.NormEps = float32(eps)
	if p, ok := f.Uint(arch + ".pooling_type"); ok {
		h.Pooling = Pooling(p)
		if p > uint64(PoolRank) {
			return h, fmt.Errorf("%w: %s.pooling_type %d is none of mean (1), cls (2), last (3), rank (4)", ErrBadModel, arch, p)
		}
	}
	return h, nil
}

// layer reads block p's tensors (p is "blk.N.").
func (l *loader) layer(L *Layer, p string, h Hyper) {
	e := h.Embd
	L.Q, L.QB = l.matrix(p+"attn_q.weight", e, e), l.vector(p+"attn_q.bias", e)
	L.K, L.KB = l.matrix(p+"attn_k.weight", e, e), l.vector(p+"attn_k.bias", e)
	L.V, L.VB = l.matrix(p+"attn_v.weight", e, e), l.vector(p+"attn_v.bias", e)
	L.O, L.OB = l.matrix(p+"attn_output.weight", e, e), l.vector(p+"attn_output.bias", e)
	L.AttnNorm, L.AttnNormB = l.vector(p+"attn_output_norm.weight", e), l.vector(p+"attn_output_norm.bias", e)
	L.Up, L.UpB = l.matrix(p+"ffn_up.weight", h.FFN, e), l.vector(p+"ffn_up.bias", h.FFN)
	L.Down, L.DownB = l.matrix(p+"ffn_down.weight", e, h.FFN), l.vector(p+"ffn_down.bias", e)
	L.OutNorm, L.OutNormB = l.vector(p+"layer_output_norm.weight", e), l.vector(p+"layer_output_norm.bias", e)
}

// head reads rank pooling's classification head: cls (optional) and
// cls.output, whose rows are the labels.
func (l *loader) head(m *Model) {
	e := m.Hyper.Embd
	if l.f.HasTensor("cls.weight") {
		m.Cls, m.ClsB, m.HasCls = l.matrix("cls.weight", e, e), l.vector("cls.bias", e), true
	}
	info, _, err := l.f.Tensor("cls.output.weight")
	n := rowsOf(info.Shape)
	if err != nil || n == 0 || n > 1<<16 {
		l.fail(fmt.Errorf("%w: rank pooling needs the classification head cls.output.weight", ErrBadModel))
		return
	}
	m.Hyper.Labels = n
	m.ClsOut = l.matrix("cls.output.weight", n, e)
	if l.f.HasTensor("cls.output.bias") {
		m.ClsOutB = l.vector("cls.output.bias", n)
	}
}

// rowsOf is the number of rows of a GGUF matrix shape: [cols, rows], or
// [cols] for one row (GGUF writers drop a trailing dimension of 1); 0 for
// anything else.
func rowsOf(shape []uint64) int {
	switch {
	case len(shape) == 1:
		return 1
	case len(shape) == 2 && shape[1] <= 1<<24:
		return int(shape[1])
	}
	return 0
}

// loader reads tensors, remembering the first error.
type loader struct {
	f       *gguf.File
	ks      kernels.Set
	err     error
	evicted [][]byte // the originals of the matrices read from copies
}

func (l *loader) fail(err error) {
	if l.err == nil {
		l.err = err
	}
}

// matrix reads a weight matrix for the products: on a vector path repacked
// or copied into huge pages, its mapped original then evicted.
func (l *loader) matrix(name string, rows, cols int) kernels.Matrix {
	return l.load(name, rows, cols, false)
}

// table reads a matrix that is only looked up by row (the embeddings): it
// stays in the mapping (kernels.NewTable).
func (l *loader) table(name string, rows, cols int) kernels.Matrix {
	return l.load(name, rows, cols, true)
}

// evictAgain evicts the repacked matrices' originals once more after the
// load: reading a tensor faults in whole page-cache folios, which reach into
// its neighbours, evicted already.
func (l *loader) evictAgain() {
	for _, b := range l.evicted {
		l.f.Evict(b)
	}
	l.evicted = nil
}

func (l *loader) load(name string, rows, cols int, table bool) kernels.Matrix {
	if l.err != nil {
		return kernels.Matrix{}
	}
	info, data, err := l.f.Tensor(name)
	if err != nil {
		l.fail(fmt.Errorf("%w: %v", ErrBadModel, err))
		return kernels.Matrix{}
	}
	if len(info.Shape) == 0 || len(info.Shape) > 2 || info.Shape[0] != uint64(cols) || rowsOf(info.Shape) != rows {
		l.fail(fmt.Errorf("%w: tensor %s has shape %v, want [%d %d]", ErrBadModel, name, info.Shape, cols, rows))
		return kernels.Matrix{}
	}
	if !info.Type.Supported() {
		l.fail(&gguf.UnsupportedTypeError{Tensor: name, Type: info.Type})
		return kernels.Matrix{}
	}
	newMatrix := l.ks.NewMatrix
	if table {
		newMatrix = l.ks.NewTable
	}
	m, err := newMatrix(info.Type, rows, cols, data)
	if err != nil {
		l.fail(fmt.Errorf("%w: tensor %s: %v", ErrBadModel, name, err))
		return m
	}
	if m.Packed() {
		l.f.Evict(data)
		if n := len(l.evicted); n > 0 {
			l.f.Evict(l.evicted[n-1])
		}
		l.evicted = append(l.evicted, data)
	}
	return m
}

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

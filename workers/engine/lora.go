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
	"path/filepath"

	"github.com/bulkhead-ai/bulkhead/models/gguf"
	"github.com/bulkhead-ai/bulkhead/models/lora"
)

// ErrAdapterMismatch is returned for an adapter that does not fit the model
// (architecture, layer count or a projection's shape).
var ErrAdapterMismatch = errors.New("engine: adapter does not fit the model")

// loraSlot is a projection of a layer that an adapter may update.
type loraSlot int

const (
	slotQ loraSlot = iota
	slotK
	slotV
	slotO
	slotGate
	slotUp
	slotDown
	numSlots
)

// loraMat is one projection's update: out += scale·B·(A·x). a holds A's
// rank rows of the projection's input width in; bt holds B transposed, rank
// rows of the output width out, so B·t is rank vector updates of the output
// (lora_forward.go).
type loraMat struct {
	a, bt         []float32
	rank, in, out int
	scale         float32
	// xType and tType are A's and B's types in the file: F16 or BF16 round
	// the product's input to them first, as llama.cpp's products do (F32
	// and quantized types take it as it is).
	xType, tType gguf.Type
}

// Adapter is a LoRA adapter bound to one model: each targeted projection's
// output gains scale·B·(A·x). It is immutable and may serve any number of
// sequences and engines of the model at once.
type Adapter struct {
	// Key identifies the adapter and its scale: the prefix cache keys and
	// hand-over manifests carry it, so KV computed under it is never taken
	// for KV computed under another adapter or none.
	Key    string
	Rank   int
	model  *Model
	layers [][numSlots][]*loraMat
	bytes  int64
}

// Bytes is the memory the adapter holds.
func (a *Adapter) Bytes() int64 { return a.bytes }

// LoadAdapter reads the adapter at path (lora.Read: a GGUF adapter, or a
// PEFT directory) and binds it to m with the user's scale (1 for the
// adapter's own; llama.cpp's --lora-scaled). digest identifies the file's
// bytes (the caller's sha256 of them; "" hashes the file here).
func LoadAdapter(m *Model, path string, scale float32, digest string) (*Adapter, error) {
	a, err := lora.Read(path)
	if err != nil {
		return nil, err
	}
	if digest == "" {
		if digest, err = pathDigest(path); err != nil {
			return nil, err
		}
	}
	return BindAdapter(m, a, scale, digest)
}

// pathDigest hashes an adapter file, or a PEFT directory's two files.
func pathDigest(path string) (string, error) {
	files := []string{path}
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		files = []string{filepath.Join(path, lora.PEFTWeights), filepath.Join(path, lora.PEFTConfig)}
	}
	h := sha256.New()
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			return "", err
		}
		_, err = io.Copy(h, f)
		f.Close()
		if err != nil {
			return "", err
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// BindAdapter binds a parsed adapter to m (see LoadAdapter): its
// architecture, layers and every projection's shape must be the model's.
// A PEFT adapter of a model whose rotary pairs llama.cpp's converter
// interleaves (llama) has its Q and K updates permuted the same way. digest
// identifies the adapter's bytes; "" hashes its matrices.
func BindAdapter(m *Model, a *lora.Adapter, scale float32, digest string) (*Adapter, error) {
	h := m.Hyper
	if a.Arch != "" && a.Arch != h.Arch {
		return nil, fmt.Errorf("%w: the adapter is for %s, the model is %s", ErrAdapterMismatch, a.Arch, h.Arch)
	}
	if math.IsNaN(float64(scale)) || math.IsInf(float64(scale), 0) {
		return nil, fmt.Errorf("%w: scale %v", ErrAdapterMismatch, scale)
	}
	if a.Format == "peft" && !h.RopeNeox {
		a = a.Permuted(h.Heads, h.KVHeads, false)
	}
	if digest == "" {
		digest = matricesDigest(a)
	}
	b := &Adapter{Key: fmt.Sprintf("%s*%g", digest, scale), Rank: a.Rank, model: m, layers: make([][numSlots][]*loraMat, h.Layers)}
	for _, p := range a.Pairs {
		if err := b.bind(p, a.Alpha, scale); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// bind places one pair in its slots, checking its shape against the model.
func (b *Adapter) bind(p lora.Pair, alpha, scale float32) error {
	h := b.model.Hyper
	if p.Layer < 0 || p.Layer >= h.Layers {
		return fmt.Errorf("%w: layer %d, the model has %d", ErrAdapterMismatch, p.Layer, h.Layers)
	}
	rank := len(p.A) / p.In
	s := scale
	if alpha != 0 {
		s = scale * alpha / float32(rank)
	}
	// Each target's slots, with their output rows within the pair's B.
	type part struct {
		slot loraSlot
		rows int
	}
	qd, kvd := h.QDim(), h.KVDim()
	var in int
	var parts []part
	switch t := p.Target; {
	case t == lora.AttnQ && !h.FusedQKV:
		in, parts = h.Embd, []part{{slotQ, qd}}
	case t == lora.AttnK && !h.FusedQKV:
		in, parts = h.Embd, []part{{slotK, kvd}}
	case t == lora.AttnV && !h.FusedQKV:
		in, parts = h.Embd, []part{{slotV, kvd}}
	case t == lora.AttnQKV && h.FusedQKV:
		in, parts = h.Embd, []part{{slotQ, qd}, {slotK, kvd}, {slotV, kvd}}
	case t == lora.AttnOutput:
		in, parts = qd, []part{{slotO, h.Embd}}
	case t == lora.FFNGate && !h.FusedQKV:
		in, parts = h.Embd, []part{{slotGate, h.FFN}}
	case t == lora.FFNUp && !h.FusedQKV:
		in, parts = h.Embd, []part{{slotUp, h.FFN}}
	case t == lora.FFNUp && h.FusedQKV:
		in, parts = h.Embd, []part{{slotGate, h.FFN}, {slotUp, h.FFN}}
	case t == lora.FFNDown:
		in, parts = h.FFN, []part{{slotDown, h.Embd}}
	default:
		return fmt.Errorf("%w: %s has no %s projection", ErrAdapterMismatch, h.Arch, t)
	}
	out := 0
	for _, pt := range parts {
		out += pt.rows
	}
	if p.In != in || p.Out != out {
		return fmt.Errorf("%w: layer %d %s is %d x %d, the model's is %d x %d", ErrAdapterMismatch, p.Layer, p.Target, p.Out, p.In, out, in)
	}
	row := 0
	for _, pt := range parts {
		bt := make([]float32, rank*pt.rows)
		for o := range pt.rows {
			for j := range rank {
				bt[j*pt.rows+o] = p.B[(row+o)*rank+j]
			}
		}
		row += pt.rows
		m := &loraMat{a: p.A, bt: bt, rank: rank, in: in, out: pt.rows, scale: s, xType: p.AType, tType: p.BType}
		b.layers[p.Layer][pt.slot] = append(b.layers[p.Layer][pt.slot], m)
		b.bytes += int64(4 * len(bt))
	}
	b.bytes += int64(4 * len(p.A))
	return nil
}

func f32Bytes(x []float32) []byte {
	b := make([]byte, 4*len(x))
	for i, v := range x {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	}
	return b
}

// matricesDigest hashes an adapter's alpha and matrices.
func matricesDigest(a *lora.Adapter) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s %g\n", a.Arch, a.Alpha)
	for _, p := range a.Pairs {
		fmt.Fprintf(h, "%d %s %d %d\n", p.Layer, p.Target, p.In, p.Out)
		h.Write(f32Bytes(p.A))
		h.Write(f32Bytes(p.B))
	}
	return hex.EncodeToString(h.Sum(nil))
}

// StackAdapters combines adapters of one model into one that applies them
// all, in order (llama.cpp's repeated --lora). Its Key names them all.
func StackAdapters(as ...*Adapter) (*Adapter, error) {
	if len(as) == 0 {
		return nil, fmt.Errorf("%w: no adapters to stack", ErrAdapterMismatch)
	}
	if len(as) == 1 {
		return as[0], nil
	}
	m := as[0].model
	s := &Adapter{model: m, layers: make([][numSlots][]*loraMat, m.Hyper.Layers)}
	for i, a := range as {
		if a.model != m {
			return nil, fmt.Errorf("%w: adapters bound to different models", ErrAdapterMismatch)
		}
		if i > 0 {
			s.Key += "|"
		}
		s.Key += a.Key
		s.Rank = max(s.Rank, a.Rank)
		s.bytes += a.bytes
		for l := range a.layers {
			for slot, ms := range a.layers[l] {
				s.layers[l][slot] = append(s.layers[l][slot], ms...)
			}
		}
	}
	return s, nil
}

// cacheModel is the model name the prefix cache keys a request's pages by:
// the weights, and the adapter when there is one.
func cacheModel(m *Model, a *Adapter) string {
	if a == nil {
		return m.Digest
	}
	return m.Digest + "+lora:" + a.Key
}

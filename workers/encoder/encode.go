package encoder

import (
	"errors"
	"fmt"
	"math"
	"sync"

	"github.com/bulkhead-ai/bulkhead/workers/kernels"
)

// Errors of an encoding pass; each names the input it is about.
var (
	ErrNoInput    = errors.New("encoder: no input")
	ErrEmptyInput = errors.New("encoder: empty input")
	ErrTooLong    = errors.New("encoder: input longer than the model's window")
	ErrBadToken   = errors.New("encoder: token id outside the vocabulary")
)

// parRows is the number of rows from which a row step (biases, norms,
// activations) is split across the pool.
const parRows = 16

// Encoder runs encoding passes of one model on a kernel pool. Encode may be
// called from several goroutines; their passes run one at a time.
type Encoder struct {
	m    *Model
	ks   kernels.Set
	pool *kernels.Pool

	mu sync.Mutex
	// scratch of the pass under mu, grown as needed, indexed by row
	x, tmp, q, k, v, att, up []float32
	spans                    []span
	items                    []attnItem
	slot                     []attnSlot // one per pool thread
}

// span is one input's rows in a pass.
type span struct{ row, n int }

// attnItem is one head of one input's attention.
type attnItem struct{ input, head int }

// attnSlot is one pool thread's attention scratch.
type attnSlot struct {
	scores []float32 // one head's scores: a row per query over its input's positions
	vt     []float32 // one head's values transposed: HeadDim rows of n
}

// New returns an encoder of m computing on pool.
func New(m *Model, pool *kernels.Pool) *Encoder {
	return &Encoder{m: m, ks: m.kernels, pool: pool, slot: make([]attnSlot, pool.Threads())}
}

// Model is the encoder's model.
func (e *Encoder) Model() *Model { return e.m }

// Check returns nil if ids can be encoded: not empty, no longer than the
// model's window, every id in the vocabulary.
func (e *Encoder) Check(ids []int32) error {
	h := e.m.Hyper
	switch {
	case len(ids) == 0:
		return ErrEmptyInput
	case len(ids) > h.Context:
		return fmt.Errorf("%w: %d tokens, the window is %d", ErrTooLong, len(ids), h.Context)
	}
	for _, id := range ids {
		if id < 0 || int(id) >= h.Vocab {
			return fmt.Errorf("%w: %d (vocabulary of %d)", ErrBadToken, id, h.Vocab)
		}
	}
	return nil
}

// Encode runs one pass over inputs (token ids each, special tokens included,
// as Model.Tokenize makes them) and returns one vector per input, in order:
// the pooled vector, not normalised (see Normalize), or for rank pooling the
// classification head's Labels scores. Inputs do not attend to each other,
// and every step computes each row the same way whatever else is in the
// pass, so an input's vector does not depend on the other inputs. A bad
// input fails the pass, naming its index.
func (e *Encoder) Encode(inputs [][]int32) ([][]float32, error) {
	if len(inputs) == 0 {
		return nil, ErrNoInput
	}
	if e.m.Hyper.Pooling == PoolNone {
		return nil, fmt.Errorf("%w: the model names no pooling type", ErrBadModel)
	}
	for i, ids := range inputs {
		if err := e.Check(ids); err != nil {
			return nil, fmt.Errorf("input %d: %w", i, err)
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	T := e.size(inputs)
	e.embed(inputs)
	for l := range e.m.Layers {
		e.layer(&e.m.Layers[l], T)
	}
	out := make([][]float32, len(inputs))
	for i, s := range e.spans {
		out[i] = e.pooled(s)
	}
	return out, nil
}

// size lays the inputs out as rows and grows the scratch; it returns the
// number of rows.
func (e *Encoder) size(inputs [][]int32) int {
	h := e.m.Hyper
	e.spans = e.spans[:0]
	T, longest := 0, 0
	for _, ids := range inputs {
		e.spans = append(e.spans, span{row: T, n: len(ids)})
		T += len(ids)
		longest = max(longest, len(ids))
	}
	e.x = grow(e.x, T*h.Embd)
	e.tmp = grow(e.tmp, T*h.Embd)
	e.q = grow(e.q, T*h.Embd)
	e.k = grow(e.k, T*h.Embd)
	e.v = grow(e.v, T*h.Embd)
	e.att = grow(e.att, T*h.Embd)
	e.up = grow(e.up, T*h.FFN)
	e.items = e.items[:0]
	for i := range inputs {
		for hd := range h.Heads {
			e.items = append(e.items, attnItem{input: i, head: hd})
		}
	}
	for i := range e.slot {
		e.slot[i].scores = grow(e.slot[i].scores, longest*longest)
		e.slot[i].vt = grow(e.slot[i].vt, longest*h.HeadDim)
	}
	return T
}

func grow(b []float32, n int) []float32 {
	if cap(b) < n {
		return make([]float32, n)
	}
	return b[:n]
}

// embed writes each row's input: LayerNorm(token + type 0 + position), as
// llama.cpp's BERT graph adds them (token and type, then the position).
func (e *Encoder) embed(inputs [][]int32) {
	m, E := e.m, e.m.Hyper.Embd
	pos := make([]float32, E)
	for i, ids := range inputs {
		for j, id := range ids {
			x := e.x[(e.spans[i].row+j)*E:][:E]
			m.TokEmbd.Row(int(id), x)
			if m.TypeRow != nil {
				for d, t := range m.TypeRow {
					x[d] += t
				}
			}
			m.PosEmbd.Row(j, pos)
			for d, p := range pos {
				x[d] += p
			}
			e.ks.LayerNorm(x, x, m.EmbdNorm, m.EmbdNormB, m.Hyper.NormEps)
		}
	}
}

// layer runs one block over all T rows: attention, its output plus the
// block's input LayerNormed, then the GELU FFN, its output plus its input
// LayerNormed.
func (e *Encoder) layer(L *Layer, T int) {
	h, p := e.m.Hyper, e.pool
	E := h.Embd
	p.MatMul(e.q, L.Q, e.x, T)
	p.MatMul(e.k, L.K, e.x, T)
	p.MatMul(e.v, L.V, e.x, T)
	e.rows(T, func(r int) {
		e.addTo(e.q[r*E:][:E], L.QB)
		e.addTo(e.k[r*E:][:E], L.KB)
		e.addTo(e.v[r*E:][:E], L.VB)
	})
	e.attention()
	p.MatMul(e.tmp, L.O, e.att, T)
	e.rows(T, func(r int) {
		t, x := e.tmp[r*E:][:E], e.x[r*E:][:E]
		e.addTo(t, L.OB)
		e.addTo(t, x)
		e.ks.LayerNorm(x, t, L.AttnNorm, L.AttnNormB, h.NormEps)
	})
	p.MatMul(e.up, L.Up, e.x, T)
	e.rows(T, func(r int) {
		u := e.up[r*h.FFN:][:h.FFN]
		e.addTo(u, L.UpB)
		e.ks.GELU(u, u)
	})
	p.MatMul(e.tmp, L.Down, e.up, T)
	e.rows(T, func(r int) {
		t, x := e.tmp[r*E:][:E], e.x[r*E:][:E]
		e.addTo(t, L.DownB)
		e.addTo(t, x)
		e.ks.LayerNorm(x, t, L.OutNorm, L.OutNormB, h.NormEps)
	})
}

// rows calls fn for each of T rows, across the pool when there are many.
func (e *Encoder) rows(T int, fn func(r int)) {
	if T < parRows {
		for r := range T {
			fn(r)
		}
		return
	}
	e.pool.Run(T, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			fn(r)
		}
	})
}

// addTo adds b to dst element by element; a nil b adds nothing.
func (e *Encoder) addTo(dst, b []float32) {
	if b != nil {
		e.ks.Add(dst, b)
	}
}

// attention computes e.att from e.q, e.k and e.v: every head of every input
// over that input's positions only, both directions, with scores scaled by
// 1/sqrt(HeadDim) and softmaxed as ggml's soft_max_ext does, and values
// summed as ggml's product with the transposed values.
func (e *Encoder) attention() {
	n := len(e.slot)
	e.pool.Run(n, func(lo, hi int) {
		for s := lo; s < hi; s++ {
			for it := s; it < len(e.items); it += n {
				e.attendHead(&e.slot[s], e.items[it])
			}
		}
	})
}

func (e *Encoder) attendHead(sl *attnSlot, it attnItem) {
	h := e.m.Hyper
	E, hd := h.Embd, h.HeadDim
	sp := e.spans[it.input]
	n, base := sp.n, sp.row*E+it.head*hd
	scale := float32(1 / math.Sqrt(float64(hd)))
	vt := sl.vt[:n*hd]
	for j := range n {
		for d, x := range e.v[base+j*E:][:hd] {
			vt[d*n+j] = x
		}
	}
	sc := sl.scores[:n*n]
	e.ks.MulT(sc, n, e.q[base:], E, n, e.k[base:], E, n, hd)
	for i := range n {
		row := sc[i*n:][:n]
		e.ks.Scale(row, scale)
		e.ks.Softmax(row)
	}
	e.ks.MulT(e.att[base:], E, sc, n, n, vt, n, hd, n)
}

// pooled returns one input's vector from the last layer's rows.
func (e *Encoder) pooled(s span) []float32 {
	m := e.m
	E := m.Hyper.Embd
	out := make([]float32, E)
	switch m.Hyper.Pooling {
	case PoolMean:
		inv := 1 / float32(s.n)
		for j := range s.n {
			for d, x := range e.x[(s.row+j)*E:][:E] {
				out[d] += x * inv
			}
		}
	case PoolLast:
		copy(out, e.x[(s.row+s.n-1)*E:][:E])
	default: // cls, rank
		copy(out, e.x[s.row*E:][:E])
	}
	if m.Hyper.Pooling != PoolRank {
		return out
	}
	if m.HasCls {
		hid := make([]float32, E)
		e.pool.MatMul(hid, m.Cls, out, 1)
		e.addTo(hid, m.ClsB)
		for d, x := range hid {
			hid[d] = float32(math.Tanh(float64(x)))
		}
		out = hid
	}
	scores := make([]float32, m.Hyper.Labels)
	e.pool.MatMul(scores, m.ClsOut, out, 1)
	e.addTo(scores, m.ClsOutB)
	return scores
}

// Normalize scales v to unit Euclidean length in place, as llama.cpp's
// embedding normalisation 2 does: the squares summed in float64, each
// element multiplied by the reciprocal of the root. A zero vector stays zero.
func Normalize(v []float32) {
	var sum float64
	for _, x := range v {
		sum += float64(x) * float64(x)
	}
	if sum <= 0 {
		return
	}
	inv := float32(1 / math.Sqrt(sum))
	for i := range v {
		v[i] *= inv
	}
}

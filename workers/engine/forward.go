package engine

import (
	"fmt"
	"math"

	"github.com/bulkhead-ai/bulkhead/workers/kernels"
	"github.com/bulkhead-ai/bulkhead/workers/kvcache"
)

// chunk is one sequence's share of a forward step: tokens at positions
// pos0.. pos0+len(tokens)-1, appended to the sequence's KV.
type chunk struct {
	seq    *kvcache.Sequence
	tokens []int32
	pos0   int
	logits bool  // compute next-token logits after the chunk's last token
	err    error // set when this chunk failed; its rows are discarded
}

// forward computes steps of the model over a batch of chunks. It owns its
// scratch buffers, so one forward must be used by one goroutine at a time.
type forward struct {
	m    *Model
	pool *kernels.Pool

	// scratch, grown as needed, indexed by batch row
	x, xn, q, k, v, att, tmp []float32
	gate, up                 []float32
	rope                     []float32 // per row: RopeDims/2 (cos, sin) pairs
	rowPos                   []int
	rowChunk                 []int
	slot                     []attnScratch // one per pool thread
	logitRows                []float32
	logits                   []float32
}

type attnScratch struct {
	q16    []uint16
	scores []float32
	w16    []uint16 // softmax weights rounded to half
}

func newForward(m *Model, pool *kernels.Pool) *forward {
	fw := &forward{m: m, pool: pool}
	fw.slot = make([]attnScratch, pool.Threads())
	for i := range fw.slot {
		fw.slot[i].q16 = make([]uint16, m.Hyper.HeadDim)
	}
	return fw
}

func grow(b []float32, n int) []float32 {
	if cap(b) < n {
		return make([]float32, n)
	}
	return b[:n]
}

// run computes one step. For every chunk with logits set, it returns that
// chunk's next-token logits (Vocab floats) in order; the slices are valid until
// the next run. Chunks that fail (a KV write or view refused) get err set and
// no logits; the other chunks are unaffected.
func (fw *forward) run(chunks []*chunk) [][]float32 {
	h := fw.m.Hyper
	T := 0
	for _, c := range chunks {
		T += len(c.tokens)
	}
	qd, kvd := h.Heads*h.HeadDim, h.KVDim()
	fw.x = grow(fw.x, T*h.Embd)
	fw.xn = grow(fw.xn, T*h.Embd)
	fw.tmp = grow(fw.tmp, T*h.Embd)
	fw.q = grow(fw.q, T*qd)
	fw.att = grow(fw.att, T*qd)
	fw.k = grow(fw.k, T*kvd)
	fw.v = grow(fw.v, T*kvd)
	fw.gate = grow(fw.gate, T*h.FFN)
	fw.up = grow(fw.up, T*h.FFN)
	fw.rope = grow(fw.rope, T*h.RopeDims)
	if cap(fw.rowPos) < T {
		fw.rowPos, fw.rowChunk = make([]int, T), make([]int, T)
	}
	fw.rowPos, fw.rowChunk = fw.rowPos[:T], fw.rowChunk[:T]

	r := 0
	for ci, c := range chunks {
		for j, tok := range c.tokens {
			fw.rowPos[r], fw.rowChunk[r] = c.pos0+j, ci
			if tok < 0 || int(tok) >= h.Vocab {
				c.err = fmt.Errorf("%w: token id %d outside vocabulary of %d", ErrInvalidRequest, tok, h.Vocab)
				tok = 0
			}
			fw.m.Embed.Row(int(tok), fw.x[r*h.Embd:(r+1)*h.Embd])
			ropeAngles(fw.rope[r*h.RopeDims:(r+1)*h.RopeDims], fw.rowPos[r], h.RopeBase)
			r++
		}
	}

	for l := range fw.m.Layers {
		fw.layer(l, chunks, T)
	}

	// Final norm and logits, only for the rows that need them.
	nl := 0
	for _, c := range chunks {
		if c.logits && c.err == nil {
			nl++
		}
	}
	out := make([][]float32, 0, nl)
	if nl == 0 {
		return out
	}
	fw.logitRows = grow(fw.logitRows, nl*h.Embd)
	fw.logits = grow(fw.logits, nl*h.Vocab)
	i, r := 0, 0
	for _, c := range chunks {
		last := r + len(c.tokens) - 1
		r += len(c.tokens)
		if !c.logits || c.err != nil {
			continue
		}
		kernels.RMSNorm(fw.logitRows[i*h.Embd:(i+1)*h.Embd], fw.x[last*h.Embd:(last+1)*h.Embd], fw.m.OutNorm, h.NormEps)
		i++
	}
	fw.pool.MatMul(fw.logits, fw.m.Output, fw.logitRows, nl)
	for i := 0; i < nl; i++ {
		out = append(out, fw.logits[i*h.Vocab:(i+1)*h.Vocab])
	}
	return out
}

// layer runs transformer block l over all T rows in place on fw.x.
func (fw *forward) layer(l int, chunks []*chunk, T int) {
	h := fw.m.Hyper
	L := &fw.m.Layers[l]
	qd, kvd, E := h.Heads*h.HeadDim, h.KVDim(), h.Embd

	for r := 0; r < T; r++ {
		kernels.RMSNorm(fw.xn[r*E:(r+1)*E], fw.x[r*E:(r+1)*E], L.AttnNorm, h.NormEps)
	}
	fw.pool.MatMul(fw.q, L.Q, fw.xn, T)
	fw.pool.MatMul(fw.k, L.K, fw.xn, T)
	fw.pool.MatMul(fw.v, L.V, fw.xn, T)
	for r := 0; r < T; r++ {
		q, k, v := fw.q[r*qd:(r+1)*qd], fw.k[r*kvd:(r+1)*kvd], fw.v[r*kvd:(r+1)*kvd]
		if h.QKVBias {
			kernels.Add(q, L.QBias)
			kernels.Add(k, L.KBias)
			kernels.Add(v, L.VBias)
		}
		cs := fw.rope[r*h.RopeDims : (r+1)*h.RopeDims]
		for hd := 0; hd < h.Heads; hd++ {
			rope(q[hd*h.HeadDim:(hd+1)*h.HeadDim], cs, h.RopeNeox)
		}
		for hd := 0; hd < h.KVHeads; hd++ {
			rope(k[hd*h.HeadDim:(hd+1)*h.HeadDim], cs, h.RopeNeox)
		}
	}

	// Append this layer's K and V for every chunk, then take the views that
	// attention reads through: a view covers only slots this sequence wrote.
	views := make([]kvcache.View, len(chunks))
	r := 0
	for ci, c := range chunks {
		n := len(c.tokens)
		if c.err == nil {
			for j := 0; j < n && c.err == nil; j++ {
				row := r + j
				if err := c.seq.Write(l, c.pos0+j, fw.k[row*kvd:(row+1)*kvd], fw.v[row*kvd:(row+1)*kvd]); err != nil {
					c.err = fmt.Errorf("engine: KV write at layer %d position %d: %w", l, c.pos0+j, err)
				}
			}
		}
		if c.err == nil {
			v, err := c.seq.View(l, c.pos0+n)
			if err != nil {
				c.err = fmt.Errorf("engine: KV view at layer %d: %w", l, err)
			}
			views[ci] = v
		}
		r += n
	}

	fw.attention(chunks, views, T)

	fw.pool.MatMul(fw.tmp, L.O, fw.att, T)
	kernels.Add(fw.x[:T*E], fw.tmp[:T*E])

	for r := 0; r < T; r++ {
		kernels.RMSNorm(fw.xn[r*E:(r+1)*E], fw.x[r*E:(r+1)*E], L.FFNNorm, h.NormEps)
	}
	fw.pool.MatMul(fw.gate, L.Gate, fw.xn, T)
	fw.pool.MatMul(fw.up, L.Up, fw.xn, T)
	kernels.SwiGLU(fw.gate[:T*h.FFN], fw.gate[:T*h.FFN], fw.up[:T*h.FFN])
	fw.pool.MatMul(fw.tmp, L.Down, fw.gate, T)
	kernels.Add(fw.x[:T*E], fw.tmp[:T*E])
}

// attention computes causal attention for every (row, head) pair. As in
// llama.cpp's default (non-flash) path, K and V are half precision, the query is
// rounded to half before Q·K, and the softmax weights are rounded to half before
// they weight V.
func (fw *forward) attention(chunks []*chunk, views []kvcache.View, T int) {
	h := fw.m.Hyper
	qd, hd, kvd := h.Heads*h.HeadDim, h.HeadDim, h.KVDim()
	group := h.Heads / h.KVHeads
	scale := float32(1 / math.Sqrt(float64(hd)))
	items := T * h.Heads
	nslot := len(fw.slot)
	fw.pool.Run(nslot, func(lo, hi int) {
		for s := lo; s < hi; s++ {
			sc := &fw.slot[s]
			for it := s; it < items; it += nslot {
				r, head := it/h.Heads, it%h.Heads
				out := fw.att[r*qd+head*hd : r*qd+(head+1)*hd]
				clear(out)
				c := chunks[fw.rowChunk[r]]
				if c.err != nil {
					continue
				}
				view := views[fw.rowChunk[r]]
				n := fw.rowPos[r] + 1 // causal: positions 0..pos
				if cap(sc.scores) < n {
					sc.scores = make([]float32, n, n+n/2)
				}
				scores := sc.scores[:n]
				if cap(sc.w16) < n {
					sc.w16 = make([]uint16, n, cap(sc.scores))
				}
				kernels.F32ToF16s(sc.q16, fw.q[r*qd+head*hd:r*qd+(head+1)*hd])
				koff := head / group * hd // this head's K/V columns in a row
				// Walk the view page by page: rows of a page are contiguous.
				for p, t := 0, 0; t < n; p++ {
					kp, m := view.KPage(p), view.PageLen(p)
					for j := 0; j < m && t < n; j, t = j+1, t+1 {
						scores[t] = kernels.DotF16(sc.q16, kp[j*kvd+koff:j*kvd+koff+hd]) * scale
					}
				}
				kernels.Softmax(scores)
				// llama.cpp rounds the weights to half before they weight V.
				w16 := sc.w16[:n]
				kernels.F32ToF16s(w16, scores)
				kernels.F16ToF32s(scores, w16)
				for p, t := 0, 0; t < n; p++ {
					vp, m := view.VPage(p), view.PageLen(p)
					for j := 0; j < m && t < n; j, t = j+1, t+1 {
						kernels.AxpyF16(out, scores[t], vp[j*kvd+koff:j*kvd+koff+hd])
					}
				}
			}
		}
	})
}

// ropeAngles fills cs with (cos, sin) pairs for position pos, computing the
// angle the way ggml does: theta starts at pos and is multiplied by
// base^(-2/dims) for each successive pair, in float32.
func ropeAngles(cs []float32, pos int, base float32) {
	dims := len(cs)
	thetaScale := float32(math.Pow(float64(base), -2.0/float64(dims)))
	theta := float32(pos)
	for i := 0; i < dims; i += 2 {
		cs[i] = float32(math.Cos(float64(theta)))
		cs[i+1] = float32(math.Sin(float64(theta)))
		theta *= thetaScale
	}
}

// rope rotates the first len(cs) dimensions of one head vector x. Normal mode
// rotates adjacent pairs (2i, 2i+1); NEOX mode rotates (i, i+dims/2).
func rope(x, cs []float32, neox bool) {
	dims := len(cs)
	half := dims / 2
	for i := 0; i < dims; i += 2 {
		c, s := cs[i], cs[i+1]
		a, b := i, i+1
		if neox {
			a, b = i/2, i/2+half
		}
		x0, x1 := x[a], x[b]
		x[a] = x0*c - x1*s
		x[b] = x0*s + x1*c
	}
}

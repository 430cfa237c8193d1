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
	logits bool // compute next-token logits after the chunk's last token
	// every extends logits to every row of the chunk, in order (a decode
	// step verifying drafted tokens, speculate.go).
	every bool
	// adapter, when set, is the LoRA adapter the chunk's rows run under.
	adapter *Adapter
	err     error // set when this chunk failed; its rows are discarded
}

// logitRows is the number of rows the chunk wants logits for.
func (c *chunk) logitRows() int {
	switch {
	case !c.logits:
		return 0
	case c.every:
		return len(c.tokens)
	}
	return 1
}

// forward computes steps of the model over a batch of chunks. It owns its
// scratch buffers, so one forward must be used by one goroutine at a time.
type forward struct {
	m    *Model
	ks   kernels.Set // the model's kernel set: every op below runs it
	pool *kernels.Pool

	// scratch, grown as needed, indexed by batch row
	x, xn, tmp []float32
	// Attention's q, k, v and att and the feed-forward's gate and up are
	// never live at once: a layer's feed-forward starts after its attention
	// output went through the output projection, and the next layer's
	// projections after the feed-forward. So they are cut from one buffer,
	// work, each to its own length and capacity (size).
	q, k, v, att []float32
	gate, up     []float32
	work         []float32
	rope         []float32 // per row: RopeDims/2 (cos, sin) pairs
	ropeSWA      []float32 // the same at RopeBaseSWA, for sliding-window layers
	embRow       []byte    // one row of the embedding table, read from the file
	ffnRows      int       // rows the feed-forward takes at a time (ffnBlockRows)
	rowPos       []int
	rowChunk     []int
	slot         []attnScratch // one per pool thread
	logitRows    []float32
	logits       []float32
	out          [][]float32    // run's result, reused
	groups       []attnGroup    // attention's row groups this step
	items        []attnItem     // attention's units of work this step
	views        []kvcache.View // appendKV's result, reused
	rot          kvRot          // the KV cache's rotations (from its type)
	lora         loraStep       // this step's adapters (lora_forward.go)

	// The attention step's parameters, set before each pool.Run of attnFn
	// (fw.attendSlots, bound once so the decode loop does not allocate).
	aj     attnJob
	attnFn func(lo, hi int)

	// The row step's parameters, set before each pool.Run of rowsFn
	// (fw.rowRange, bound once for the same reason).
	rj     rowJob
	rowsFn func(lo, hi int)
}

// rowOp is an elementwise step of a layer, row by row.
type rowOp int

const (
	opAttnNorm rowOp = iota // xn = norm(x) with the layer's attention norm
	opQKV                   // biases, Q/K norms, RoPE and the query scale of q, k, v
	opPostNorm              // tmp = norm(tmp) with rj.norm (a post-norm)
	opAdd                   // x += tmp
	opFFNNorm               // xn = norm(x) with the layer's FFN norm
	opGLU                   // gate = act(gate) * up
)

// rowJob is one row step: its op, the layer, and for opPostNorm the norm.
type rowJob struct {
	op   rowOp
	l    int
	norm []float32
}

// parRows is the number of rows from which a step splits its elementwise work
// across the pool: a prefill chunk's norms, RoPE and activations then do not
// leave the other threads idle, and a decode step of a few rows does not pay
// a hand-off per op.
const parRows = 16

func newForward(m *Model, pool *kernels.Pool, rot kvRot) *forward {
	fw := &forward{m: m, ks: m.kernels, pool: pool, ffnRows: ffnBlockRows(m.Hyper.FFN), rot: rot}
	fw.embRow = make([]byte, m.Embed.RowBytes())
	fw.attnFn = fw.attendSlots
	fw.rowsFn = fw.rowRange
	fw.lora.fn = fw.lora.job.run
	fw.slot = make([]attnScratch, pool.Threads())
	// Scores for up to 4096 positions up front, so decode does not grow them.
	ctx := min(max(m.Hyper.Context, 16), 4096)
	for i := range fw.slot {
		fw.slot[i].ks = m.kernels
		fw.slot[i].q16 = make([]uint16, m.Hyper.HeadDim)
		fw.slot[i].qq = make([]byte, m.Hyper.HeadDim/32*2*kernels.Q8Halves)
		fw.slot[i].qq4 = make([]byte, attnBlock*m.Hyper.HeadDim/32*2*kernels.Q8Halves)
		fw.slot[i].o4 = make([]float32, attnBlock*m.Hyper.HeadDim)
		fw.slot[i].qf = make([]float32, m.Hyper.HeadDim)
		fw.slot[i].q16x4 = make([]uint16, attnBlock*m.Hyper.HeadDim)
		fw.slot[i].qf4 = make([]float32, attnBlock*m.Hyper.HeadDim)
		for j := range fw.slot[i].s4 {
			fw.slot[i].s4[j] = make([]float32, 0, ctx)
		}
		for j := range fw.slot[i].pad {
			fw.slot[i].pad[j] = make([]float32, m.Hyper.HeadDim)
		}
		fw.slot[i].scores = make([]float32, 0, ctx)
		fw.slot[i].w16 = make([]uint16, 0, ctx)
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
// chunk's next-token logits (Vocab floats) in order, one slice per row for a
// chunk with every set; the slices are valid until the next run. Chunks that fail (a KV write or view refused) get err set and
// no logits; the other chunks are unaffected.
func (fw *forward) run(chunks []*chunk) [][]float32 {
	T := fw.size(chunks)
	fw.embed(chunks)
	for l := range fw.m.Layers {
		fw.layer(l, chunks, T)
	}
	return fw.logitsOf(chunks)
}

// size grows the scratch buffers for the step's rows, and lists attention's
// row groups, and returns the number of rows.
func (fw *forward) size(chunks []*chunk) int {
	h := fw.m.Hyper
	T := 0
	for _, c := range chunks {
		T += len(c.tokens)
	}
	qd, kvd := h.Heads*h.HeadDim, h.KVDim()
	fw.x = grow(fw.x, T*h.Embd)
	fw.xn = grow(fw.xn, T*h.Embd)
	fw.tmp = grow(fw.tmp, T*h.Embd)
	ffn := min(T, fw.ffnRows) * h.FFN
	fw.work = grow(fw.work, max(2*T*qd+2*T*kvd, 2*ffn))
	w := fw.work
	cut := func(n int) []float32 {
		b := w[:n:n]
		w = w[n:]
		return b
	}
	fw.q, fw.att, fw.k, fw.v = cut(T*qd), cut(T*qd), cut(T*kvd), cut(T*kvd)
	w = fw.work
	fw.gate, fw.up = cut(ffn), cut(ffn)
	fw.rope = grow(fw.rope, T*h.RopeDims)
	if h.SWA != nil {
		fw.ropeSWA = grow(fw.ropeSWA, T*h.RopeDims)
	}
	if cap(fw.rowPos) < T {
		fw.rowPos, fw.rowChunk = make([]int, T), make([]int, T)
	}
	fw.rowPos, fw.rowChunk = fw.rowPos[:T], fw.rowChunk[:T]

	// Attention takes a chunk's rows in groups of attnBlock that share
	// their keys but the last few.
	fw.groups = fw.groups[:0]
	for r, c := 0, 0; c < len(chunks); c++ {
		for j := 0; j < len(chunks[c].tokens); j += attnBlock {
			fw.groups = append(fw.groups, attnGroup{row: r + j, n: min(attnBlock, len(chunks[c].tokens)-j)})
		}
		r += len(chunks[c].tokens)
	}
	fw.listItems()
	fw.lora.plan(chunks, T)
	return T
}

// listItems lists attention's units of work over fw.groups: one per head for
// a group of several rows, one per attnBlock heads of a KV head for a single
// row.
func (fw *forward) listItems() {
	h := fw.m.Hyper
	group := h.Heads / h.KVHeads
	fw.items = fw.items[:0]
	for gi, g := range fw.groups {
		if g.n > 1 || group == 1 {
			for head := range h.Heads {
				fw.items = append(fw.items, attnItem{group: gi, head: head, nh: 1})
			}
			continue
		}
		for kv := range h.KVHeads {
			end := (kv + 1) * group
			for h0 := kv * group; h0 < end; h0 += attnBlock {
				fw.items = append(fw.items, attnItem{group: gi, head: h0, nh: min(attnBlock, end-h0)})
			}
		}
	}
}

// embed writes each row's embedding into fw.x and its RoPE angles, and
// marks a chunk with a token outside the vocabulary as failed.
func (fw *forward) embed(chunks []*chunk) {
	h := fw.m.Hyper
	r := 0
	for ci, c := range chunks {
		for j, tok := range c.tokens {
			fw.rowPos[r], fw.rowChunk[r] = c.pos0+j, ci
			if tok < 0 || int(tok) >= h.Vocab {
				c.err = fmt.Errorf("%w: token id %d outside vocabulary of %d", ErrInvalidRequest, tok, h.Vocab)
				tok = 0
			}
			x := fw.x[r*h.Embd : (r+1)*h.Embd]
			fw.m.embedRow(int(tok), x, fw.embRow)
			if h.EmbedScale != 0 {
				fw.ks.Scale(x, h.EmbedScale)
			}
			ropeAngles(fw.rope[r*h.RopeDims:(r+1)*h.RopeDims], fw.rowPos[r], h.RopeBase)
			if h.SWA != nil {
				ropeAngles(fw.ropeSWA[r*h.RopeDims:(r+1)*h.RopeDims], fw.rowPos[r], h.RopeBaseSWA)
			}
			r++
		}
	}
}

// logitsOf computes the final norm and the logits for the last row of every
// chunk that wants them and has not failed.
func (fw *forward) logitsOf(chunks []*chunk) [][]float32 {
	h := fw.m.Hyper
	nl := 0
	for _, c := range chunks {
		if c.logits && c.err == nil {
			nl += c.logitRows()
		}
	}
	out := fw.out[:0]
	defer func() { fw.out = out[:0] }()
	if nl == 0 {
		return out
	}
	fw.logitRows = grow(fw.logitRows, nl*h.Embd)
	fw.logits = grow(fw.logits, nl*h.Vocab)
	i, r := 0, 0
	for _, c := range chunks {
		end := r + len(c.tokens)
		r = end
		if !c.logits || c.err != nil {
			continue
		}
		for row := end - c.logitRows(); row < end; row++ {
			fw.ks.RMSNorm(fw.logitRows[i*h.Embd:(i+1)*h.Embd], fw.x[row*h.Embd:(row+1)*h.Embd], fw.m.OutNorm, h.NormEps)
			i++
		}
	}
	fw.pool.MatMul(fw.logits, fw.m.Output, fw.logitRows, nl)
	for i := 0; i < nl; i++ {
		lg := fw.logits[i*h.Vocab : (i+1)*h.Vocab]
		if fw.m.OutBias != nil {
			kernels.Add(lg, fw.m.OutBias)
		}
		if h.FinalSoftCap != 0 {
			kernels.SoftCap(lg, h.FinalSoftCap)
		}
		out = append(out, lg)
	}
	return out
}

// layer runs transformer block l over all T rows in place on fw.x.
func (fw *forward) layer(l int, chunks []*chunk, T int) {
	L := &fw.m.Layers[l]
	fw.qkv(l, T)
	views := fw.appendKV(l, chunks)
	fw.attention(l, chunks, views, T)

	fw.pool.MatMul(fw.tmp, L.O, fw.att, T)
	fw.addLoRA(slotO, l, fw.tmp, fw.att, 0, T)
	fw.residual(l, L.PostAttnNorm, T)

	fw.eachRow(opFFNNorm, l, T)
	// The feed-forward takes fw.ffnRows rows at a time, so its two hidden
	// buffers stay small; every row is computed the same whatever the block.
	E := fw.m.Hyper.Embd
	for r0 := 0; r0 < T; r0 += fw.ffnRows {
		n := min(fw.ffnRows, T-r0)
		fw.pool.MatMul(fw.gate, L.Gate, fw.xn[r0*E:], n)
		fw.pool.MatMul(fw.up, L.Up, fw.xn[r0*E:], n)
		fw.addLoRA(slotGate, l, fw.gate, fw.xn[r0*E:], r0, n)
		fw.addLoRA(slotUp, l, fw.up, fw.xn[r0*E:], r0, n)
		fw.eachRow(opGLU, l, n)
		fw.pool.MatMul(fw.tmp[r0*E:], L.Down, fw.gate, n)
		fw.addLoRA(slotDown, l, fw.tmp[r0*E:], fw.gate, r0, n)
	}
	fw.residual(l, L.PostFFNNorm, T)
}

// ffnBufBytes bounds each of the feed-forward's two hidden buffers: a step
// takes as many rows at a time as fit (at least 64). For a 256-token prefill
// chunk of a 1B model (8192 hidden) they would be 8 MiB each, at 128 rows 4;
// a block still reuses every weight group across its rows, and the weights
// stream from memory once per block. Small models (135M: 682 rows fit) take
// a whole chunk at once: for them the extra passes cost 5-10% of prefill.
const ffnBufBytes = 4 << 20

// ffnBlockRows is the rows the feed-forward of a model of hidden width ffn
// takes at a time.
func ffnBlockRows(ffn int) int { return max(64, ffnBufBytes/(4*max(1, ffn))) }

// eachRow runs op of layer l over the step's T rows: split across the pool
// from parRows rows, on this goroutine below. Every row is computed the same
// either way.
func (fw *forward) eachRow(op rowOp, l, T int) {
	fw.eachRowNorm(op, l, nil, T)
}

func (fw *forward) eachRowNorm(op rowOp, l int, norm []float32, T int) {
	fw.rj = rowJob{op: op, l: l, norm: norm}
	if T < parRows {
		fw.rowRange(0, T)
	} else {
		fw.pool.Run(T, fw.rowsFn)
	}
	fw.rj.norm = nil
}

// rowRange computes fw.rj for rows [lo, hi).
func (fw *forward) rowRange(lo, hi int) {
	h := fw.m.Hyper
	L := &fw.m.Layers[fw.rj.l]
	E := h.Embd
	for r := lo; r < hi; r++ {
		x, xn, t := fw.x[r*E:(r+1)*E], fw.xn[r*E:(r+1)*E], fw.tmp[r*E:(r+1)*E]
		switch fw.rj.op {
		case opAttnNorm:
			fw.ks.RMSNorm(xn, x, L.AttnNorm, h.NormEps)
		case opQKV:
			fw.qkvRow(fw.rj.l, r)
		case opPostNorm:
			fw.ks.RMSNorm(t, t, fw.rj.norm, h.NormEps)
		case opAdd:
			kernels.Add(x, t)
		case opFFNNorm:
			fw.ks.RMSNorm(xn, x, L.FFNNorm, h.NormEps)
		case opGLU:
			act, up := fw.gate[r*h.FFN:(r+1)*h.FFN], fw.up[r*h.FFN:(r+1)*h.FFN]
			if h.GELU {
				kernels.GeGLU(act, act, up)
			} else {
				fw.ks.SwiGLU(act, act, up)
			}
		}
	}
}

// residual adds a sub-block's output (fw.tmp) into fw.x, first normalizing it
// with post when the architecture has post-norms.
func (fw *forward) residual(l int, post []float32, T int) {
	if post != nil {
		fw.eachRowNorm(opPostNorm, l, post, T)
	}
	fw.eachRow(opAdd, l, T)
}

// qkv computes block l's queries, keys and values for all T rows: norm,
// projections, then per row biases, Q/K norms, RoPE and the query pre-scale.
func (fw *forward) qkv(l, T int) {
	L := &fw.m.Layers[l]
	fw.eachRow(opAttnNorm, l, T)
	fw.pool.MatMul(fw.q, L.Q, fw.xn, T)
	fw.pool.MatMul(fw.k, L.K, fw.xn, T)
	fw.pool.MatMul(fw.v, L.V, fw.xn, T)
	if fw.lora.on() {
		fw.addLoRA(slotQ, l, fw.q, fw.xn, 0, T)
		fw.addLoRA(slotK, l, fw.k, fw.xn, 0, T)
		fw.addLoRA(slotV, l, fw.v, fw.xn, 0, T)
	}
	fw.eachRow(opQKV, l, T)
}

// qkvRow applies row r's biases, per-head Q/K norms, RoPE and query scale.
func (fw *forward) qkvRow(l, r int) {
	h := fw.m.Hyper
	L := &fw.m.Layers[l]
	qd, kvd, hd := h.QDim(), h.KVDim(), h.HeadDim
	table := fw.rope
	if h.SWA != nil && h.SWA[l] {
		table = fw.ropeSWA
	}
	q, k, v := fw.q[r*qd:(r+1)*qd], fw.k[r*kvd:(r+1)*kvd], fw.v[r*kvd:(r+1)*kvd]
	if h.QKVBias {
		kernels.Add(q, L.QBias)
		kernels.Add(k, L.KBias)
		kernels.Add(v, L.VBias)
	}
	cs := table[r*h.RopeDims : (r+1)*h.RopeDims]
	for i := 0; i < h.Heads; i++ {
		qh := q[i*hd : (i+1)*hd]
		if L.QNorm != nil {
			fw.ks.RMSNorm(qh, qh, L.QNorm, h.NormEps)
		}
		rope(qh, cs, h.RopeNeox)
	}
	for i := 0; i < h.KVHeads; i++ {
		kh := k[i*hd : (i+1)*hd]
		if L.KNorm != nil {
			fw.ks.RMSNorm(kh, kh, L.KNorm, h.NormEps)
		}
		rope(kh, cs, h.RopeNeox)
	}
	if h.QueryScale != 0 {
		fw.ks.Scale(q, h.QueryScale)
	}
}

// appendKV appends block l's K and V for every chunk, then takes the views
// that attention reads through: a view covers only slots this sequence wrote.
func (fw *forward) appendKV(l int, chunks []*chunk) []kvcache.View {
	kvd := fw.m.Hyper.KVDim()
	if cap(fw.views) < len(chunks) {
		fw.views = make([]kvcache.View, len(chunks))
	}
	views := fw.views[:len(chunks)]
	clear(views)
	r := 0
	for ci, c := range chunks {
		n := len(c.tokens)
		if c.err == nil {
			for j := 0; j < n && c.err == nil; j++ {
				row := r + j
				rotateRows(fw.k[row*kvd:(row+1)*kvd], fw.rot.k)
				rotateRows(fw.v[row*kvd:(row+1)*kvd], fw.rot.v)
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
	return views
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

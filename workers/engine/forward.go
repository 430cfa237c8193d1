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
	x, xn, q, k, v, att, tmp []float32
	gate, up                 []float32
	rope                     []float32 // per row: RopeDims/2 (cos, sin) pairs
	ropeSWA                  []float32 // the same at RopeBaseSWA, for sliding-window layers
	embRow                   []byte    // one row of the embedding table, read from the file
	ffnRows                  int       // rows the feed-forward takes at a time (ffnBlockRows)
	rowPos                   []int
	rowChunk                 []int
	slot                     []attnScratch // one per pool thread
	logitRows                []float32
	logits                   []float32
	out                      [][]float32    // run's result, reused
	groups                   []attnGroup    // attention's row groups this step
	items                    []attnItem     // attention's units of work this step
	views                    []kvcache.View // appendKV's result, reused
	rot                      kvRot          // the KV cache's rotations (from its type)
	lora                     loraStep       // this step's adapters (lora_forward.go)

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

// attnBlock is how many consecutive rows of a chunk attention takes at once:
// they read each K and V page once for all of them (kernels.Dots4F16).
const attnBlock = 4

// attnGroup is up to attnBlock consecutive rows of one chunk, from row.
type attnGroup struct{ row, n int }

// attnItem is one unit of attention work: heads [head, head+nh) of row group
// group. A group of several rows takes one head at a time; a single row (a
// decode step) takes up to attnBlock heads that share one KV head at once, so
// each K and V page is read once for all of them (attendHeads).
type attnItem struct{ group, head, nh int }

// attnJob is one layer's attention over the batch, shared by the pool's threads.
type attnJob struct {
	chunks        []*chunk
	views         []kvcache.View
	qd, hd, kvd   int
	group, window int
	scale         float32
}

// attnHead says where one head's keys and values are: its view, the offset of
// its K/V columns in each row (koff) and the row length (kvd), with the score
// scale and soft cap (0: none).
type attnHead struct {
	view           *kvcache.View
	koff, kvd      int
	scale, softCap float32
}

type attnScratch struct {
	ks     kernels.Set // the forward's kernel set
	q16    []uint16
	qf     []float32 // q16 as float32
	q16x4  []uint16  // attend4: 4 rows' queries
	qf4    []float32
	s4     [attnBlock][]float32 // attend4, attendHeads: each row's scores
	pad    [attnBlock][]float32 // attendHeads: outputs of the unused query slots
	scores []float32
	w16    []uint16  // softmax weights rounded to half
	qq     []byte    // attendQ: the query as Q8_0 blocks
	qq4    []byte    // attendQHeads: 4 queries as Q8_0 blocks
	sq     []float32 // attendQHeads: 4 rows of scores
	o4     []float32 // attendQHeads: 4 outputs
}

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
	fw.q = grow(fw.q, T*qd)
	fw.att = grow(fw.att, T*qd)
	fw.k = grow(fw.k, T*kvd)
	fw.v = grow(fw.v, T*kvd)
	fw.gate = grow(fw.gate, min(T, fw.ffnRows)*h.FFN)
	fw.up = grow(fw.up, min(T, fw.ffnRows)*h.FFN)
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
			kernels.RMSNorm(fw.logitRows[i*h.Embd:(i+1)*h.Embd], fw.x[row*h.Embd:(row+1)*h.Embd], fw.m.OutNorm, h.NormEps)
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
			kernels.RMSNorm(xn, x, L.AttnNorm, h.NormEps)
		case opQKV:
			fw.qkvRow(fw.rj.l, r)
		case opPostNorm:
			kernels.RMSNorm(t, t, fw.rj.norm, h.NormEps)
		case opAdd:
			kernels.Add(x, t)
		case opFFNNorm:
			kernels.RMSNorm(xn, x, L.FFNNorm, h.NormEps)
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
			kernels.RMSNorm(qh, qh, L.QNorm, h.NormEps)
		}
		rope(qh, cs, h.RopeNeox)
	}
	for i := 0; i < h.KVHeads; i++ {
		kh := k[i*hd : (i+1)*hd]
		if L.KNorm != nil {
			kernels.RMSNorm(kh, kh, L.KNorm, h.NormEps)
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

// attention computes causal attention for every (row, head) pair of block
// l. As in llama.cpp's default (non-flash) path, K and V are half precision,
// the query is rounded to half before Q·K, and the softmax weights are rounded
// to half before they weight V. A sliding-window layer reads only the last
// Window positions; every layer reads only through its sequence's view.
func (fw *forward) attention(l int, chunks []*chunk, views []kvcache.View, T int) {
	h := fw.m.Hyper
	qd, hd, kvd := h.QDim(), h.HeadDim, h.KVDim()
	group := h.Heads / h.KVHeads
	scale := 1 / float32(math.Sqrt(float64(hd)))
	if h.QueryScale != 0 {
		scale = 1 // Q was scaled before the product
	}
	window := 0
	if h.SWA != nil && h.SWA[l] {
		window = h.Window
	}
	fw.aj = attnJob{chunks: chunks, views: views, qd: qd, hd: hd, kvd: kvd,
		group: group, window: window, scale: scale}
	fw.pool.Run(len(fw.slot), fw.attnFn)
	fw.aj.chunks, fw.aj.views = nil, nil
}

// attendSlots computes the items of fw.items for scratch slots [lo,hi):
// slot s takes items s, s+nslot, ... A full group outside a sliding window
// goes through attend4, a single row's heads that share a KV head through
// attendHeads, every other row through attend. All compute each row exactly
// as attend alone would.
func (fw *forward) attendSlots(lo, hi int) {
	nslot := len(fw.slot)
	for s := lo; s < hi; s++ {
		sc := &fw.slot[s]
		for it := s; it < len(fw.items); it += nslot {
			fw.attendItem(sc, fw.items[it])
		}
	}
}

// attendItem computes one item of fw.items with the scratch sc.
func (fw *forward) attendItem(sc *attnScratch, it attnItem) {
	h, a := fw.m.Hyper, &fw.aj
	g := fw.groups[it.group]
	c := a.chunks[fw.rowChunk[g.row]]
	for i := range g.n {
		r := g.row + i
		clear(fw.att[r*a.qd+it.head*a.hd : r*a.qd+(it.head+it.nh)*a.hd])
	}
	if c.err != nil {
		return
	}
	ah := attnHead{view: &a.views[fw.rowChunk[g.row]], koff: it.head / a.group * a.hd, kvd: a.kvd,
		scale: a.scale, softCap: h.AttnSoftCap}
	if dt := ah.view.DType(); dt != kvcache.DTypeF16 {
		ah.koff, ah.kvd = it.head/a.group*dt.RowHalves(a.hd), ah.view.RowHalves()
		fw.attendQItem(sc, it, g, &ah)
		return
	}
	head := it.head
	var outs [attnBlock][]float32
	switch {
	case it.nh > 1:
		r, pos := g.row, fw.rowPos[g.row]
		for i := range attnBlock {
			// Unused slots repeat the last head and write to scratch.
			hi := head + min(i, it.nh-1)
			outs[i] = sc.pad[i]
			if i < it.nh {
				outs[i] = fw.att[r*a.qd+hi*a.hd : r*a.qd+(hi+1)*a.hd]
			}
			fw.halfQuery(sc.q16x4[i*a.hd:(i+1)*a.hd], sc.qf4[i*a.hd:(i+1)*a.hd], r, hi)
		}
		sc.attendHeads(&outs, it.nh, &ah, fw.windowStart(pos), pos+1)
	case g.n == attnBlock && a.window == 0:
		for i := range attnBlock {
			r := g.row + i
			outs[i] = fw.att[r*a.qd+head*a.hd : r*a.qd+(head+1)*a.hd]
			fw.halfQuery(sc.q16x4[i*a.hd:(i+1)*a.hd], sc.qf4[i*a.hd:(i+1)*a.hd], r, head)
		}
		sc.attend4(&outs, &ah, fw.rowPos[g.row])
	default:
		for i := range g.n {
			r := g.row + i
			pos := fw.rowPos[r]
			fw.halfQuery(sc.q16, sc.qf, r, head)
			sc.attend(fw.att[r*a.qd+head*a.hd:r*a.qd+(head+1)*a.hd], &ah, fw.windowStart(pos), pos+1)
		}
	}
}

// attendQItem computes an item over a quantized KV cache: a row's heads that
// share a KV head together (attendQHeads), every other row and head alone
// (attendQ). Queries are rotated and quantized, outputs rotated back, as
// llama.cpp's flash attention over such a cache (kvRot).
func (fw *forward) attendQItem(sc *attnScratch, it attnItem, g attnGroup, ah *attnHead) {
	a := &fw.aj
	qb := a.hd / 32 * 2 * kernels.Q8Halves // bytes of one quantized query
	if it.nh > 1 {
		r, pos := g.row, fw.rowPos[g.row]
		var outs [attnBlock][]float32
		for i := range attnBlock {
			hi := it.head + min(i, it.nh-1) // unused slots repeat the last head
			fw.quantQuery(sc.qq4[i*qb:(i+1)*qb], sc.qf, r, hi)
			outs[i] = fw.att[r*a.qd+hi*a.hd : r*a.qd+(hi+1)*a.hd]
		}
		sc.attendQHeads(&outs, it.nh, ah, fw.windowStart(pos), pos+1)
		for i := range it.nh {
			rotateRows(outs[i], fw.rot.v)
		}
		return
	}
	if g.n == attnBlock && a.window == 0 {
		var outs [attnBlock][]float32
		for i := range attnBlock {
			r := g.row + i
			fw.quantQuery(sc.qq4[i*qb:(i+1)*qb], sc.qf, r, it.head)
			outs[i] = fw.att[r*a.qd+it.head*a.hd : r*a.qd+(it.head+1)*a.hd]
		}
		sc.attendQRows(&outs, ah, fw.rowPos[g.row])
		for i := range attnBlock {
			rotateRows(outs[i], fw.rot.v)
		}
		return
	}
	for i := range g.n {
		r := g.row + i
		pos := fw.rowPos[r]
		fw.quantQuery(sc.qq, sc.qf, r, it.head)
		out := fw.att[r*a.qd+it.head*a.hd : r*a.qd+(it.head+1)*a.hd]
		sc.attendQ(out, ah, fw.windowStart(pos), pos+1)
		rotateRows(out, fw.rot.v)
	}
}

// quantQuery writes row r's query for head, rotated (kvRot), as Q8_0
// blocks into qq; qf is scratch of the head's size.
func (fw *forward) quantQuery(qq []byte, qf []float32, r, head int) {
	a := &fw.aj
	copy(qf, fw.q[r*a.qd+head*a.hd:r*a.qd+(head+1)*a.hd])
	rotateRows(qf, fw.rot.k)
	kernels.QuantizeQ8Row(qq, qf)
}

// halfQuery rounds row r's query for head to half into q16, and gives it
// back as float32 in qf.
func (fw *forward) halfQuery(q16 []uint16, qf []float32, r, head int) {
	a := &fw.aj
	fw.ks.F32ToF16s(q16, fw.q[r*a.qd+head*a.hd:r*a.qd+(head+1)*a.hd])
	fw.ks.F16ToF32s(qf, q16)
}

// windowStart is the first position a row at pos attends to: 0, or the start
// of its sliding window.
func (fw *forward) windowStart(pos int) int {
	if fw.aj.window > 0 {
		return max(0, pos-fw.aj.window+1)
	}
	return 0
}

// attend4 is attend for 4 consecutive rows at positions p0..p0+3 with no
// window: keys [0, p0] are shared and go through the 4-row kernels page by
// page; row i's last i keys, and every softmax, are its own. Each row's scores
// and value sums see the same operations in the same order as attend's.
func (sc *attnScratch) attend4(outs *[attnBlock][]float32, ah *attnHead, p0 int) {
	view, koff, kvd := ah.view, ah.koff, ah.kvd
	hd := len(outs[0])
	n0 := p0 + 1 // keys every row reads
	var sco [attnBlock][]float32
	for i := range attnBlock {
		if cap(sc.s4[i]) < n0+i {
			sc.s4[i] = make([]float32, n0+i, 2*(n0+i))
		}
		sco[i] = sc.s4[i][:n0+i]
	}
	last := n0 + attnBlock - 1
	var part [attnBlock][]float32
	for p, t := 0, 0; t < last; p++ {
		pl := view.PageLen(p)
		kp := view.KPage(p)
		if e := min(t+pl, n0); e > t {
			for i := range part {
				part[i] = sco[i][t:e]
			}
			sc.ks.Dots4F16(&part, sc.q16x4, sc.qf4, kp[koff:], kvd, ah.scale)
		}
		for i := 1; i < attnBlock; i++ {
			if a, b := max(t, n0), min(t+pl, n0+i); b > a {
				sc.ks.DotsF16(sco[i][a:b], sc.q16x4[i*hd:(i+1)*hd], sc.qf4[i*hd:(i+1)*hd], kp[(a-t)*kvd+koff:], kvd, ah.scale)
			}
		}
		t += pl
	}
	for i := range attnBlock {
		sc.weights(sco[i], ah.softCap)
	}
	for p, t := 0, 0; t < last; p++ {
		pl := view.PageLen(p)
		vp := view.VPage(p)
		if e := min(t+pl, n0); e > t {
			for i := range part {
				part[i] = sco[i][t:e]
			}
			sc.ks.Axpys4F16(outs, &part, vp[koff:], kvd)
		}
		for i := 1; i < attnBlock; i++ {
			if a, b := max(t, n0), min(t+pl, n0+i); b > a {
				sc.ks.AxpysF16(outs[i], sco[i][a:b], vp[(a-t)*kvd+koff:], kvd)
			}
		}
		t += pl
	}
}

// attendHeads is attend for the first nh of attnBlock queries of one row that
// read the same KV head over positions [t0, n) (the rest fill the kernels'
// slots and are discarded): each K and V page goes through the 4-row
// kernels once for all of them, and each query's scores, softmax and value
// sums see the same operations in the same order as attend's.
func (sc *attnScratch) attendHeads(outs *[attnBlock][]float32, nh int, ah *attnHead, t0, n int) {
	view, koff, kvd := ah.view, ah.koff, ah.kvd
	m := n - t0
	var sco, part [attnBlock][]float32
	for i := range attnBlock {
		if cap(sc.s4[i]) < m {
			sc.s4[i] = make([]float32, m, 2*m)
		}
		sco[i] = sc.s4[i][:m]
	}
	hd := len(outs[0])
	ps := view.PageSize()
	first := t0 / ps
	np := view.NumPages()
	for p := first; p < min(first+2, np); p++ {
		sc.prefetch(ah, view.KPage(p), hd)
	}
	for p, t := first, first*ps; t < n; p++ {
		pl := view.PageLen(p)
		switch {
		case p+2 < np:
			sc.prefetch(ah, view.KPage(p+2), hd)
		case p+2-np < 2 && first+p+2-np < np:
			sc.prefetch(ah, view.VPage(first+p+2-np), hd)
		}
		j0, j1 := max(0, t0-t), min(pl, n-t)
		for i := range part {
			part[i] = sco[i][t+j0-t0 : t+j1-t0]
		}
		sc.ks.Dots4F16(&part, sc.q16x4, sc.qf4, view.KPage(p)[j0*kvd+koff:], kvd, ah.scale)
		t += pl
	}
	for i := range nh {
		sc.weights(sco[i], ah.softCap)
	}
	for i := nh; i < attnBlock; i++ {
		clear(sco[i]) // unused slots: no weights, no sums
	}
	for p, t := first, first*ps; t < n; p++ {
		pl := view.PageLen(p)
		if p+2 < np {
			sc.prefetch(ah, view.VPage(p+2), hd)
		}
		j0, j1 := max(0, t0-t), min(pl, n-t)
		for i := range part {
			part[i] = sco[i][t+j0-t0 : t+j1-t0]
		}
		sc.ks.Axpys4F16(outs, &part, view.VPage(p)[j0*kvd+koff:], kvd)
		t += pl
	}
}

// prefetchQ is prefetch for a quantized page: width halves of each row.
func (sc *attnScratch) prefetchQ(ah *attnHead, page []uint16, width int) {
	sc.ks.PrefetchRows(page[ah.koff:], ah.kvd, len(page)/ah.kvd, width)
}

// prefetch asks for the head's hd columns of every row of a K or V page to
// be brought into cache while the page before it is worked on. Decode steps
// of many sequences read more KV than the caches hold, and the hardware does
// not foresee the jump from page to page nor a head's slice of each row.
func (sc *attnScratch) prefetch(ah *attnHead, page []uint16, hd int) {
	sc.ks.PrefetchRows(page[ah.koff:], ah.kvd, len(page)/ah.kvd, hd)
}

// weights turns scores into attention weights in place: the soft cap (0:
// none), the softmax, and, as llama.cpp does, rounding to half before they
// weight V.
func (sc *attnScratch) weights(scores []float32, softCap float32) {
	sc.softmax(scores, softCap)
	if cap(sc.w16) < len(scores) {
		sc.w16 = make([]uint16, len(scores), 2*len(scores))
	}
	w16 := sc.w16[:len(scores)]
	sc.ks.F32ToF16s(w16, scores)
	sc.ks.F16ToF32s(scores, w16)
}

// kvRot is how llama.cpp rotates attention's inputs before a quantized KV
// cache stores them (its attn_rot_k and attn_rot_v, on by default): K and
// the query by the Walsh-Hadamard matrix of the largest power of two
// dividing the head size, V by that of 64 and the attention output back by
// the same (kernels.FWHT), for heads whose size is a multiple of 64. The
// rotations leave every product unchanged but spread a head's outliers over
// its blocks, so quantizing loses less. 0: no rotation.
type kvRot struct{ k, v int }

func kvRotation(dt kvcache.DType, hd int) kvRot {
	if dt == kvcache.DTypeF16 || dt == "" || hd%64 != 0 {
		return kvRot{}
	}
	k := 64
	for hd%(2*k) == 0 {
		k *= 2
	}
	return kvRot{k: k, v: 64}
}

// rotateRows applies kernels.FWHT to each n-value piece of x (n 0: none).
func rotateRows(x []float32, n int) {
	if n == 0 {
		return
	}
	for i := 0; i < len(x); i += n {
		kernels.FWHT(x[i : i+n])
	}
}

// softmax turns scores into attention weights in place: the soft cap (0:
// none), then the softmax.
func (sc *attnScratch) softmax(scores []float32, softCap float32) {
	if softCap != 0 {
		kernels.SoftCap(scores, softCap)
	}
	sc.ks.Softmax(scores)
}

// attendQ is attend over a Q8_0 or Q4_0 KV cache, computed as llama.cpp's
// flash attention computes it over one: the query quantized to Q8_0 (sc.qq)
// and dotted with each key's blocks, the weights kept in float32, each value
// row's blocks scaled into the sums.
func (sc *attnScratch) attendQ(out []float32, ah *attnHead, t0, n int) {
	view, koff, stride := ah.view, ah.koff, ah.kvd
	q8 := view.DType() == kvcache.DTypeQ8_0
	m := n - t0
	if cap(sc.scores) < m {
		sc.scores = make([]float32, m, m+m/2)
	}
	scores := sc.scores[:m]
	for p, t := t0/view.PageSize(), t0/view.PageSize()*view.PageSize(); t < n; p++ {
		pl := view.PageLen(p)
		j0, j1 := max(0, t0-t), min(pl, n-t)
		kp := view.KPage(p)[j0*stride+koff:]
		if q8 {
			sc.ks.DotsQ8(scores[t+j0-t0:t+j1-t0], sc.qq, kp, stride, ah.scale)
		} else {
			sc.ks.DotsQ4(scores[t+j0-t0:t+j1-t0], sc.qq, kp, stride, ah.scale)
		}
		t += pl
	}
	sc.softmax(scores, ah.softCap)
	for p, t := t0/view.PageSize(), t0/view.PageSize()*view.PageSize(); t < n; p++ {
		pl := view.PageLen(p)
		j0, j1 := max(0, t0-t), min(pl, n-t)
		vp := view.VPage(p)[j0*stride+koff:]
		if q8 {
			sc.ks.AxpysQ8(out, scores[t+j0-t0:t+j1-t0], vp, stride)
		} else {
			sc.ks.AxpysQ4(out, scores[t+j0-t0:t+j1-t0], vp, stride)
		}
		t += pl
	}
}

// attendQHeads is attendQ for the first nh of attnBlock queries of one row
// (sc.qq4) that read the same KV head over positions [t0, n), the rest
// filling the kernels' slots and discarded: each K and V page goes through
// the four-query kernels once for all of them, and each query's result is
// bitwise attendQ's.
func (sc *attnScratch) attendQHeads(outs *[attnBlock][]float32, nh int, ah *attnHead, t0, n int) {
	view, koff, stride := ah.view, ah.koff, ah.kvd
	q8 := view.DType() == kvcache.DTypeQ8_0
	m := n - t0
	if cap(sc.sq) < attnBlock*m {
		sc.sq = make([]float32, attnBlock*m, 2*attnBlock*m)
	}
	sq := sc.sq[:attnBlock*m]
	ps := view.PageSize()
	first, np := t0/ps, view.NumPages()
	width := view.DType().RowHalves(len(outs[0]))
	for p := first; p < min(first+2, np); p++ {
		sc.prefetchQ(ah, view.KPage(p), width)
	}
	for p, t := first, first*ps; t < n; p++ {
		pl := view.PageLen(p)
		// As attendHeads: the page after next is asked for ahead, K pages
		// while scoring, then the first V pages for the value sums.
		switch {
		case p+2 < np:
			sc.prefetchQ(ah, view.KPage(p+2), width)
		case p+2-np < 2 && first+p+2-np < np:
			sc.prefetchQ(ah, view.VPage(first+p+2-np), width)
		}
		j0, j1 := max(0, t0-t), min(pl, n-t)
		kp := view.KPage(p)[j0*stride+koff:]
		if q8 {
			sc.ks.Dots4Q8(sq[t+j0-t0:], m, j1-j0, sc.qq4, kp, stride, ah.scale)
		} else {
			sc.ks.Dots4Q4(sq[t+j0-t0:], m, j1-j0, sc.qq4, kp, stride, ah.scale)
		}
		t += pl
	}
	for i := range attnBlock {
		if i < nh {
			sc.softmax(sq[i*m:(i+1)*m], ah.softCap)
		} else {
			clear(sq[i*m : (i+1)*m]) // unused slots: no weights
		}
	}
	hd := len(outs[0])
	o4 := sc.o4[:attnBlock*hd]
	clear(o4)
	for p, t := first, first*ps; t < n; p++ {
		pl := view.PageLen(p)
		if p+2 < np {
			sc.prefetchQ(ah, view.VPage(p+2), width)
		}
		j0, j1 := max(0, t0-t), min(pl, n-t)
		vp := view.VPage(p)[j0*stride+koff:]
		if q8 {
			sc.ks.Axpys4Q8(o4, sq[t+j0-t0:], m, j1-j0, vp, stride)
		} else {
			sc.ks.Axpys4Q4(o4, sq[t+j0-t0:], m, j1-j0, vp, stride)
		}
		t += pl
	}
	for i := range nh {
		copy(outs[i], o4[i*hd:(i+1)*hd])
	}
}

// attendQRows is attendQ for 4 consecutive rows of one head at positions
// p0..p0+3 with no window (sc.qq4 holds their queries): keys [0, p0] are
// shared and go through the four-query kernels page by page, row i's last i
// keys through the one-query ones; each row's result is bitwise attendQ's.
func (sc *attnScratch) attendQRows(outs *[attnBlock][]float32, ah *attnHead, p0 int) {
	view, koff, stride := ah.view, ah.koff, ah.kvd
	q8 := view.DType() == kvcache.DTypeQ8_0
	n0 := p0 + 1 // keys every row reads
	m := n0 + attnBlock - 1
	if cap(sc.sq) < attnBlock*m {
		sc.sq = make([]float32, attnBlock*m, 2*attnBlock*m)
	}
	sq := sc.sq[:attnBlock*m]
	nb := len(sc.qq4) / attnBlock
	last := n0 + attnBlock - 1
	for p, t := 0, 0; t < last; p++ {
		pl := view.PageLen(p)
		kp := view.KPage(p)
		if e := min(t+pl, n0); e > t {
			if q8 {
				sc.ks.Dots4Q8(sq[t:], m, e-t, sc.qq4, kp[koff:], stride, ah.scale)
			} else {
				sc.ks.Dots4Q4(sq[t:], m, e-t, sc.qq4, kp[koff:], stride, ah.scale)
			}
		}
		for i := 1; i < attnBlock; i++ {
			if a, b := max(t, n0), min(t+pl, n0+i); b > a {
				qi, ki := sc.qq4[i*nb:(i+1)*nb], kp[(a-t)*stride+koff:]
				if q8 {
					sc.ks.DotsQ8(sq[i*m+a:i*m+b], qi, ki, stride, ah.scale)
				} else {
					sc.ks.DotsQ4(sq[i*m+a:i*m+b], qi, ki, stride, ah.scale)
				}
			}
		}
		t += pl
	}
	for i := range attnBlock {
		sc.softmax(sq[i*m:i*m+n0+i], ah.softCap)
	}
	hd := len(outs[0])
	o4 := sc.o4[:attnBlock*hd]
	clear(o4)
	for p, t := 0, 0; t < last; p++ {
		pl := view.PageLen(p)
		vp := view.VPage(p)
		if e := min(t+pl, n0); e > t {
			if q8 {
				sc.ks.Axpys4Q8(o4, sq[t:], m, e-t, vp[koff:], stride)
			} else {
				sc.ks.Axpys4Q4(o4, sq[t:], m, e-t, vp[koff:], stride)
			}
		}
		for i := 1; i < attnBlock; i++ {
			if a, b := max(t, n0), min(t+pl, n0+i); b > a {
				oi, vi := o4[i*hd:(i+1)*hd], vp[(a-t)*stride+koff:]
				if q8 {
					sc.ks.AxpysQ8(oi, sq[i*m+a:i*m+b], vi, stride)
				} else {
					sc.ks.AxpysQ4(oi, sq[i*m+a:i*m+b], vi, stride)
				}
			}
		}
		t += pl
	}
	for i := range attnBlock {
		copy(outs[i], o4[i*hd:(i+1)*hd])
	}
}

// attend computes one head's attention output into out over view positions
// [t0, n).
func (sc *attnScratch) attend(out []float32, ah *attnHead, t0, n int) {
	view, koff, kvd := ah.view, ah.koff, ah.kvd
	m := n - t0
	if cap(sc.scores) < m {
		sc.scores = make([]float32, m, m+m/2)
	}
	scores := sc.scores[:m]
	// Walk the view page by page: rows of a page are contiguous.
	for p, t := 0, 0; t < n; p++ {
		pl := view.PageLen(p)
		if t+pl <= t0 {
			t += pl
			continue
		}
		// Keys [j0, j1) of this page are positions t+j0 .. t+j1-1.
		j0, j1 := max(0, t0-t), min(pl, n-t)
		kp := view.KPage(p)
		sc.ks.DotsF16(scores[t+j0-t0:t+j1-t0], sc.q16, sc.qf, kp[j0*kvd+koff:], kvd, ah.scale)
		t += pl
	}
	sc.weights(scores, ah.softCap)
	for p, t := 0, 0; t < n; p++ {
		pl := view.PageLen(p)
		if t+pl <= t0 {
			t += pl
			continue
		}
		j0, j1 := max(0, t0-t), min(pl, n-t)
		vp := view.VPage(p)
		sc.ks.AxpysF16(out, scores[t+j0-t0:t+j1-t0], vp[j0*kvd+koff:], kvd)
		t += pl
	}
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

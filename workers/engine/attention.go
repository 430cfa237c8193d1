package engine

import (
	"math"

	"github.com/bulkhead-ai/bulkhead/workers/kernels"
	"github.com/bulkhead-ai/bulkhead/workers/kvcache"
)

// Attention: each row's query against its sequence's keys and values in the
// paged KV cache, over the pool's threads.

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

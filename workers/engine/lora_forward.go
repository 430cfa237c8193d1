package engine

import (
	"github.com/bulkhead-ai/bulkhead/models/gguf"
	"github.com/bulkhead-ai/bulkhead/workers/kernels"
)

// loraStep is a forward step's adapters: the distinct adapters among its
// chunks, and each row's (an index into adapters, -1 for none).
type loraStep struct {
	adapters []*Adapter
	row      []int
	rows     [][]int      // addLoRA: the rows under each adapter
	items    []loraItem   // addLoRA: its units of work
	mats     []loraMatRef // addLoRA: each adapter's matrices, adapter after adapter
	t        []float32    // addLoRA: A·x for every (matrix, row)
	xh, xb   []float32    // addLoRA: x rounded to F16 and to BF16, when a matrix wants them
	job      loraJob
	fn       func(lo, hi int) // runs job's items [lo, hi), bound once
}

// loraBlock is the output columns one unit of B·t work updates.
const loraBlock = 512

// loraItem is one unit of an addLoRA phase, for every row under adapter
// ai: rank rows [j0, j1) of matrix m's A·x (phase A; t is where its rows'
// A·x start in loraStep.t), or output columns [j0, j1) of scale·B·t for
// each of the adapter's nm matrices from loraStep.mats[t] in turn (phase B:
// stacked adapters add into the same outputs, so one item takes them all,
// in order).
type loraItem struct {
	m      *loraMat
	ai, t  int
	j0, j1 int
	nm     int
}

// loraMatRef is one matrix of a step's adapter ai and where its rows' A·x
// start in loraStep.t.
type loraMatRef struct {
	m     *loraMat
	ai, t int
}

// loraJob is the addLoRA phase in progress.
type loraJob struct {
	ks     kernels.Set
	out, x []float32
	xh, xb []float32 // x rounded to F16, BF16 (roundRows)
	phaseB bool
	rows   [][]int
	items  []loraItem
	mats   []loraMatRef
	t      []float32
}

// plan lists the step's adapters and each row's.
func (ls *loraStep) plan(chunks []*chunk, T int) {
	ls.adapters = ls.adapters[:0]
	if cap(ls.row) < T {
		ls.row = make([]int, T)
	}
	ls.row = ls.row[:T]
	r := 0
	for _, c := range chunks {
		ai := -1
		if c.adapter != nil {
			for i, a := range ls.adapters {
				if a == c.adapter {
					ai = i
				}
			}
			if ai < 0 {
				ai = len(ls.adapters)
				ls.adapters = append(ls.adapters, c.adapter)
			}
		}
		for range c.tokens {
			ls.row[r] = ai
			r++
		}
	}
}

// on reports whether any row of the step runs under an adapter.
func (ls *loraStep) on() bool { return len(ls.adapters) > 0 }

// addLoRA adds every adapter's update of projection slot of layer l to out,
// for rows r0..r0+n-1 of the step (out and x hold those n rows, x the
// projection's input), in two passes over the pool whatever the number of
// adapters: A·x for each adapter's rows, then scale·B·(A·x) added to them.
// Each adapter's matrices are read once per step, the rows under it taken
// together; the base projection was computed once for all rows. Every
// row's update is computed by the same operations whatever the batch (a
// dot product per rank row and per output, in DotF32's order), so a
// sequence gets the same tokens alone or in any mix.
func (fw *forward) addLoRA(slot loraSlot, l int, out, x []float32, r0, n int) {
	ls := &fw.lora
	if !ls.on() {
		return
	}
	for len(ls.rows) < len(ls.adapters) {
		ls.rows = append(ls.rows, nil)
	}
	for ai := range ls.adapters {
		ls.rows[ai] = ls.rows[ai][:0]
	}
	for i := range n {
		if ai := ls.row[r0+i]; ai >= 0 {
			ls.rows[ai] = append(ls.rows[ai], i)
		}
	}
	// Phase A's items, and where each matrix's A·x goes.
	ls.items, ls.mats = ls.items[:0], ls.mats[:0]
	nt := 0
	for ai, a := range ls.adapters {
		k := len(ls.rows[ai])
		if k == 0 {
			continue
		}
		for _, m := range a.layers[l][slot] {
			for j := 0; j < m.rank; j += 4 {
				ls.items = append(ls.items, loraItem{m: m, ai: ai, t: nt, j0: j, j1: min(j+4, m.rank)})
			}
			ls.mats = append(ls.mats, loraMatRef{m: m, ai: ai, t: nt})
			nt += k * m.rank
		}
	}
	if len(ls.items) == 0 {
		return
	}
	ls.t = grow(ls.t, nt)
	ls.job = loraJob{ks: fw.ks, out: out, x: x, rows: ls.rows, items: ls.items, mats: ls.mats, t: ls.t}
	ls.roundInputs(x, n)
	fw.pool.Run(len(ls.items), ls.fn)
	ls.roundT()
	// Phase B: each adapter's matrices together, by blocks of output columns.
	na := len(ls.items)
	for i := 0; i < len(ls.mats); {
		ai, cols := ls.mats[i].ai, ls.mats[i].m.out
		nm := 1
		for i+nm < len(ls.mats) && ls.mats[i+nm].ai == ai {
			nm++
		}
		for c := 0; c < cols; c += loraBlock {
			ls.items = append(ls.items, loraItem{ai: ai, t: i, nm: nm, j0: c, j1: min(c+loraBlock, cols)})
		}
		i += nm
	}
	ls.job.items, ls.job.phaseB = ls.items[na:], true
	fw.pool.Run(len(ls.job.items), ls.fn)
	ls.job = loraJob{}
}

// run computes items [lo, hi) of the job's phase.
func (j *loraJob) run(lo, hi int) {
	var u [loraBlock]float32
	for _, it := range j.items[lo:hi] {
		m, rows := it.m, j.rows[it.ai]
		if !j.phaseB {
			x := j.x
			switch m.xType {
			case gguf.TypeF16:
				x = j.xh
			case gguf.TypeBF16:
				x = j.xb
			}
			for r, i := range rows {
				xi := x[i*m.in : (i+1)*m.in]
				t := j.t[it.t+r*m.rank:]
				for jj := it.j0; jj < it.j1; jj++ {
					t[jj] = j.ks.DotF32(m.a[jj*m.in:(jj+1)*m.in], xi)
				}
			}
			continue
		}
		w := it.j1 - it.j0
		for _, mr := range j.mats[it.t : it.t+it.nm] {
			m := mr.m
			for r, i := range rows {
				t := j.t[mr.t+r*m.rank : mr.t+(r+1)*m.rank]
				ub := u[:w]
				j.ks.DotsT(ub, m.bt[it.j0:], m.out, t)
				j.ks.Scale(ub, m.scale)
				j.ks.Add(j.out[i*m.out+it.j0:i*m.out+it.j1], ub)
			}
		}
	}
}

// roundInputs rounds the step's inputs to F16 or BF16 for the matrices of
// phase A that were stored so (llama.cpp converts a product's input to its
// half-precision weights' type).
func (ls *loraStep) roundInputs(x []float32, n int) {
	var half, brain bool
	for _, it := range ls.items {
		half = half || it.m.xType == gguf.TypeF16
		brain = brain || it.m.xType == gguf.TypeBF16
	}
	if half {
		ls.xh = roundRows(ls.xh, x, n*ls.items[0].m.in, gguf.TypeF16)
		ls.job.xh = ls.xh
	}
	if brain {
		ls.xb = roundRows(ls.xb, x, n*ls.items[0].m.in, gguf.TypeBF16)
		ls.job.xb = ls.xb
	}
}

// roundT rounds each A·x to B's type where B was stored as F16 or BF16.
func (ls *loraStep) roundT() {
	for _, it := range ls.items {
		if it.j0 != 0 || (it.m.tType != gguf.TypeF16 && it.m.tType != gguf.TypeBF16) {
			continue
		}
		t := ls.t[it.t : it.t+len(ls.rows[it.ai])*it.m.rank]
		for i, v := range t {
			if it.m.tType == gguf.TypeF16 {
				t[i] = gguf.F16ToF32(gguf.F32ToF16(v))
			} else {
				t[i] = gguf.BF16ToF32(gguf.F32ToBF16(v))
			}
		}
	}
}

// roundRows returns x[:n] rounded to typ (F16 or BF16), in buf's storage.
func roundRows(buf, x []float32, n int, typ gguf.Type) []float32 {
	buf = grow(buf, n)
	for i, v := range x[:n] {
		if typ == gguf.TypeF16 {
			buf[i] = gguf.F16ToF32(gguf.F32ToF16(v))
		} else {
			buf[i] = gguf.BF16ToF32(gguf.F32ToBF16(v))
		}
	}
	return buf
}

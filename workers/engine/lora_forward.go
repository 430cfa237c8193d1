package engine

// loraStep is a forward step's adapters: the distinct adapters among its
// chunks, and each row's (an index into adapters, -1 for none).
type loraStep struct {
	adapters []*Adapter
	row      []int
	x, t, u  []float32 // an adapter's rows gathered, A·x, B·(A·x)
	rows     []int     // the step's rows under the adapter at hand
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

// addLoRA adds each adapter's update of projection slot of layer l to out,
// for rows r0..r0+n-1 of the step (out and x hold those n rows, x the
// projection's input). The rows of one adapter are gathered and multiplied
// together, whichever chunks they come from: one pass over each adapter's
// matrices per step, the base projection's already shared by every row.
// Each row's update is computed by the same operations whatever the batch,
// as MatMul's are: a sequence gets the same tokens alone or in any mix.
func (fw *forward) addLoRA(slot loraSlot, l int, out, x []float32, r0, n int) {
	ls := &fw.lora
	for ai, a := range ls.adapters {
		for _, m := range a.layers[l][slot] {
			fw.addUpdate(m, ai, out, x, r0, n)
		}
	}
}

// addUpdate adds one adapter matrix pair's update to the rows under adapter
// ai (see addLoRA).
func (fw *forward) addUpdate(m *loraMat, ai int, out, x []float32, r0, n int) {
	ls := &fw.lora
	in, od, rank := m.a.Cols, m.b.Rows, m.a.Rows
	ls.rows = ls.rows[:0]
	for i := range n {
		if ls.row[r0+i] == ai {
			ls.rows = append(ls.rows, i)
		}
	}
	k := len(ls.rows)
	if k == 0 {
		return
	}
	src := x
	if k < n {
		ls.x = grow(ls.x, k*in)
		for j, i := range ls.rows {
			copy(ls.x[j*in:(j+1)*in], x[i*in:(i+1)*in])
		}
		src = ls.x
	}
	ls.t = grow(ls.t, k*rank)
	ls.u = grow(ls.u, k*od)
	fw.pool.MatMul(ls.t, m.a, src, k)
	fw.pool.MatMul(ls.u, m.b, ls.t, k)
	for j, i := range ls.rows {
		u := ls.u[j*od : (j+1)*od]
		fw.ks.Scale(u, m.scale)
		fw.ks.Add(out[i*od:(i+1)*od], u)
	}
}

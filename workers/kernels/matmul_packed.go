package kernels

import (
	"unsafe"

	"github.com/bulkhead-ai/bulkhead/models/gguf"
)

// MatMul over packed weights (repack.go): row groups of a packed matrix
// against every activation row, the group's weights kept in cache.

// groups computes the outputs of packed row groups [lo,hi) for every
// activation row: 4 activation rows per call while they last, then one at a
// time. Each group's weights stay in cache across the activation rows.
func (j *matJob) groups(lo, hi int) {
	if j.m.Type.BlockSize() == 256 {
		j.groupsK(lo, hi)
		return
	}
	c, rows := j.m.Cols, j.m.Rows
	nb := c / 32
	gs := nb * packBlock(j.m.Type)
	typ := j.m.Type
	for g := lo; g < hi; g++ {
		w := &j.m.pack[g*gs]
		i := g * packRows
		r := 0
		if j.tiled() {
			j.tiles(w, i)
			continue
		}
		if j.p == pathAVX2 || avx2Packed(typ) {
			j.group2(w, i, j.nextGroup(w, g, hi, gs, 0))
			continue
		}
		for ; r+4 <= j.n; r += 4 {
			x, a, o := &j.xq[r*j.xqs], &j.xa[r*nb], &j.out[r*rows+i]
			pn := j.nextGroup(w, g, hi, gs, r)
			switch typ {
			case gguf.TypeQ8_0:
				gemmQ8P4(w, nb, x, uintptr(j.xqs), a, uintptr(nb*8), o, uintptr(rows*4), pn)
			case gguf.TypeQ4_0:
				gemmQ4P4(w, nb, x, uintptr(j.xqs), a, uintptr(nb*8), o, uintptr(rows*4), pn)
			case gguf.TypeIQ4_NL:
				gemmIQ4NLP4(w, nb, x, uintptr(j.xqs), a, uintptr(nb*8), o, uintptr(rows*4), pn)
			default:
				gemmQ5P4(w, nb, x, uintptr(j.xqs), a, uintptr(nb*8), o, uintptr(rows*4), pn)
			}
		}
		for ; r < j.n; r++ {
			x, a, o := &j.xq[r*j.xqs], &j.xa[r*nb], &j.out[r*rows+i]
			switch typ {
			case gguf.TypeQ8_0:
				gemmQ8P1(w, nb, x, a, o)
			case gguf.TypeQ4_0:
				gemmQ4P1(w, nb, x, a, o)
			case gguf.TypeIQ4_NL:
				gemmIQ4NLP1(w, nb, x, a, o)
			default:
				gemmQ5P1(w, nb, x, a, o)
			}
		}
	}
}

// nextGroup is what the 4-row kernel for activation rows r.. over group g
// (at w, gs bytes) prefetches as it goes (prefetch_amd64.h): the first pass
// the next group, later passes and the thread's last group their own weights.
func (j *matJob) nextGroup(w *byte, g, hi, gs, r int) *byte {
	if r == 0 && g+1 < hi {
		return &j.m.pack[(g+1)*gs]
	}
	return w
}

// groupsK is groups for the packed K-quant types.
func (j *matJob) groupsK(lo, hi int) {
	rows := j.m.Rows
	nb := j.m.Cols / 256
	gs := nb * packBlock(j.m.Type)
	typ := j.m.Type
	xs, as := uintptr(nb)*unsafe.Sizeof(q8K{}), uintptr(nb)*unsafe.Sizeof(q8KAux{})
	for g := lo; g < hi; g++ {
		w := &j.m.pack[g*gs]
		i := g * packRows
		r := 0
		if j.tiled() {
			j.tiles(w, i)
			continue
		}
		if j.p == pathAVX2 || avx2Packed(typ) {
			j.groupK2(w, i, j.nextGroup(w, g, hi, gs, 0))
			continue
		}
		for ; r+4 <= j.n; r += 4 {
			x, a, o := &j.xk[r*nb], &j.xka[r*nb], &j.out[r*rows+i]
			pn := j.nextGroup(w, g, hi, gs, r)
			switch typ {
			case gguf.TypeQ4_K:
				gemmQ4KP4(w, nb, x, xs, a, as, o, uintptr(rows*4), pn)
			case gguf.TypeIQ4_XS:
				gemmIQ4XSP4(w, nb, x, xs, a, as, o, uintptr(rows*4), pn)
			default:
				gemmQ6KP4(w, nb, x, xs, a, as, o, uintptr(rows*4), pn)
			}
		}
		for ; r < j.n; r++ {
			x, a, o := &j.xk[r*nb], &j.xka[r*nb], &j.out[r*rows+i]
			switch typ {
			case gguf.TypeQ4_K:
				gemmQ4KP1(w, nb, x, a, o)
			case gguf.TypeIQ4_XS:
				gemmIQ4XSP1(w, nb, x, a, o)
			default:
				gemmQ6KP1(w, nb, x, a, o)
			}
		}
	}
}

// group2 is groups' work on one group of a 32-element block type on the AVX2
// path (and Q4_1's and Q5_1's on the AVX-512 path, whose 4 activation rows
// take the AVX-512 kernels gemmQ41P4/gemmQ51P4), shaped as groupK2.
func (j *matJob) group2(w *byte, i int, next *byte) {
	rows := j.m.Rows
	nb := j.m.Cols / 32
	typ := j.m.Type
	legacy := typ == gguf.TypeQ4_1 || typ == gguf.TypeQ5_1 // Q8_1 activations, their side data q81Aux
	var a *q8Aux
	r := 0
	for ; r+4 <= j.n; r += 4 {
		x := &j.xq[r*j.xqs]
		if legacy && j.p >= pathAVX512 { // whole-group VPDPBUSD kernels
			o, pn := &j.out[r*rows+i], w
			if r == 0 {
				pn = next
			}
			m := &j.xm[r*nb]
			if typ == gguf.TypeQ4_1 {
				gemmQ41P4(w, nb, x, uintptr(j.xqs), m, uintptr(nb*8), o, uintptr(rows*4), pn)
			} else {
				gemmQ51P4(w, nb, x, uintptr(j.xqs), m, uintptr(nb*8), o, uintptr(rows*4), pn)
			}
			continue
		}
		if !legacy {
			a = &j.xa[r*nb]
		}
		for h := range 2 {
			o, pn := &j.out[r*rows+i+8*h], w
			if r == 0 && h == 0 {
				pn = next // both halves read every line of the group
			}
			switch typ {
			case gguf.TypeQ8_0:
				gemmQ8A4(w, h, nb, x, uintptr(j.xqs), a, uintptr(nb*8), o, uintptr(rows*4), pn)
			case gguf.TypeQ4_0:
				gemmQ4A4(w, h, nb, x, uintptr(j.xqs), a, uintptr(nb*8), o, uintptr(rows*4), pn)
			case gguf.TypeIQ4_NL:
				gemmIQ4NLA4(w, h, nb, x, uintptr(j.xqs), a, uintptr(nb*8), o, uintptr(rows*4), pn)
			case gguf.TypeQ4_1:
				gemmQ41A4(w, h, nb, x, uintptr(j.xqs), &j.xm[r*nb], uintptr(nb*8), o, uintptr(rows*4), pn)
			case gguf.TypeQ5_1:
				gemmQ51A4(w, h, nb, x, uintptr(j.xqs), &j.xm[r*nb], uintptr(nb*8), o, uintptr(rows*4), pn)
			default:
				gemmQ5A4(w, h, nb, x, uintptr(j.xqs), a, uintptr(nb*8), o, uintptr(rows*4), pn)
			}
		}
	}
	for ; r < j.n; r++ {
		x, o := &j.xq[r*j.xqs], &j.out[r*rows+i]
		if !legacy {
			a = &j.xa[r*nb]
		}
		switch typ {
		case gguf.TypeQ8_0:
			gemmQ8A1(w, nb, x, a, o)
		case gguf.TypeQ4_0:
			gemmQ4A1(w, nb, x, a, o)
		case gguf.TypeIQ4_NL:
			gemmIQ4NLA1(w, nb, x, a, o)
		case gguf.TypeQ4_1:
			gemmQ41A1(w, nb, x, o)
		case gguf.TypeQ5_1:
			gemmQ51A1(w, nb, x, o)
		default:
			gemmQ5A1(w, nb, x, a, o)
		}
	}
}

// groupKW runs the AVX-512 whole-group kernel of Q2_K on activation rows
// r..r+3 of group i.
func (j *matJob) groupKW(w *byte, r, i int, next *byte) {
	rows := j.m.Rows
	nb := j.m.Cols / 256
	xs, as := uintptr(nb)*unsafe.Sizeof(q8K{}), uintptr(nb)*unsafe.Sizeof(q8KAux{})
	x, a, o, pn := &j.xk[r*nb], &j.xka[r*nb], &j.out[r*rows+i], w
	if r == 0 {
		pn = next
	}
	gemmQ2KP4(w, nb, x, xs, a, as, o, uintptr(rows*4), pn)
}

// groupK2 is groupsK's work on one group on the AVX2 path (and that of the
// types avx2Packed names on the AVX-512 path): each half of the group (8
// rows) against 4 activation rows per call while they last, then the whole
// group against one activation row at a time (on the AVX-512 path Q2_K's 4
// rows take a whole-group kernel, groupKW, and its one its own).
func (j *matJob) groupK2(w *byte, i int, next *byte) {
	rows := j.m.Rows
	nb := j.m.Cols / 256
	typ := j.m.Type
	xs, as := uintptr(nb)*unsafe.Sizeof(q8K{}), uintptr(nb)*unsafe.Sizeof(q8KAux{})
	r := 0
	if j.p >= pathAVX512 && typ == gguf.TypeQ2_K {
		for ; r+4 <= j.n; r += 4 {
			j.groupKW(w, r, i, next)
		}
	}
	for ; r+4 <= j.n; r += 4 {
		x, a := &j.xk[r*nb], &j.xka[r*nb]
		for h := range 2 {
			o, pn := &j.out[r*rows+i+8*h], w
			if r == 0 && h == 0 {
				pn = next // both halves read every line of the group
			}
			switch typ {
			case gguf.TypeQ4_K:
				gemmQ4KA4(w, h, nb, x, xs, a, as, o, uintptr(rows*4), pn)
			case gguf.TypeQ6_K:
				gemmQ6KA4(w, h, nb, x, xs, a, as, o, uintptr(rows*4), pn)
			case gguf.TypeQ2_K:
				gemmQ2KA4(w, h, nb, x, xs, a, as, o, uintptr(rows*4), pn)
			case gguf.TypeQ5_K:
				gemmQ5KA4(w, h, nb, x, xs, a, as, o, uintptr(rows*4), pn)
			case gguf.TypeQ3_K:
				gemmQ3KA4(w, h, nb, x, xs, a, as, o, uintptr(rows*4), pn)
			default:
				gemmIQ4XSA4(w, h, nb, x, xs, a, as, o, uintptr(rows*4), pn)
			}
		}
	}
	for ; r < j.n; r++ {
		x, a, o := &j.xk[r*nb], &j.xka[r*nb], &j.out[r*rows+i]
		switch typ {
		case gguf.TypeQ4_K:
			gemmQ4KA1(w, nb, x, a, o)
		case gguf.TypeQ6_K:
			gemmQ6KA1(w, nb, x, a, o)
		case gguf.TypeQ2_K:
			if j.p >= pathAVX512 {
				gemmQ2KP1(w, nb, x, a, o)
			} else {
				gemmQ2KA1(w, nb, x, a, o)
			}
		case gguf.TypeQ5_K:
			gemmQ5KA1(w, nb, x, a, o)
		case gguf.TypeQ3_K:
			gemmQ3KA1(w, nb, x, a, o)
		default:
			gemmIQ4XSA1(w, nb, x, a, o)
		}
	}
}

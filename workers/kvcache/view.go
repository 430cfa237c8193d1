package kvcache

import "fmt"

// View is one layer of a sequence's written KV, positions [0, Len()), checked
// once by Sequence.View. Its accessors do no ownership checks and do not
// allocate; they panic, like slice indexing, on a position or page index out
// of range, and on use after the sequence was freed. The slices they return
// alias the cache: read them, never write them or keep them past Free.
type View struct {
	k, v      []uint16 // the layer's whole K and V storage
	pages     []int32  // page ids covering [0, n)
	n         int
	row       int   // halves per stored row
	dtype     DType // what the halves hold
	pageShift uint
	seq       *Sequence
}

// Len is the number of positions in the view.
func (w *View) Len() int { return w.n }

// DType is the element type of the view's rows.
func (w *View) DType() DType { return w.dtype }

// RowHalves is the length of each row K, V, KPage and VPage return, in
// halves: KVHeads*HeadDim for F16; for a quantized type the heads' blocks,
// head-major (head h starts at h*DType.RowHalves(HeadDim)).
func (w *View) RowHalves() int { return w.row }

// K returns position pos's K row: RowHalves halves, head-major.
func (w *View) K(pos int) []uint16 {
	off := w.rowOffset(pos)
	return w.k[off : off+w.row : off+w.row]
}

// V returns position pos's V row, laid out as K's.
func (w *View) V(pos int) []uint16 {
	off := w.rowOffset(pos)
	return w.v[off : off+w.row : off+w.row]
}

func (w *View) rowOffset(pos int) int {
	if uint(pos) >= uint(w.n) {
		panic(fmt.Sprintf("kvcache: view position %d out of range [0, %d)", pos, w.n))
	}
	if w.seq.freed {
		panic("kvcache: view used after its sequence was freed")
	}
	mask := 1<<w.pageShift - 1
	return (int(w.pages[pos>>w.pageShift])<<w.pageShift + pos&mask) * w.row
}

// NumPages is the number of pages covering the view's positions.
func (w *View) NumPages() int { return len(w.pages) }

// PageSize is the number of positions in each page but possibly the last.
func (w *View) PageSize() int { return 1 << w.pageShift }

// PageLen is the number of the view's positions in page i: PageSize for every
// page but possibly the last.
func (w *View) PageLen(i int) int {
	if uint(i) >= uint(len(w.pages)) {
		panic(fmt.Sprintf("kvcache: view page %d out of range [0, %d)", i, len(w.pages)))
	}
	return min(1<<w.pageShift, w.n-i<<w.pageShift)
}

// KPage returns the K rows of the view's positions in page i, contiguous:
// PageLen(i) rows of RowHalves halves. Position i*PageSize+j is row j.
func (w *View) KPage(i int) []uint16 {
	off, m := w.pageSpan(i)
	return w.k[off : off+m : off+m]
}

// VPage returns the V rows of the view's positions in page i, laid out as KPage.
func (w *View) VPage(i int) []uint16 {
	off, m := w.pageSpan(i)
	return w.v[off : off+m : off+m]
}

func (w *View) pageSpan(i int) (off, m int) {
	rows := w.PageLen(i)
	if w.seq.freed {
		panic("kvcache: view used after its sequence was freed")
	}
	return int(w.pages[i]) << w.pageShift * w.row, rows * w.row
}

package sample

import (
	"math"
	"math/bits"
	"slices"
)

// better is the total order of the chain: higher logit first, then lower id,
// so the kept set and its order never depend on the selection algorithm.
func better(a, b cand) bool {
	return a.logit > b.logit || (a.logit == b.logit && a.id < b.id)
}

func cmpCand(a, b cand) int {
	switch {
	case better(a, b):
		return -1
	case better(b, a):
		return 1
	}
	return 0
}

// sortDesc sorts c best first.
func sortDesc(c []cand) { slices.SortFunc(c, cmpCand) }

// topK fills heap (of length k, 0 < k < len(vals)) with the k best of vals, in
// no particular order, and returns it. It scans vals once, keeping a min-heap
// whose root is the worst kept candidate, so most values cost one comparison.
// NaN counts as -Inf.
func topK(heap []cand, vals []float32) []cand {
	k := len(heap)
	for i := range k {
		l := vals[i]
		if l != l {
			l = float32(math.Inf(-1))
		}
		heap[i] = cand{id: int32(i), logit: l}
	}
	for i := k/2 - 1; i >= 0; i-- {
		siftDown(heap, i)
	}
	root := heap[0].logit
	for i := k; i < len(vals); i++ {
		// Later ids lose ties, so only a strictly larger logit gets in.
		if l := vals[i]; l > root {
			heap[0] = cand{id: int32(i), logit: l}
			siftDown(heap, 0)
			root = heap[0].logit
		}
	}
	return heap
}

// siftDown restores the min-heap (worst at the root) below i.
func siftDown(h []cand, i int) {
	for {
		worst := i
		if l := 2*i + 1; l < len(h) && better(h[worst], h[l]) {
			worst = l
		}
		if r := 2*i + 2; r < len(h) && better(h[worst], h[r]) {
			worst = r
		}
		if worst == i {
			return
		}
		h[i], h[worst] = h[worst], h[i]
		i = worst
	}
}

// topP keeps the smallest set of best candidates whose probability at
// temperature 1 reaches p; the candidate that crosses p is kept. m is the
// largest logit in c. If c is sorted it scans the prefix. Otherwise a logit
// histogram finds the bucket where the mass crosses p, and a quickselect on
// probability mass settles the order inside that bucket only; the kept set is
// returned unsorted, and is exactly the set a full sort would keep. It reports
// whether the result is sorted.
func topP(c []cand, m float32, p float64, sorted bool, h *histogram) ([]cand, bool) {
	var z float64
	for i, x := range c {
		w := exp32(x.logit - m)
		c[i].w = w
		z += float64(w)
	}
	target := p * z
	if sorted {
		return c[:prefixReaching(c, 0, target)], true
	}
	above, lo, hi := h.narrow(c, m, target)
	budget := 2 * bits.Len(uint(hi-lo))
	for hi-lo > 16 && budget > 0 {
		budget--
		piv, mass := partition(c[lo:hi])
		piv += lo
		switch {
		case above+mass >= target:
			hi = piv
		case above+mass+float64(c[piv].w) >= target:
			return c[:piv+1], false
		default:
			above += mass + float64(c[piv].w)
			lo = piv + 1
		}
	}
	sortDesc(c[lo:hi])
	return c[:prefixReaching(c[:hi], lo, target-above)+lo], false
}

// Histogram geometry: buckets of logit width histSpan/histBuckets below the
// maximum; everything further down shares the lowest bucket.
const (
	histBuckets = 1024
	histSpan    = 20 // e^-20 is about 2e-9
)

// histogram is top-p's scratch: the probability mass in each logit bucket.
type histogram struct {
	mass [histBuckets]float64
}

// bucket maps a logit to its bucket; it never decreases as the logit grows,
// so a higher bucket holds only better candidates.
func bucket(l, base, scale float32) int {
	f := (l - base) * scale
	switch {
	case !(f > 0): // below the span, -Inf
		return 0
	case f >= histBuckets-1:
		return histBuckets - 1
	}
	return int(f)
}

// narrow reorders c so that c[:lo] holds the candidates of the buckets above
// the one where the mass (best first) reaches target, and c[lo:hi] that
// bucket's candidates; it returns the mass of c[:lo].
func (h *histogram) narrow(c []cand, m float32, target float64) (above float64, lo, hi int) {
	h.mass = [histBuckets]float64{}
	base := m - histSpan
	scale := float32(histBuckets) / histSpan
	for _, x := range c {
		b := bucket(x.logit, base, scale)
		h.mass[b] += float64(x.w)
	}
	edge := -1
	for b := histBuckets - 1; b >= 0; b-- {
		if above+h.mass[b] >= target {
			edge = b
			break
		}
		above += h.mass[b]
	}
	if edge < 0 {
		// Rounding kept the total short of target: all are kept, and bucket
		// 0 is where the search ends.
		edge = 0
		above -= h.mass[0]
	}
	// Move the buckets above edge to the front, then edge's own.
	for i := range c {
		if bucket(c[i].logit, base, scale) > edge {
			c[i], c[lo] = c[lo], c[i]
			lo++
		}
	}
	hi = lo
	for i := lo; i < len(c); i++ {
		if bucket(c[i].logit, base, scale) == edge {
			c[i], c[hi] = c[hi], c[i]
			hi++
		}
	}
	return above, lo, hi
}

// prefixReaching returns how many of c[from:] (sorted), counted from from, it
// takes for their mass to reach target; all of them if it never does.
func prefixReaching(c []cand, from int, target float64) int {
	var cum float64
	for i := from; i < len(c); i++ {
		cum += float64(c[i].w)
		if cum >= target {
			return i - from + 1
		}
	}
	return len(c) - from
}

// partition moves a median-of-three pivot to its final place, better
// candidates before it, and returns its index and the mass (w) before it.
func partition(c []cand) (int, float64) {
	last := len(c) - 1
	mid := last / 2
	// Order c[0], c[mid], c[last] so the median sits at mid.
	if better(c[mid], c[0]) {
		c[mid], c[0] = c[0], c[mid]
	}
	if better(c[last], c[0]) {
		c[last], c[0] = c[0], c[last]
	}
	if better(c[last], c[mid]) {
		c[last], c[mid] = c[mid], c[last]
	}
	c[mid], c[last] = c[last], c[mid]
	pivot := c[last]
	store := 0
	var mass float64
	for i := range last {
		if better(c[i], pivot) {
			mass += float64(c[i].w)
			c[i], c[store] = c[store], c[i]
			store++
		}
	}
	c[store], c[last] = c[last], c[store]
	return store, mass
}

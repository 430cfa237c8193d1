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
// largest logit in c. If c is sorted
// it scans the prefix. Otherwise it runs a quickselect on probability mass, in
// expected linear time, and returns the kept set unsorted: the same set a full
// sort would keep. It reports whether the result is sorted.
func topP(c []cand, m float32, p float64, sorted bool) ([]cand, bool) {
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
	lo, hi := 0, len(c) // the boundary lies in c[lo:hi]; c[:lo] is kept
	var above float64   // mass of c[:lo]
	budget := 2 * bits.Len(uint(len(c)))
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

package sample

import (
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

// selectTop rearranges c so that c[:k] holds its k best candidates in some
// order (0 < k <= len(c)). It is a quickselect with median-of-three pivots that
// falls back to sorting the remaining range when it recurses too deep, so its
// worst case is O(n log n) and its usual cost O(n).
func selectTop(c []cand, k int) {
	lo, hi := 0, len(c) // the k-th best lies in c[lo:hi]
	budget := 2 * bits.Len(uint(len(c)))
	for hi-lo > 16 {
		if budget == 0 {
			sortDesc(c[lo:hi])
			return
		}
		budget--
		p := partition(c[lo:hi]) + lo
		switch {
		case p == k || p == k-1:
			return
		case p < k:
			lo = p + 1
		default:
			hi = p
		}
	}
	sortDesc(c[lo:hi])
}

// partition moves a median-of-three pivot to its final place, better
// candidates before it, and returns its index.
func partition(c []cand) int {
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
	for i := range last {
		if better(c[i], pivot) {
			c[i], c[store] = c[store], c[i]
			store++
		}
	}
	c[store], c[last] = c[last], c[store]
	return store
}

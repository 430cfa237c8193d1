package sample

import (
	"container/heap"
	"math"
)

// TokenLogprob is a token's log-probability.
type TokenLogprob struct {
	ID      int32
	Logprob float32
}

// MaxTopLogprobs is the most alternatives Logprobs returns (OpenAI's bound).
const MaxTopLogprobs = 20

// Logprobs returns the log-probability of tok and of the top most likely
// tokens (at most MaxTopLogprobs, most likely first) at the last Sample or
// SampleAllowed call. They come from the same values the sampler drew from:
// the logits after the penalties, before the temperature, the top-k/top-p/
// min-p filters and any grammar mask, so they describe the model's own
// distribution (a constrained token's logprob says how unlikely the model
// found it). It must be called before the logits row it sampled from is
// reused.
func (s *Sampler) Logprobs(tok int32, top int) (float32, []TokenLogprob) {
	vals := s.last
	if len(vals) == 0 || tok < 0 || int(tok) >= len(vals) {
		return float32(math.Inf(-1)), nil
	}
	m := float64(vals[argmax(vals)])
	if math.IsInf(m, 0) || m != m {
		return float32(math.Inf(-1)), nil
	}
	var z float64
	for _, v := range vals {
		if v == v {
			z += math.Exp(float64(v) - m)
		}
	}
	lse := m + math.Log(z)
	lp := func(id int32) float32 {
		v := vals[id]
		if v != v {
			return float32(math.Inf(-1))
		}
		return float32(float64(v) - lse)
	}
	top = min(max(top, 0), MaxTopLogprobs, len(vals))
	if top == 0 {
		return lp(tok), nil
	}
	h := make(minHeap, 0, top)
	for i, v := range vals {
		if v != v {
			continue
		}
		switch {
		case len(h) < top:
			heap.Push(&h, TokenLogprob{ID: int32(i), Logprob: v})
		case v > h[0].Logprob:
			h[0] = TokenLogprob{ID: int32(i), Logprob: v}
			heap.Fix(&h, 0)
		}
	}
	out := make([]TokenLogprob, len(h))
	for i := len(h) - 1; i >= 0; i-- {
		t := heap.Pop(&h).(TokenLogprob)
		out[i] = TokenLogprob{ID: t.ID, Logprob: lp(t.ID)}
	}
	return lp(tok), out
}

// minHeap keeps the largest values seen, smallest on top; ties keep the
// lower id.
type minHeap []TokenLogprob

func (h minHeap) Len() int { return len(h) }
func (h minHeap) Less(i, j int) bool {
	if h[i].Logprob != h[j].Logprob {
		return h[i].Logprob < h[j].Logprob
	}
	return h[i].ID > h[j].ID
}
func (h minHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *minHeap) Push(x any)   { *h = append(*h, x.(TokenLogprob)) }
func (h *minHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

package sample

import (
	"math"
	"math/rand/v2"
)

// pcgStream is the second PCG seed word; Params.Seed is the first.
const pcgStream = 0x853c49e6748fea9b

// cand is one token still in the running, with its (penalized) logit.
type cand struct {
	id    int32
	logit float32
}

// Sampler picks the next token of one sequence. It is not safe for concurrent
// use: hold one per sequence.
type Sampler struct {
	p   Params // validated, with zero-means-off fields filled in
	rng *rand.Rand

	// Scratch reused across calls; each grows to the vocabulary size once.
	cands  []cand    // candidates for the sampling chain
	work   []float32 // penalized copy of the logits for greedy decoding
	counts []int32   // occurrences in the penalty window; all zero between calls
}

// New validates p and returns a Sampler whose generator is seeded from p.Seed.
func New(p Params) (*Sampler, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	p = p.withDefaults()
	return &Sampler{p: p, rng: rand.New(rand.NewPCG(p.Seed, pcgStream))}, nil
}

// Sample returns the next token for one row of logits (one per vocabulary
// entry). history is the prompt and the tokens generated so far; the penalties
// look at its last PenaltyLastN entries, and ids outside the vocabulary are
// ignored. Sample does not modify logits or history.
//
// NaN logits count as -Inf. If every logit is -Inf the first token is returned;
// if some are +Inf the first of those is returned. Sample panics if logits is
// empty, which is a broken invariant of the caller.
func (s *Sampler) Sample(logits []float32, history []int32) int32 {
	n := len(logits)
	if n == 0 {
		panic("sample: empty logits")
	}
	if n > math.MaxInt32 {
		panic("sample: vocabulary larger than int32")
	}
	if s.p.Temperature == 0 {
		return s.greedy(logits, history)
	}

	c, id, done := s.filter(logits, history)
	if done {
		return id
	}
	return s.draw(c)
}

// filter runs the chain up to the draw: it loads and penalizes the candidates,
// then applies top-k, top-p and min-p. done is true when the row is degenerate
// (an infinite maximum) and id is then the answer.
func (s *Sampler) filter(logits []float32, history []int32) (c []cand, id int32, done bool) {
	n := len(logits)
	if cap(s.cands) < n {
		s.cands = make([]cand, n)
	}
	c = s.cands[:n]
	for i, l := range logits {
		if l != l { // NaN
			l = float32(math.Inf(-1))
		}
		c[i] = cand{id: int32(i), logit: l}
	}
	if s.p.penalized() {
		window := s.countWindow(n, history)
		for _, t := range window {
			if t >= 0 && int(t) < n && s.counts[t] > 0 {
				c[t].logit = s.p.penalize(c[t].logit, s.counts[t])
				s.counts[t] = 0
			}
		}
	}
	if id, ok := degenerate(c); ok {
		return nil, id, true
	}

	sorted := false
	if k := s.p.TopK; k > 0 && k < len(c) {
		selectTop(c, k)
		c = c[:k]
		sortDesc(c)
		sorted = true
	}
	if s.p.TopP < 1 {
		c = topP(c, float64(s.p.TopP), sorted)
		sorted = true
	}
	if s.p.MinP > 0 {
		c = minP(c, float64(s.p.MinP), sorted)
	}
	return c, 0, false
}

// greedy returns the first index of the largest penalized logit.
func (s *Sampler) greedy(logits []float32, history []int32) int32 {
	if !s.p.penalized() {
		return argmax(logits)
	}
	n := len(logits)
	if cap(s.work) < n {
		s.work = make([]float32, n)
	}
	w := s.work[:n]
	copy(w, logits)
	window := s.countWindow(n, history)
	for _, t := range window {
		if t >= 0 && int(t) < n && s.counts[t] > 0 {
			w[t] = s.p.penalize(w[t], s.counts[t])
			s.counts[t] = 0
		}
	}
	return argmax(w)
}

// countWindow counts each in-vocabulary token of the penalty window into
// s.counts and returns the window. The caller must zero every count it read.
func (s *Sampler) countWindow(n int, history []int32) []int32 {
	if cap(s.counts) < n {
		s.counts = make([]int32, n)
	}
	s.counts = s.counts[:n]
	window := history
	if last := s.p.PenaltyLastN; last >= 0 && len(window) > last {
		window = window[len(window)-last:]
	}
	for _, t := range window {
		if t >= 0 && int(t) < n {
			s.counts[t]++
		}
	}
	return window
}

// penalize applies the repetition penalty (CTRL, as llama.cpp: positive logits
// divided, others multiplied) and then the OpenAI frequency and presence
// penalties to the logit of a token seen count > 0 times.
func (p Params) penalize(l float32, count int32) float32 {
	if l <= 0 {
		l *= p.RepetitionPenalty
	} else {
		l /= p.RepetitionPenalty
	}
	return l - float32(count)*p.FrequencyPenalty - p.PresencePenalty
}

// argmax returns the first index of the largest value; NaNs never win, and an
// all -Inf (or all NaN) row gives 0.
func argmax(v []float32) int32 {
	best, at := float32(math.Inf(-1)), 0
	for i, x := range v {
		if x > best {
			best, at = x, i
		}
	}
	return int32(at)
}

// degenerate handles rows whose maximum is infinite, where softmax is
// undefined: it returns the first candidate holding that maximum.
func degenerate(c []cand) (int32, bool) {
	m := c[0].logit
	for _, x := range c[1:] {
		if x.logit > m {
			m = x.logit
		}
	}
	if !math.IsInf(float64(m), 0) {
		return 0, false
	}
	for _, x := range c {
		if x.logit == m {
			return x.id, true
		}
	}
	return c[0].id, true
}

// topP keeps the shortest prefix of the candidates, most likely first, whose
// probability at temperature 1 reaches p; the token that crosses p is kept.
// Unless c is already sorted, it sorts lazily: it selects and sorts the next
// chunk of best candidates, doubling the chunk, only until the mass is reached.
func topP(c []cand, p float64, sorted bool) []cand {
	m := maxLogit(c)
	var z float64
	for _, x := range c {
		z += math.Exp(float64(x.logit) - m)
	}
	target := p * z
	var cum float64
	start, chunk := 0, 64
	if sorted {
		chunk = len(c)
	}
	for start < len(c) {
		end := min(start+chunk, len(c))
		if !sorted {
			if end < len(c) {
				selectTop(c[start:], end-start)
			}
			sortDesc(c[start:end])
		}
		for i := start; i < end; i++ {
			cum += math.Exp(float64(c[i].logit) - m)
			if cum >= target {
				return c[:i+1]
			}
		}
		start, chunk = end, chunk*2
	}
	return c
}

// minP keeps the candidates whose probability is at least p times the largest,
// that is whose logit is at least max + ln p. Order is preserved.
func minP(c []cand, p float64, sorted bool) []cand {
	floor := maxLogit(c) + math.Log(p)
	if sorted {
		for i, x := range c {
			if float64(x.logit) < floor {
				return c[:i]
			}
		}
		return c
	}
	kept := c[:0]
	for _, x := range c {
		if float64(x.logit) >= floor {
			kept = append(kept, x)
		}
	}
	return kept
}

// draw applies the temperature and draws one candidate from the softmax.
func (s *Sampler) draw(c []cand) int32 {
	m := maxLogit(c)
	inv := 1 / float64(s.p.Temperature)
	var z float64
	for _, x := range c {
		z += math.Exp((float64(x.logit) - m) * inv)
	}
	r := s.rng.Float64() * z
	var cum float64
	last := c[0].id
	for _, x := range c {
		w := math.Exp((float64(x.logit) - m) * inv)
		if w == 0 {
			continue
		}
		cum += w
		last = x.id
		if r < cum {
			return x.id
		}
	}
	return last // rounding left r at the very top of the range
}

func maxLogit(c []cand) float64 {
	m := c[0].logit
	for _, x := range c[1:] {
		if x.logit > m {
			m = x.logit
		}
	}
	return float64(m)
}

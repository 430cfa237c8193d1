package sample

import (
	"math"
	"math/rand/v2"
	"slices"
)

// pcgStream is the second PCG seed word; Params.Seed is the first.
const pcgStream = 0x853c49e6748fea9b

// cand is one token still in the running.
type cand struct {
	id    int32
	logit float32 // penalized logit
	w     float32 // softmax weight, exp((logit - max) / temperature), set by top-p (at temperature 1) and by the draw
}

// Sampler picks the next token of one sequence. It is not safe for concurrent
// use: hold one per sequence.
type Sampler struct {
	p   Params // validated, with zero-means-off fields filled in
	rng *rand.Rand

	// Scratch reused across calls; each grows to the vocabulary size once.
	cands   []cand    // candidates for the sampling chain
	work    []float32 // penalized copy of the logits
	weights []float32 // softmax weights when drawing from the whole vocabulary
	counts  []int32   // occurrences in the penalty window; all zero between calls
	masked  []float32 // penalized values with disallowed tokens at -Inf (SampleAllowed)
	last    []float32 // the last call's penalized values, unmasked (Logprobs)
	hist    *histogram
}

// New validates p and returns a Sampler whose generator is seeded from p.Seed.
func New(p Params) (*Sampler, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	p = p.withDefaults()
	p.LogitBias = slices.Clone(p.LogitBias) // the caller's slice may change
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
	s.last = s.penalized(logits, history)
	return s.sampleVals(s.last)
}

// SampleAllowed is Sample restricted to the tokens whose bit is set in allow
// (bit id%64 of allow[id/64]), as a Matcher's Mask fills it: the penalties
// apply first, then every other token's logit becomes -Inf, then the filters
// and the draw run as in Sample. At least one token must be allowed.
func (s *Sampler) SampleAllowed(logits []float32, history []int32, allow []uint64) int32 {
	n := len(logits)
	if n == 0 {
		panic("sample: empty logits")
	}
	vals := s.penalized(logits, history)
	s.last = vals
	if cap(s.masked) < n {
		s.masked = make([]float32, n)
	}
	m := s.masked[:n]
	ninf := float32(math.Inf(-1))
	first := int32(-1)
	for i := range m {
		if allow[i/64]&(1<<(i%64)) != 0 {
			m[i] = vals[i]
			if first < 0 {
				first = int32(i)
			}
		} else {
			m[i] = ninf
		}
	}
	if best := argmax(m); m[best] != m[best] || math.IsInf(float64(m[best]), -1) {
		// Every allowed logit is -Inf or NaN: argmax would pick a token
		// outside the mask; take the first allowed one.
		return max(first, 0)
	}
	return s.sampleVals(m)
}

// sampleVals draws from penalized (and possibly masked) values.
func (s *Sampler) sampleVals(vals []float32) int32 {
	best := argmax(vals)
	m := vals[best]
	if s.p.Temperature == 0 || m != m || math.IsInf(float64(m), 0) {
		// Greedy, or a row whose softmax is undefined: an infinite maximum
		// (the first +Inf wins; an all -Inf or all NaN row gives 0).
		return best
	}
	// The argmax token is the best under the chain's order, so every filter
	// keeps it, and m stays the maximum of the candidates throughout.
	if s.p.TopK == 0 && s.p.TopP >= 1 && s.p.MinP == 0 {
		return s.drawAll(vals, m)
	}
	return s.draw(s.filter(vals, m), m)
}

// penalized returns logits with the penalties and then the logit biases
// applied: logits itself when none is set, otherwise a copy in s.work.
func (s *Sampler) penalized(logits []float32, history []int32) []float32 {
	if !s.p.penalized() {
		return logits
	}
	n := len(logits)
	if cap(s.work) < n {
		s.work = make([]float32, n)
	}
	if cap(s.counts) < n {
		s.counts = make([]int32, n)
	}
	w, counts := s.work[:n], s.counts[:n]
	copy(w, logits)
	window := history
	if last := s.p.PenaltyLastN; last >= 0 && len(window) > last {
		window = window[len(window)-last:]
	}
	for _, t := range window {
		if t >= 0 && int(t) < n {
			counts[t]++
		}
	}
	for _, t := range window {
		if t >= 0 && int(t) < n && counts[t] > 0 {
			w[t] = s.p.penalize(w[t], counts[t])
			counts[t] = 0 // also marks t done, and leaves counts all zero
		}
	}
	for _, b := range s.p.LogitBias {
		switch {
		case int(b.Token) >= n:
		case b.Bias <= -LogitBiasLimit:
			w[b.Token] = float32(math.Inf(-1)) // a ban, exactly
		default:
			w[b.Token] += b.Bias
		}
	}
	return w
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

// filter runs the chain up to the draw on penalized values whose maximum m is
// finite: top-k, then top-p, then min-p.
func (s *Sampler) filter(vals []float32, m float32) []cand {
	n := len(vals)
	if cap(s.cands) < n {
		s.cands = make([]cand, n)
	}
	var c []cand
	sorted := false
	switch {
	case s.p.TopK > 0 && s.p.TopK < n:
		c = topK(s.cands[:s.p.TopK], vals)
		sortDesc(c)
		sorted = true
	case s.p.TopP < 1:
		c = s.cands[:n]
		for i, l := range vals {
			if l != l { // NaN
				l = float32(math.Inf(-1))
			}
			c[i] = cand{id: int32(i), logit: l}
		}
	default: // min-p alone: build only the survivors
		floor := minPFloor(m, s.p.MinP)
		c = s.cands[:0]
		for i, l := range vals {
			if float64(l) >= floor {
				c = append(c, cand{id: int32(i), logit: l})
			}
		}
		return c
	}
	if s.p.TopP < 1 {
		if s.hist == nil {
			s.hist = new(histogram)
		}
		c, sorted = topP(c, m, float64(s.p.TopP), sorted, s.hist)
	}
	if s.p.MinP > 0 {
		c = minP(c, minPFloor(m, s.p.MinP), sorted)
	}
	return c
}

// minPFloor is the smallest logit min-p keeps: max + ln p, so that the kept
// tokens have a probability of at least p times the largest.
func minPFloor(m, p float32) float64 { return float64(m) + math.Log(float64(p)) }

// minP keeps the candidates whose logit is at least floor. Order is kept.
func minP(c []cand, floor float64, sorted bool) []cand {
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

// draw applies the temperature and draws one candidate from the softmax; m
// is the largest candidate logit.
func (s *Sampler) draw(c []cand, m float32) int32 {
	inv := 1 / s.p.Temperature
	var z float64
	for i, x := range c {
		w := exp32((x.logit - m) * inv)
		c[i].w = w
		z += float64(w)
	}
	r := s.rng.Float64() * z
	var cum float64
	last := c[0].id
	for _, x := range c {
		if x.w == 0 {
			continue
		}
		cum += float64(x.w)
		last = x.id
		if r < cum {
			return x.id
		}
	}
	return last // rounding left r at the very top of the range
}

// drawAll is draw over the whole vocabulary, when no filter is set; the
// weights go to s.weights so no candidate list is built.
func (s *Sampler) drawAll(vals []float32, m float32) int32 {
	n := len(vals)
	if cap(s.weights) < n {
		s.weights = make([]float32, n)
	}
	ws := s.weights[:n]
	inv := 1 / s.p.Temperature
	var z float64
	for i, l := range vals {
		w := exp32((l - m) * inv) // NaN gives 0
		ws[i] = w
		z += float64(w)
	}
	r := s.rng.Float64() * z
	var cum float64
	last := 0
	for i, w := range ws {
		if w == 0 {
			continue
		}
		cum += float64(w)
		last = i
		if r < cum {
			return int32(i)
		}
	}
	return int32(last) // rounding left r at the very top of the range
}

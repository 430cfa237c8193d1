package engine

// Speculative decoding without a draft model. A decoding sequence drafts
// the tokens that followed the latest earlier occurrence of its own last
// few tokens, in its prompt and output (prompt lookup) or in the output the
// client predicted (Request.Prediction, OpenAI's predicted outputs), and
// the step computes its last token and the drafts as one chunk: the logits
// after each row are what plain decoding would have computed there, row
// for row (every row of a batch is computed the same whatever shares it).
//
// Verification samples each row's token exactly as plain decoding does,
// with the same sampler, history, grammar and seeded random stream, and
// keeps going while the sampled token is the draft: the output is token for
// token what plain decoding gives, greedy or sampled. For a draft that is
// one token (not a distribution) this is standard speculative sampling: the
// draft is accepted with probability p(draft), and a rejection's token is
// distributed as p without the draft. The KV of rejected drafts is rewound
// (kvcache.Sequence.Rewind).
//
// How many tokens to draft is chosen per sequence and step from the
// sequence's acceptance so far and what a row costs on this engine: k
// drafts that are each accepted with probability a add a + ... + a^k tokens
// to the B a step of B decoding sequences gives, and make the step
// 1 + c*k times as long, where c is an extra row's time over the B-row
// step's, measured as the engine runs (draftCost). The k that gives the
// most tokens per time is drafted, none when no k gains 2%. On CPUs a row
// costs a quarter to half of a one-row step (the compute of a prefill row
// against a decode step that streams the weights once), so drafting pays
// only where drafts are mostly accepted.

import "math"

const (
	// defaultDraft is Config.Draft's default: the most tokens a sequence
	// drafts in one step.
	defaultDraft = 8
	// minMatch and maxMatch bound the suffix a draft is looked up by: the
	// longest earlier match of at most maxMatch tokens wins, the latest
	// among equals, and one of fewer than minMatch tokens drafts nothing
	// (a prediction drafts on a one-token match).
	minMatch, maxMatch = 2, 16
	// stepDraftRows bounds a step's decode rows plus drafts: a batch with
	// this many decoding sequences is compute bound and drafts nothing.
	stepDraftRows = 16
	// priorRowCost is an extra row's time over a one-row step's until the
	// engine has measured it (BenchmarkVerifyStep, 2 threads, AVX2: 0.25-0.3
	// at the llama-3.2-1B shape, 0.4-0.6 at smollm2-135M).
	priorRowCost = 0.3
	// acceptDecay weighs the acceptance estimate towards recent steps;
	// idleDecay lets a sequence that stopped drafting try again.
	acceptDecay, idleDecay = 0.9, 0.97
)

// speculation is a sequence's drafting state.
type speculation struct {
	chunk []int32 // this step's decode chunk: the last token, then the drafts
	// predicted is the prompt followed by Request.Prediction (nil without
	// one): a draft is looked up in it as if the prediction followed the
	// prompt.
	predicted []int32
	// predAt is where in predicted the next generated token is expected
	// (0: nowhere known), following the output token by token (follow);
	// predMiss counts the tokens since it last matched.
	predAt, predMiss int
	// hits and misses are decayed counts of drafts accepted and of
	// rejections, the acceptance estimate's evidence (length).
	hits, misses float64

	drafted, accepted int // totals, for Usage
	// predMatched counts the generated tokens that were the prediction's
	// where it was followed: the prediction tokens the output kept.
	predMatched int
}

// draft fills s.spec.chunk with s's last token and at most limit drafted
// tokens, and returns it. cost is an extra row's time over the step's.
func (s *sequence) draft(limit, batch int, cost float64) []int32 {
	sp := &s.spec
	h := s.history
	sp.chunk = append(sp.chunk[:0], h[len(h)-1])
	if limit <= 0 {
		return sp.chunk
	}
	if sp.predAt > 0 {
		// The output follows the prediction (an edit skipped at most two
		// tokens of it): draft what comes next there.
		prior := matchPrior(maxMatch)
		if sp.predMiss > 0 {
			prior = matchPrior(minMatch)
		}
		k := min(limit, len(sp.predicted)-sp.predAt, sp.length(limit, batch, cost, prior))
		sp.chunk = append(sp.chunk, sp.predicted[sp.predAt:sp.predAt+k]...)
		return sp.chunk
	}
	if sp.predicted == nil && sp.length(limit, batch, cost, matchPrior(maxMatch)) == 0 {
		// Not even the longest match would pay: skip the scan (a
		// prediction is still looked up, to follow it through the output).
		sp.misses *= idleDecay
		return sp.chunk
	}
	next, n := longestMatch(h, h, 0, len(h)-1)
	text := h
	if sp.predicted != nil {
		pn, pl := longestMatch(sp.predicted, h, len(s.req.Prompt)-1, len(sp.predicted)-1)
		if pl >= n && pl >= 1 {
			next, n, text = pn, max(pl, minMatch), sp.predicted
			sp.predAt, sp.predMiss = pn, 0 // the output found the prediction again
		}
	}
	if n < minMatch {
		sp.misses *= idleDecay
		return sp.chunk
	}
	k := min(limit, len(text)-next, sp.length(limit, batch, cost, matchPrior(n)))
	if k == 0 {
		sp.misses *= idleDecay
		return sp.chunk
	}
	sp.chunk = append(sp.chunk, text[next:next+k]...)
	return sp.chunk
}

// follow moves the prediction's expected position past the generated
// token t: on when t is the predicted token, on as well after a token that
// replaced it (an edit), and nowhere after three tokens in a row that the
// prediction did not have there (draft then looks for it again).
func (sp *speculation) follow(t int32) {
	if sp.predAt <= 0 {
		return
	}
	switch {
	case sp.predAt >= len(sp.predicted):
		sp.predAt = 0
	case sp.predicted[sp.predAt] == t:
		sp.predAt++
		sp.predMiss = 0
		sp.predMatched++
	case sp.predMiss >= 2:
		sp.predAt, sp.predMiss = 0, 0
	default:
		sp.predAt++
		sp.predMiss++
	}
}

// matchPrior is the acceptance expected of a draft found by a match of n
// tokens, before the sequence has shown its own: a long match is usually
// text being copied.
func matchPrior(n int) float64 {
	switch {
	case n >= 8:
		return 0.9
	case n >= 4:
		return 0.75
	}
	return 0.5
}

// priorWeight is how many drafts' worth of evidence the prior counts for.
const priorWeight = 2

// length is the number of drafts, at most limit, that gives a step of
// batch decoding sequences the most tokens per time, at the acceptance
// estimate (the sequence's accepted and rejected drafts, with the match's
// prior), a row costing cost of the step; 0 when none gains.
func (sp *speculation) length(limit, batch int, cost, prior float64) int {
	a := (sp.hits + priorWeight*prior) / (sp.hits + sp.misses + priorWeight)
	best, bestGain := 0, 1.02 // a draft must gain at least 2%
	extra, ak := 0.0, 1.0
	for k := 1; k <= limit; k++ {
		ak *= a
		extra += ak
		if gain := (1 + extra/float64(batch)) / (1 + cost*float64(k)); gain > bestGain {
			best, bestGain = k, gain
		}
	}
	return best
}

// draftCost measures what a drafted row costs on this engine: the time of
// decode steps without drafts by their number of sequences, and the time a
// row adds to them. Run's goroutine owns it.
type draftCost struct {
	base [stepDraftRows + 1]float64 // seconds, by sequences; 0 until measured
	row  float64                    // seconds a drafted row adds; 0 until measured
	// prior keeps the prior cost whatever is measured: tests that check
	// what is drafted set it, so that no timing decides it.
	prior bool
}

// costEMA weighs a new step's time in draftCost's averages; costRelax
// pulls the row's time back towards the prior's at each step without
// drafts, so that one slow drafted step (a fault, a descheduled thread) does
// not stop drafting for good: with no drafts nothing would correct it.
const costEMA, costRelax = 0.1, 0.02

// observe records a decode step of batch sequences and rows rows (drafts
// included) that took dt seconds.
func (d *draftCost) observe(batch, rows int, dt float64) {
	if batch < 1 || batch > stepDraftRows {
		return
	}
	b := &d.base[batch]
	switch {
	case rows == batch && *b == 0:
		*b = dt
	case rows == batch:
		*b += costEMA * (dt - *b)
		if d.row > 0 {
			d.row += costRelax * (priorRowCost**b - d.row)
		}
	case *b > 0:
		r := min(max(dt-*b, 0)/float64(rows-batch), 2**b) // a row costs at most two steps
		if d.row == 0 {
			d.row = r
		} else {
			d.row += costEMA * (r - d.row)
		}
	}
}

// ratio is a drafted row's time over a step of batch sequences' time.
func (d *draftCost) ratio(batch int) float64 {
	if batch < 1 || batch > stepDraftRows {
		return math.Inf(1)
	}
	b := d.base[batch]
	if b == 0 || d.row == 0 || d.prior {
		return priorRowCost / float64(batch)
	}
	return d.row / b
}

// verified records that m of the step's k drafts were accepted.
func (sp *speculation) verified(k, m int) {
	sp.drafted += k
	sp.accepted += m
	sp.hits = sp.hits*acceptDecay + float64(m)
	sp.misses *= acceptDecay
	if m < k {
		sp.misses++
	}
}

// longestMatch looks in text for the latest end j in [lo, hi) of the
// longest run (up to maxMatch tokens) equal to the end of h, and returns
// the position after it and the run's length; (0, 0) when text[j] never
// equals h's last token.
func longestMatch(text, h []int32, lo, hi int) (next, n int) {
	last := h[len(h)-1]
	lo = max(lo, 0)
	for j := hi - 1; j >= lo; j-- {
		if text[j] != last {
			continue
		}
		l := 1
		for l < maxMatch && l <= j && l < len(h) && text[j-l] == h[len(h)-1-l] {
			l++
		}
		if l > n {
			next, n = j+1, l
			if n == maxMatch {
				break
			}
		}
	}
	return next, n
}

// draftLimit is the most tokens s may draft this step: within the engine's
// Draft, the step's remaining rows, its reservation, its max tokens (one is
// always sampled after the drafts) and a fault hold.
func (e *Engine) draftLimit(s *sequence, rows int) int {
	if e.cfg.Draft <= 0 || s.req.NoSpeculation || s.handoff {
		return 0
	}
	k := min(e.cfg.Draft, rows, s.kv.Cap()-len(s.history), s.req.MaxTokens-s.generated-1)
	if e.cfg.HoldAt > 0 {
		k = min(k, e.cfg.HoldAt-s.generated-1)
	}
	return max(k, 0)
}

// verify samples s's tokens from the logits after each row of its decode
// chunk c (its last token, then the drafts), as plain decoding would, for
// as long as each sampled token is the draft that follows; then it rewinds
// the KV of the drafts that were not kept.
func (e *Engine) verify(s *sequence, c *chunk, logits [][]float32) {
	drafts := c.tokens[1:]
	g := s.generated
	m := 0
	for i := range logits {
		tok := s.next(logits[i])
		kept := s.failed == nil && i < len(drafts) && tok == drafts[i]
		if kept {
			m++
		}
		if !kept || s.finished != "" {
			break
		}
	}
	s.spec.verified(len(drafts), m)
	e.fair.decoded(s, s.generated-g)
	if s.failed == nil && s.finished == "" {
		// Written: the chunk's last token and the m drafts kept; the token
		// sampled after them is the next step's.
		if err := s.kv.Rewind(len(s.history) - 1); err != nil {
			s.failed = err
		}
	}
}

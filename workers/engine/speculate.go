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
// sequence's acceptance so far: k drafts that are each accepted with
// probability a give 1 + a + ... + a^k tokens for a step costing about
// 1 + draftRowCost*k decode rows, and the k that gives the most tokens per
// cost is drafted, none when no k pays.

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
	// draftRowCost is what one more row adds to a one-row decode step,
	// relative to it: decode reads every weight for one row, and a few
	// more rows reuse what was read (measured on 1B and 135M models,
	// 2 threads, AVX2; see docs/speculation.md).
	draftRowCost = 0.15
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
	fromPred  bool // this step's drafts come from predicted
	// hits and misses are decayed counts of drafts accepted and of
	// rejections: the acceptance estimate is (hits+1)/(hits+misses+2).
	hits, misses float64

	drafted, accepted, predAccepted int // totals, for Usage
}

// draft fills s.spec.chunk with s's last token and at most limit drafted
// tokens, and returns it.
func (s *sequence) draft(limit int) []int32 {
	sp := &s.spec
	h := s.history
	sp.chunk = append(sp.chunk[:0], h[len(h)-1])
	sp.fromPred = false
	if limit <= 0 {
		return sp.chunk
	}
	next, n := longestMatch(h, h, 0, len(h)-1)
	text := h
	if sp.predicted != nil {
		pn, pl := longestMatch(sp.predicted, h, len(s.req.Prompt)-1, len(sp.predicted)-1)
		if pl >= n && pl >= 1 {
			next, n, text, sp.fromPred = pn, max(pl, minMatch), sp.predicted, true
		}
	}
	if n < minMatch {
		sp.misses *= idleDecay
		return sp.chunk
	}
	k := min(limit, len(text)-next, sp.length(limit))
	if k == 0 {
		sp.misses *= idleDecay
		return sp.chunk
	}
	sp.chunk = append(sp.chunk, text[next:next+k]...)
	return sp.chunk
}

// length is the number of drafts, at most limit, that gives the most tokens
// per cost at the current acceptance estimate; 0 when none gains.
func (sp *speculation) length(limit int) int {
	a := (sp.hits + 1) / (sp.hits + sp.misses + 2)
	best, bestGain := 0, 1.02 // a draft must gain at least 2%
	tokens, ak := 1.0, 1.0
	for k := 1; k <= limit; k++ {
		ak *= a
		tokens += ak
		if gain := tokens / (1 + draftRowCost*float64(k)); gain > bestGain {
			best, bestGain = k, gain
		}
	}
	return best
}

// verified records that m of the step's k drafts were accepted.
func (sp *speculation) verified(k, m int) {
	sp.drafted += k
	sp.accepted += m
	if sp.fromPred {
		sp.predAccepted += m
	}
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
		if s.failed != nil || s.finished != "" || i == len(drafts) || tok != drafts[i] {
			break
		}
		m++
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

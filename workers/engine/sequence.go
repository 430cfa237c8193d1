package engine

import (
	"context"
	"errors"
	"sync/atomic"

	"github.com/bulkhead-ai/bulkhead/models/grammar"
	"github.com/bulkhead-ai/bulkhead/models/tokenizer"
	"github.com/bulkhead-ai/bulkhead/workers/kvcache"
	"github.com/bulkhead-ai/bulkhead/workers/sample"
)

// sequence is a request in the engine: its KV, sampler, detokenizer and stream.
// It is touched only by the engine's Run goroutine once submitted.
//
// It keeps no context: at submit it registers a context.AfterFunc that
// records the request context's error in cancelled once it ends; the
// scheduler reads that, and finish stops the watch.
type sequence struct {
	cancelled atomic.Pointer[error] // the request context's error, once it ended
	unwatch   func() bool           // stops the context watch

	req     Request
	model   *Model
	kv      *kvcache.Sequence // nil until admitted
	sampler *sample.Sampler
	detok   *tokenizer.StreamDecoder
	stop    *sample.StopMatcher
	events  chan Event // buffered for every event the request can produce: MaxTokens tokens + final

	history   []int32 // prompt then generated tokens
	prefilled int     // prompt tokens whose KV is written
	cached    int     // of those, tokens attached from the prefix cache
	generated int
	finished  string // finish reason once done
	failed    error
	hitStop   bool // a stop sequence ended the output
	ended     bool

	// handoff marks a Prefill: the sequence reserves KV for the prompt only,
	// samples first after it, and ends keeping its KV for the caller.
	handoff bool
	first   int32
	// reservation marks a Reserve: the sequence waits its turn only for its
	// KV and ends at admission, keeping the KV for the caller.
	reservation bool

	// Constrained decoding (Request.Grammar): the matcher follows the output
	// through the grammar; allow is the mask it fills each step.
	matcher *grammar.Matcher
	vocab   *grammar.Vocab
	allow   []uint64

	logprob *Logprob // the next accepted token's, when the request asks

	spec speculation // drafting state (speculate.go)

	sched schedState // fair scheduling and preemption (fair.go)
}

// ErrGrammarDeadEnd ends a constrained sequence in which no token of the
// vocabulary can continue the output (a vocabulary without some byte).
var ErrGrammarDeadEnd = errors.New("engine: no token can continue the constrained output")

// constrain sets up s's grammar matcher, if its request has a grammar.
func (e *Engine) constrain(s *sequence) {
	if s.req.Grammar == nil {
		return
	}
	s.vocab = e.vocabIndex()
	s.matcher = s.req.Grammar.NewMatcher()
	s.allow = make([]uint64, (s.vocab.Size()+63)/64)
}

// vocabIndex returns the tokenizer's trie for constrained decoding, building
// it on first use: the bytes each token emits as generated text (control
// tokens emit nothing and are never allowed).
func (e *Engine) vocabIndex() *grammar.Vocab {
	e.vocabOnce.Do(func() {
		e.vocab = NewVocab(e.model.Tokenizer, e.model.Hyper.Vocab)
	})
	return e.vocab
}

// NewVocab indexes a tokenizer's vocabulary (size rows of logits) for
// constrained decoding.
func NewVocab(t *tokenizer.Tokenizer, size int) *grammar.Vocab {
	pieces := make([]string, size)
	var eog []int32
	for id := range int32(size) {
		if t.IsEOG(id) {
			eog = append(eog, id)
			continue
		}
		if !t.IsControl(id) {
			pieces[id] = t.Piece(id)
		}
	}
	return grammar.NewVocab(pieces, eog)
}

// pick samples the next token, within the grammar if there is one; it
// returns -1 with s.failed set when the grammar allows no token.
func (s *sequence) pick(logits []float32) int32 {
	if s.matcher == nil {
		return s.sampler.Sample(logits, s.history)
	}
	if !s.matcher.Mask(s.vocab, s.allow) {
		s.failed = ErrGrammarDeadEnd
		return -1
	}
	return s.sampler.SampleAllowed(logits, s.history, s.allow)
}

// Internal finish reasons: a Prefill that completed, a Reserve that got its KV.
const (
	finishPrefilled = "prefilled"
	finishReserved  = "reserved"
)

// reserve is the number of KV positions the sequence needs.
func (s *sequence) reserve() int {
	if s.handoff {
		return len(s.req.Prompt)
	}
	return len(s.req.Prompt) + s.req.MaxTokens
}

// newSequence builds the sequence of req; cancelling ctx ends it at the next
// step with ctx's error (see sequence).
func newSequence(ctx context.Context, m *Model, req Request, smp *sample.Sampler) *sequence {
	s := &sequence{
		req: req, model: m, sampler: smp,
		detok:  m.Tokenizer.NewStreamDecoder(tokenizer.KeepLeadingSpace()),
		stop:   sample.NewStopMatcher(req.Stop),
		events: make(chan Event, req.MaxTokens+1),
	}
	s.history = make([]int32, len(req.Prompt), len(req.Prompt)+req.MaxTokens)
	copy(s.history, req.Prompt)
	if len(req.Prediction) > 0 {
		s.spec.predicted = append(append(make([]int32, 0, len(req.Prompt)+len(req.Prediction)), req.Prompt...), req.Prediction...)
		if !req.NoSpeculation {
			s.spec.predAt = len(req.Prompt) // the output is expected to start as predicted
		}
	}
	if err := ctx.Err(); err != nil {
		s.cancelled.Store(&err)
		s.unwatch = func() bool { return false }
	} else {
		s.unwatch = context.AfterFunc(ctx, func() {
			err := ctx.Err()
			s.cancelled.Store(&err)
		})
	}
	return s
}

// cancelErr is the request context's error once it ended, else nil.
func (s *sequence) cancelErr() error {
	if err := s.cancelled.Load(); err != nil {
		return *err
	}
	return nil
}

// next samples a token from logits and emits it, and returns it.
func (s *sequence) next(logits []float32) int32 {
	tok := s.pick(logits)
	if s.failed != nil {
		return tok
	}
	if s.req.Logprobs {
		lp, top := s.sampler.Logprobs(tok, s.req.TopLogprobs)
		s.logprob = &Logprob{Logprob: lp, Top: top}
	}
	s.accept(tok)
	return tok
}

// accept appends tok to the output and emits it, ending the sequence on an
// end-of-generation token, a stop sequence or max tokens.
func (s *sequence) accept(tok int32) {
	if s.matcher != nil && !s.model.Tokenizer.IsEOG(tok) {
		if err := s.matcher.Accept([]byte(s.vocab.Piece(tok))); err != nil {
			s.failed = err
			return
		}
	}
	s.history = append(s.history, tok)
	s.spec.follow(tok)
	s.generated++
	if !s.req.IgnoreEOS && s.model.Tokenizer.IsEOG(tok) {
		s.finished = "stop" // the end-of-generation token itself has no text
		s.events <- Event{Token: tok, Logprob: s.takeLogprob()}
		return
	}
	text, stopped := s.stop.Push(s.detok.Next(tok))
	s.events <- Event{Token: tok, Text: text, Logprob: s.takeLogprob()}
	switch {
	case stopped:
		s.finished, s.hitStop = "stop", true
	case s.matcher != nil && s.matcher.Done():
		s.finished = "stop" // the grammar's value is complete; nothing can follow
	case s.generated >= s.req.MaxTokens:
		s.finished = "length"
	}
}

// takeLogprob returns and clears the pending token's logprob.
func (s *sequence) takeLogprob() *Logprob {
	lp := s.logprob
	s.logprob = nil
	return lp
}

// finish frees the sequence's pages and sends its final event, which carries
// any text held back by the detokenizer or the stop matcher. Idempotent.
func (s *sequence) finish(ev Event) {
	if s.ended {
		return
	}
	s.unwatch()
	if (s.handoff || s.reservation) && ev.Err == nil {
		// A completed Prefill or Reserve: the KV now belongs to the caller.
		ev.Usage = Usage{PromptTokens: len(s.req.Prompt), CachedTokens: s.cached}
		s.ended = true
		s.events <- ev
		close(s.events)
		return
	}
	if kv := s.kv; kv != nil {
		// Dropped first: should Free find a broken invariant and panic,
		// the engine's recovery ends s without touching its pool again.
		s.kv = nil
		kv.Free()
	}
	if ev.Err == nil && !s.hitStop {
		text, stopped := s.stop.Push(s.detok.Flush())
		if !stopped {
			text += s.stop.Flush()
		}
		ev.Text = text
	}
	ev.Usage = Usage{PromptTokens: len(s.req.Prompt), CompletionTokens: s.generated, CachedTokens: s.cached,
		DraftedTokens: s.spec.drafted, AcceptedTokens: s.spec.accepted,
		AcceptedPrediction: s.spec.predMatched, RejectedPrediction: len(s.req.Prediction) - s.spec.predMatched}
	s.ended = true
	s.events <- ev
	close(s.events)
}

package engine

import (
	"context"
	"fmt"

	"github.com/bulkhead-ai/bulkhead/workers/kvcache"
	"github.com/bulkhead-ai/bulkhead/workers/sample"
)

// Prefilled is a prompt whose KV has been computed, with the first generated
// token, ready to be handed to a decode engine (Engine.Resume, here or on
// another node after an export and import of its pages).
type Prefilled struct {
	// Seq holds exactly the prompt's KV: Seq.Len() == PromptTokens. It belongs
	// to the caller until Release, or until a successful Resume takes it.
	Seq          *kvcache.Sequence
	First        int32 // the first generated token, sampled with the request's params
	PromptTokens int
	// CachedTokens is how many prompt positions came from the tenant's prefix
	// cache (CachePrefix): Seq holds them as shared, read-only pages, which
	// export like any other.
	CachedTokens int
}

// Release frees the KV pages. It is idempotent. It must not be called after
// Seq was passed to a Resume that succeeded: the engine frees it then.
func (p *Prefilled) Release() {
	if p != nil && p.Seq != nil {
		p.Seq.Free()
	}
}

// Prefill runs req's prompt and samples its first token, then hands the KV to
// the caller instead of decoding. Admission is Submit's: an empty or
// out-of-vocabulary prompt, a missing tenant namespace, or a prompt plus
// max_tokens beyond the context window or the pool is refused before any KV
// is reserved (a *LengthError for the last two). The prompt runs through the
// scheduler like any other request, batched with the rest and prefilled in
// chunks; only len(req.Prompt) positions are reserved.
//
// Prefill blocks until the prompt has run. If the request fails, ctx is
// cancelled or the engine closes first, its pages are freed and the error is
// returned; a non-nil *Prefilled is returned only with a nil error.
func (e *Engine) Prefill(ctx context.Context, req Request) (*Prefilled, error) {
	// The context window counts the completion; this pool holds only the prompt.
	if err := e.check(req, false); err != nil {
		return nil, err
	}
	smp, err := sample.New(req.Sampling)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidRequest, err)
	}
	s := newSequence(ctx, e.model, req, smp)
	e.constrain(s)
	s.handoff = true
	if err := e.handBack(s, finishPrefilled); err != nil {
		return nil, err
	}
	p := &Prefilled{Seq: s.kv, First: s.first, PromptTokens: len(req.Prompt), CachedTokens: s.cached}
	if err := ctx.Err(); err != nil {
		p.Release()
		return nil, err
	}
	return p, nil
}

// handBack queues s, which ends keeping its KV for the caller (a Prefill or
// a Reserve), and waits for its one final event: the error it ended with,
// or nil once it ended with finish, s.kv then the caller's.
func (e *Engine) handBack(s *sequence, finish string) error {
	s.events = make(chan Event, 1) // only the final event
	if err := e.enqueue(s, nil); err != nil {
		return err
	}
	var last Event
	for ev := range s.events {
		last = ev
	}
	// The channel is closed after the scheduler's last touch of s.
	if last.Err != nil {
		return last.Err
	}
	if !last.Done || last.Finish != finish || s.kv == nil {
		panic(fmt.Sprintf("engine: broken invariant: a %s sequence ended with %+v", finish, last))
	}
	return nil
}

// NewSequenceFor reserves, all or nothing, the KV a Resume of req needs:
// len(req.Prompt)+req.MaxTokens positions in this engine's pool, owned by
// req.Owner. The caller fills it (ImportPage) and passes it to Resume, or
// frees it. req is admitted as Submit would admit it first.
func (e *Engine) NewSequenceFor(req Request) (*kvcache.Sequence, error) {
	if err := e.Broken(); err != nil {
		return nil, err
	}
	if err := e.check(req, true); err != nil {
		return nil, err
	}
	seq := e.kv.NewSequence(req.Owner)
	if err := seq.Reserve(len(req.Prompt) + req.MaxTokens); err != nil {
		return nil, fmt.Errorf("engine: reserving KV: %w", err)
	}
	return seq, nil
}

// Reserve is NewSequenceFor in the tenant's turn: the reservation waits in
// the engine's queue and is admitted fairly with the other requests (by
// virtual token counter), preempting sequences of tenants over their fair
// share to make room as admission does for any request. It takes no batch
// slot; Resume's sequence waits for one. Reserve blocks until the pages are
// reserved, ctx ends (then the error is ctx's) or the engine closes; a
// request that can never fit is refused at once, as Submit refuses it.
func (e *Engine) Reserve(ctx context.Context, req Request) (*kvcache.Sequence, error) {
	if err := e.check(req, true); err != nil {
		return nil, err
	}
	s := newSequence(ctx, e.model, req, nil)
	s.reservation = true
	if err := e.handBack(s, finishReserved); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		s.kv.Free()
		return nil, err
	}
	return s.kv, nil
}

// Resume continues a request whose prompt KV is already in seq, emitting
// first as its first token and decoding from there. The events are Submit's:
// first comes with its text, and an end-of-generation token, a stop sequence
// or max_tokens can end the request right there.
//
// seq must come from this engine's pool (NewSequenceFor), belong to
// req.Owner, hold exactly len(req.Prompt) positions at every layer and have
// room for req.MaxTokens more; first must be in the vocabulary. Otherwise, or
// when req itself is refused, Resume returns an error (ErrInvalidRequest for
// the sequence checks) before any token, and seq stays the caller's to free.
// Once Resume returns a channel the engine owns seq and frees it when the
// request ends, however it ends.
func (e *Engine) Resume(ctx context.Context, req Request, seq *kvcache.Sequence, first int32) (<-chan Event, error) {
	if err := e.check(req, true); err != nil {
		return nil, err
	}
	if err := e.checkResume(req, seq, first); err != nil {
		return nil, err
	}
	return e.resume(ctx, req, seq, first)
}

// Recompute continues a request from first, as Resume does, without the
// prompt's KV: the hand-over's pages are not used (the decode pool had no
// room for them while the sender held them). The request waits in the
// engine's queue and is admitted in its tenant's turn like any other; its
// prompt and first token are then computed here, into pages this engine
// reserves (as a preempted resumed sequence recomputes), and decoding goes on
// from there. Greedy output equals Resume's when both nodes run the same
// kernels. The events are Resume's; a refused req or a first outside the
// vocabulary is an error before any token.
func (e *Engine) Recompute(ctx context.Context, req Request, first int32) (<-chan Event, error) {
	if err := e.check(req, true); err != nil {
		return nil, err
	}
	if err := e.checkFirst(first); err != nil {
		return nil, err
	}
	return e.resume(ctx, req, nil, first)
}

// resume queues req to continue from first: from the prompt's KV in seq, or,
// with a nil seq, after recomputing the prompt and first here. req, seq
// and first have passed their checks.
func (e *Engine) resume(ctx context.Context, req Request, seq *kvcache.Sequence, first int32) (<-chan Event, error) {
	smp, err := sample.New(req.Sampling)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidRequest, err)
	}
	if req.Sampling.Temperature != 0 {
		// The prefill drew once from the same seeded generator to sample
		// first; draw once here too (a draw on a flat row, which changes
		// nothing else) so the rest of the stream matches an unsplit run.
		smp.Sample(make([]float32, e.model.Hyper.Vocab), nil)
	}
	s := newSequence(ctx, e.model, req, smp)
	e.constrain(s)
	if seq != nil {
		s.kv = seq
		s.prefilled = len(req.Prompt)
	}
	endedEarly := false
	err = e.enqueue(s, func() bool {
		s.accept(first)
		endedEarly = s.finished != ""
		if seq == nil {
			s.sched.refill = len(s.history) // the prompt and first, as after a preemption
		}
		return !endedEarly
	})
	if err != nil {
		return nil, err
	}
	if endedEarly {
		s.finish(Event{Done: true, Finish: s.finished})
	}
	return s.events, nil
}

// checkFirst refuses a first token outside the vocabulary.
func (e *Engine) checkFirst(first int32) error {
	if first < 0 || int(first) >= e.model.Hyper.Vocab {
		return fmt.Errorf("%w: first token %d outside vocabulary of %d", ErrInvalidRequest, first, e.model.Hyper.Vocab)
	}
	return nil
}

// checkResume refuses a sequence Resume cannot continue from.
func (e *Engine) checkResume(req Request, seq *kvcache.Sequence, first int32) error {
	n := len(req.Prompt)
	switch {
	case seq == nil:
		return fmt.Errorf("%w: no KV sequence", ErrInvalidRequest)
	case seq.Pool() != e.kv:
		return fmt.Errorf("%w: KV sequence is not from this engine's pool", ErrInvalidRequest)
	case seq.Owner() != req.Owner:
		return fmt.Errorf("%w: KV sequence belongs to %+v, request to %+v", ErrInvalidRequest, seq.Owner(), req.Owner)
	case seq.Cap() < n+req.MaxTokens:
		return fmt.Errorf("%w: KV sequence reserves %d positions, %d prompt + %d max tokens need %d",
			ErrInvalidRequest, seq.Cap(), n, req.MaxTokens, n+req.MaxTokens)
	}
	if err := e.checkFirst(first); err != nil {
		return err
	}
	for l := range e.model.Hyper.Layers {
		if w := seq.Written(l); w != n {
			return fmt.Errorf("%w: KV sequence holds %d positions at layer %d, the prompt has %d tokens",
				ErrInvalidRequest, w, l, n)
		}
	}
	return nil
}

package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bulkhead-ai/bulkhead/models/grammar"
	"github.com/bulkhead-ai/bulkhead/workers/kernels"
	"github.com/bulkhead-ai/bulkhead/workers/kvcache"
	"github.com/bulkhead-ai/bulkhead/workers/sample"
)

// Errors a request can end with.
var (
	ErrInvalidRequest = errors.New("engine: invalid request")
	ErrContextLength  = errors.New("engine: prompt and max_tokens exceed the context window")
	ErrExceedsPool    = errors.New("engine: request can never fit the KV pool")
	ErrQueueFull      = errors.New("engine: queue full")
	ErrClosed         = errors.New("engine: closed")
	// ErrBroken ends every request of an engine whose loop found a broken
	// invariant, and refuses every later one: the engine serves nothing more.
	ErrBroken = errors.New("engine: stopped after a broken invariant")
)

// LengthError says by how much a request exceeds a limit. It wraps
// ErrContextLength or ErrExceedsPool.
type LengthError struct {
	PromptTokens int
	MaxTokens    int
	Limit        int // the context window, or the pool's capacity in tokens
	kind         error
}

func (e *LengthError) Error() string {
	what := "context window"
	if e.kind == ErrExceedsPool {
		what = "KV pool capacity"
	}
	if e.MaxTokens == 0 { // a prefill holds only the prompt
		return fmt.Sprintf("%v: %d prompt tokens > %s of %d tokens", e.kind, e.PromptTokens, what, e.Limit)
	}
	return fmt.Sprintf("%v: %d prompt tokens + %d max tokens > %s of %d tokens",
		e.kind, e.PromptTokens, e.MaxTokens, what, e.Limit)
}

func (e *LengthError) Unwrap() error { return e.kind }

// Config sizes an engine. Zero values take the defaults noted.
type Config struct {
	Threads   int   // kernel threads; default all cores
	Context   int   // advertised context window; default the model's trained context
	KVPages   int   // KV pool size in pages; exactly one of KVPages, KVTokens, KVBytes
	KVTokens  int   // KV pool size in tokens (rounded up to whole pages)
	KVBytes   int64 // KV pool size as a memory budget
	PageSize  int   // tokens per KV page; default 16
	MaxBatch  int   // sequences in flight at once; default 16
	ChunkSize int   // prompt tokens per step across the batch (chunked prefill); default 256
	QueueSize int   // requests waiting for a slot; default 64; full → ErrQueueFull
	Poison    bool  // fill free KV pages with NaN (debug)
	Scrub     kvcache.ScrubMode
	// KVType is the element type of the KV cache: F16 (""), or Q8_0 or
	// Q4_0 (llama.cpp's -ctk/-ctv), which hold 1.88x or 3.56x the tokens
	// in the same memory; a quantized type needs a head size that is a
	// multiple of 32.
	KVType kvcache.DType

	// PrefillCost and DecodeCost weigh a prompt token computed and a token
	// generated in the tenants' virtual token counters (fair.go); default 1
	// each.
	PrefillCost, DecodeCost float64

	// Draft is the most tokens a decoding sequence drafts from its own
	// text (or its request's Prediction) and verifies in one step
	// (speculate.go); 0 means 8, negative turns speculation off.
	Draft int

	// OnStep, if set, is called by Run before each forward pass with the
	// number of sequences in the batch (for metrics). It must not block.
	OnStep func(batch int)

	// ClampContext serves a pool smaller than Context at the pool's size
	// (Engine.Context reports it) instead of refusing to start (fit.go).
	ClampContext bool

	// AllowSmallPool skips the start-up check that the pool can hold one request
	// at the full context window. Tests use it to show later checks hold alone.
	AllowSmallPool bool

	// HoldAt, when positive, stops every sequence after its HoldAt-th
	// generated token: it keeps its batch slot and its KV, computes nothing
	// more and ends only with its request (cancelled or past its deadline).
	// A request for at most HoldAt tokens is never held: it runs to its end.
	// Fault tests use it to keep an engine busy however fast it is (bulkhead
	// worker --fault-engine-hold-at, built with -tags faults); zero in the
	// shipped binary.
	HoldAt int
}

func (c *Config) fill(h Hyper) error {
	if c.Context == 0 {
		c.Context = h.Context
	}
	if c.PageSize == 0 {
		c.PageSize = 16
	}
	if c.MaxBatch == 0 {
		c.MaxBatch = 16
	}
	if c.ChunkSize == 0 {
		c.ChunkSize = 256
	}
	if c.QueueSize == 0 {
		c.QueueSize = 64
	}
	if c.Draft == 0 {
		c.Draft = defaultDraft
	}
	if c.PrefillCost == 0 {
		c.PrefillCost = 1
	}
	if c.DecodeCost == 0 {
		c.DecodeCost = 1
	}
	set := 0
	for _, on := range []bool{c.KVPages != 0, c.KVTokens != 0, c.KVBytes != 0} {
		if on {
			set++
		}
	}
	switch {
	case c.Threads < 0:
		return fmt.Errorf("%w: Threads %d", ErrConfig, c.Threads)
	case c.Context < 0:
		return fmt.Errorf("%w: Context %d", ErrConfig, c.Context)
	case c.PageSize < 0, c.MaxBatch < 0, c.ChunkSize < 0, c.QueueSize < 0, c.HoldAt < 0:
		return fmt.Errorf("%w: PageSize, MaxBatch, ChunkSize, QueueSize and HoldAt must not be negative", ErrConfig)
	case !(c.PrefillCost > 0 && c.DecodeCost > 0) || math.IsInf(c.PrefillCost, 0) || math.IsInf(c.DecodeCost, 0):
		return fmt.Errorf("%w: PrefillCost %v and DecodeCost %v must be finite and positive", ErrConfig, c.PrefillCost, c.DecodeCost)
	case c.KVPages < 0 || c.KVTokens < 0 || c.KVBytes < 0:
		return fmt.Errorf("%w: KV pool size is negative", ErrConfig)
	case set > 1:
		return fmt.Errorf("%w: set only one of KVPages, KVTokens, KVBytes", ErrConfig)
	}
	if set == 0 {
		c.KVTokens = c.Context // one full-context request
	}
	if c.KVTokens > 0 {
		c.KVPages = (c.KVTokens + c.PageSize - 1) / c.PageSize
	}
	return nil
}

// admitRetry is how often a loop with an empty batch and waiting requests
// looks again for pages freed outside the batch.
const admitRetry = 5 * time.Millisecond

// ErrConfig reports a configuration that cannot be served.
var ErrConfig = errors.New("engine: invalid config")

// Request is one generation job. Owner names the tenant namespace and request
// id; it comes from the verified caller, never from the request body.
type Request struct {
	Owner     kvcache.Owner
	Prompt    []int32 // token ids, with BOS if the model wants one
	MaxTokens int
	Sampling  sample.Params
	Stop      []string // stop sequences; the stop text is not returned
	// IgnoreEOS keeps generating past end-of-generation tokens (benchmarks).
	IgnoreEOS bool
	// CachePrefix opts the request in to its tenant's prefix cache: the
	// prompt's leading full pages are looked up in Owner.Namespace's cache
	// (for this model's weights) and reused when found, and once the prompt
	// is prefilled its full pages are published there for the namespace's
	// later requests. Without it the request neither reads nor publishes.
	// Like Owner, it is the verified caller's choice, carried in the job.
	CachePrefix bool
	// Grammar, if set, constrains the output (structured output): each step
	// samples only among the tokens that keep the text a prefix of the
	// grammar's language, end-of-generation only where it is complete, and
	// the sequence stops ("stop") once nothing more can follow.
	Grammar *grammar.Grammar
	// Logprobs puts each generated token's log-probability on its event,
	// with the TopLogprobs (0 to sample.MaxTopLogprobs) most likely tokens,
	// from the logits the sampler used (sample.Sampler.Logprobs).
	Logprobs    bool
	TopLogprobs int
	// Prediction is the output the client expects, as tokens (OpenAI's
	// predicted outputs): decoding drafts from it as from the sequence's
	// own text (speculate.go). It changes how fast the output comes, never
	// the output.
	Prediction []int32
	// NoSpeculation turns drafting off for this request.
	NoSpeculation bool
	// Weight is the request's share in fair scheduling between tenants,
	// from the verified caller's tenant class; 0 means 1. A tenant's
	// counter grows by its service divided by the weight of its latest
	// request, so weight 2 gets twice the tokens of weight 1 when both
	// saturate the engine.
	Weight float64
	// Adapter, if set, applies a LoRA adapter bound to this engine's model
	// to the request: its KV is its own (the prefix cache keys it by
	// Adapter.Key). Like Owner, the caller resolves it for the verified
	// tenant only.
	Adapter *Adapter
}

// Event is one item on a request's stream: a token, or the final event (Done
// set) carrying the finish reason and usage, or Err if the request failed.
type Event struct {
	Token  int32
	Text   string // text that became safe to emit with this token (may be empty)
	Done   bool
	Finish string // "stop" (EOS or stop sequence) or "length"
	Usage  Usage
	Err    error
	// Logprob is the token's log-probability and Top the most likely
	// tokens at its step, when the request asked (Request.Logprobs).
	Logprob *Logprob
}

// Logprob is one generated token's log-probability and the top alternatives.
type Logprob struct {
	Logprob float32
	Top     []sample.TokenLogprob
}

// Usage counts a request's tokens.
type Usage struct {
	PromptTokens     int
	CompletionTokens int
	// CachedTokens is how many of the PromptTokens came from the tenant's
	// prefix cache instead of being computed (0 without CachePrefix).
	CachedTokens int
	// DraftedTokens counts the tokens speculative decoding drafted and
	// verified, AcceptedTokens those verification kept (each is also one of
	// the CompletionTokens).
	DraftedTokens, AcceptedTokens int
	// AcceptedPrediction counts the Request.Prediction tokens the output
	// kept (where drafting followed the prediction through the output; 0
	// with NoSpeculation), RejectedPrediction the rest of the prediction.
	AcceptedPrediction, RejectedPrediction int
}

// Engine schedules requests for one model with continuous batching.
type Engine struct {
	model *Model
	cfg   Config
	log   *slog.Logger
	pool  *kernels.Pool
	kv    *kvcache.Pool
	fw    *forward

	// mu guards waiting, requeued and closed. Lock order: mu, then fair.mu,
	// then the KV pool's own lock (admit reserves and frees KV with mu
	// held); nothing takes mu while holding either.
	mu       sync.Mutex
	waiting  []*sequence
	requeued int // of waiting, sequences preempted (not counted against QueueSize)
	closed   bool
	fair     *fairness
	wake     chan struct{} // capacity 1: a request arrived or the engine closed

	// broken is set once, when Run recovered a panic (a broken invariant):
	// the engine then refuses every request with it (see Broken).
	broken atomic.Pointer[error]

	done chan struct{} // closed when Run returns

	running atomic.Int64 // sequences in the batch, as of Run's last admit or step

	vocabOnce sync.Once
	vocab     *grammar.Vocab // the tokenizer's trie for constrained decoding, built on first use

	// step's buffers, owned by Run's goroutine.
	chunkBuf []chunk
	chunks   []*chunk
	owners   []*sequence
	cost     draftCost // what a drafted row costs (speculate.go)
}

// New builds an engine for a loaded model. A KV pool that cannot hold one
// request at the advertised context window is refused with a *PoolError, or
// with cfg.ClampContext served at the pool's size.
func New(log *slog.Logger, m *Model, cfg Config) (*Engine, error) {
	if err := cfg.fill(m.Hyper); err != nil {
		return nil, err
	}
	if err := kernels.CheckKernels(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	kv, err := kvcache.New(kvcache.Config{
		Layers: m.Hyper.Layers, KVHeads: m.Hyper.KVHeads, HeadDim: m.Hyper.HeadDim,
		PageSize: cfg.PageSize, Pages: cfg.KVPages, MemoryBytes: cfg.KVBytes,
		Poison: cfg.Poison, Scrub: cfg.Scrub, Kernels: m.kernels, DType: cfg.KVType,
	})
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	if !cfg.AllowSmallPool {
		if cfg.Context, err = fitContext(kv.TotalPages(), kv.PageSize(), cfg.Context, cfg.ClampContext); err != nil {
			return nil, err
		}
	}
	pool := kernels.NewPool(cfg.Threads)
	log.Info("engine kernels", "kernels", m.kernels.String(), "amx", kernels.AMX(), "threads", pool.Threads())
	e := &Engine{
		model: m, cfg: cfg, log: log, pool: pool, kv: kv,
		fw:   newForward(m, pool, kvRotation(kv.Config().DType, m.Hyper.HeadDim)),
		wake: make(chan struct{}, 1),
		done: make(chan struct{}),
		fair: newFairness(cfg),
	}
	return e, nil
}

// Model returns the engine's model.
func (e *Engine) Model() *Model { return e.model }

// Context returns the advertised context window.
func (e *Engine) Context() int { return e.cfg.Context }

// KV returns the engine's KV pool (for accounting and tests).
func (e *Engine) KV() *kvcache.Pool { return e.kv }

// Submit validates a request and queues it. Events arrive on the returned
// channel, which is closed after the final event. Cancelling ctx ends the
// request at the next step with ctx's error.
func (e *Engine) Submit(ctx context.Context, req Request) (<-chan Event, error) {
	if err := e.check(req, true); err != nil {
		return nil, err
	}
	smp, err := sample.New(req.Sampling)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidRequest, err)
	}
	s := newSequence(ctx, e.model, req, smp)
	e.constrain(s)
	if err := e.enqueue(s, nil); err != nil {
		return nil, err
	}
	return s.events, nil
}

// enqueue appends s to the wait queue, or refuses it when the engine is
// closed or the queue is full. ready, if not nil, runs with the lock held once
// s is known to be accepted and before the scheduler can see it; when it
// reports false, s is not queued (it has ended already) and enqueue still
// returns nil.
func (e *Engine) enqueue(s *sequence, ready func() bool) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	var refused error
	switch {
	case e.Broken() != nil:
		refused = e.Broken()
	case e.closed:
		refused = ErrClosed
	case len(e.waiting)-e.requeued >= e.cfg.QueueSize:
		refused = ErrQueueFull
	}
	if refused != nil {
		s.unwatch() // never queued: nothing will finish it
		return refused
	}
	if ready != nil && !ready() {
		return nil
	}
	e.waiting = append(e.waiting, s)
	select {
	case e.wake <- struct{}{}:
	default:
	}
	return nil
}

// check refuses what can never be served, before anything is queued.
// holdsCompletion says whether this engine will hold the completion's KV too
// (false for a prefill that hands the prompt's KV over).
func (e *Engine) check(req Request, holdsCompletion bool) error {
	n := len(req.Prompt)
	switch {
	case n == 0:
		return fmt.Errorf("%w: empty prompt", ErrInvalidRequest)
	case req.Owner.Namespace == "":
		return fmt.Errorf("%w: no tenant namespace", ErrInvalidRequest)
	case req.MaxTokens < 1:
		return fmt.Errorf("%w: max_tokens %d < 1", ErrInvalidRequest, req.MaxTokens)
	case req.Adapter != nil && req.Adapter.model != e.model:
		return fmt.Errorf("%w: the adapter is bound to another model", ErrInvalidRequest)
	}
	if err := checkWeight(req.Weight); err != nil {
		return err
	}
	for _, ids := range [][]int32{req.Prompt, req.Prediction} {
		for _, t := range ids {
			if t < 0 || int(t) >= e.model.Hyper.Vocab {
				return fmt.Errorf("%w: token id %d outside vocabulary of %d", ErrInvalidRequest, t, e.model.Hyper.Vocab)
			}
		}
	}
	if n+req.MaxTokens > e.cfg.Context {
		return &LengthError{PromptTokens: n, MaxTokens: req.MaxTokens, Limit: e.cfg.Context, kind: ErrContextLength}
	}
	need, completion := n, 0
	if holdsCompletion {
		need, completion = n+req.MaxTokens, req.MaxTokens
	}
	if capTokens := e.kv.TotalPages() * e.kv.PageSize(); need > capTokens {
		return &LengthError{PromptTokens: n, MaxTokens: completion, Limit: capTokens, kind: ErrExceedsPool}
	}
	return nil
}

// Close stops accepting requests; Run finishes the ones in flight with
// ErrClosed and returns. Close is idempotent.
func (e *Engine) Close() {
	e.mu.Lock()
	if !e.closed {
		e.closed = true
		select {
		case e.wake <- struct{}{}:
		default:
		}
	}
	e.mu.Unlock()
}

// Run executes the scheduling loop until ctx is done or Close is called. Every
// request still waiting or running then ends with an error event.
//
// A panic in the loop is a broken invariant (a KV page table that no longer
// adds up, say): Run recovers it, ends every request waiting or running with
// an error wrapping ErrBroken, leaves the KV pool untouched from then on,
// refuses every later request (Broken) and returns that error. The process
// lives on; whoever runs the engine reports it not ready.
func (e *Engine) Run(ctx context.Context) (err error) {
	defer close(e.done)
	defer e.pool.Close()
	var active []*sequence
	defer func() {
		if r := recover(); r != nil {
			err = e.breakDown(r, active)
			return
		}
		for _, s := range active {
			s.finish(Event{Err: ErrClosed})
		}
		e.mu.Lock()
		w := e.waiting
		e.waiting, e.requeued = nil, 0
		e.closed = true
		e.mu.Unlock()
		for _, s := range w {
			s.finish(Event{Err: ErrClosed})
		}
	}()
	for {
		active = e.admit(active)
		e.running.Store(int64(len(active)))
		if len(active) == 0 {
			e.mu.Lock()
			closed, blocked := e.closed, len(e.waiting) > 0
			e.mu.Unlock()
			if closed {
				return nil
			}
			// Requests waiting with an empty batch wait for pages held outside
			// it (prefilled sequences being handed over, imported ones not yet
			// resumed); those are freed without a word to this loop, so look
			// again shortly.
			var retry <-chan time.Time
			if blocked {
				retry = time.After(admitRetry)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-e.wake:
			case <-retry:
			}
			continue
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		e.mu.Lock()
		closed := e.closed
		e.mu.Unlock()
		if closed {
			return nil
		}
		if e.cfg.OnStep != nil {
			e.cfg.OnStep(len(active))
		}
		active = e.step(active)
		e.running.Store(int64(len(active)))
	}
}

// Broken returns nil while the engine is sound, and once Run recovered a
// panic the error (wrapping ErrBroken) that it ended every request with.
func (e *Engine) Broken() error {
	if err := e.broken.Load(); err != nil {
		return *err
	}
	return nil
}

// breakDown is Run's recovery from panic r: it marks the engine broken and
// closed and ends every sequence, the batch's (active) and the waiting ones,
// with the error, without freeing their KV (a pool whose invariants broke is
// not used again). A sequence is always in the batch or waiting between
// steps, so none is left without its final event.
func (e *Engine) breakDown(r any, active []*sequence) error {
	err := fmt.Errorf("%w: %v", ErrBroken, r)
	e.broken.Store(&err)
	e.log.Error("engine: a broken invariant; ending every request and serving no more",
		"panic", fmt.Sprint(r), "stack", string(debug.Stack()))
	e.mu.Lock()
	waiting := e.waiting
	e.waiting, e.closed = nil, true
	e.mu.Unlock()
	for _, s := range slices.Concat(active, waiting) {
		s.kv = nil
		s.finish(Event{Err: err})
	}
	e.running.Store(0)
	return err
}

// reserve allocates s's KV, all or nothing. With CachePrefix it starts from
// the longest run of the prompt's full pages that the tenant's cache holds
// for this model, never including the page of the last prompt token (that
// token must be computed to get the first logits), and prefill then starts
// after the cached positions.
func (e *Engine) reserve(s *sequence) (*kvcache.Sequence, error) {
	kv := e.kv.NewSequence(s.req.Owner)
	if !s.req.CachePrefix {
		if err := kv.Reserve(s.reserve()); err != nil {
			kv.Free()
			return nil, err
		}
		return kv, nil
	}
	ps := e.kv.PageSize()
	n := len(s.req.Prompt)
	cached, err := kv.AttachPrefix(cacheModel(e.model, s.req.Adapter), s.req.Prompt[:(n-1)/ps*ps], s.reserve())
	if err != nil {
		kv.Free()
		return nil, err
	}
	s.prefilled = cached
	if s.sched.preempts == 0 { // usage counts the first admission's hits
		s.cached = cached
	}
	return kv, nil
}

// publish offers the prompt's full pages to the tenant's prefix cache once
// they are all written. A failure costs only future hits: it is logged.
func (e *Engine) publish(s *sequence) {
	ps := e.kv.PageSize()
	n := len(s.req.Prompt)
	if _, err := s.kv.PublishPrefix(cacheModel(e.model, s.req.Adapter), s.req.Prompt[:n/ps*ps]); err != nil {
		e.log.Warn("prefix cache publish failed", "request", s.req.Owner.Request, "err", err)
	}
}

// step runs one forward pass over the batch: decoding sequences contribute their
// last token (and their drafts), prefilling ones a chunk of prompt within the
// step's token budget.
func (e *Engine) step(active []*sequence) []*sequence {
	// The step's chunks live in buffers reused from step to step (Run's
	// goroutine owns them), so a decode step allocates nothing.
	if cap(e.chunkBuf) < len(active) {
		e.chunkBuf = make([]chunk, len(active))
		e.chunks = make([]*chunk, 0, len(active))
		e.owners = make([]*sequence, 0, len(active))
	}
	p := e.plan(active)
	defer func() {
		clear(e.chunkBuf[:len(p.chunks)])
		clear(p.chunks)
		clear(p.owners)
	}()
	var logits [][]float32
	switch {
	case len(p.chunks) > 0:
		start := time.Now()
		logits = e.fw.run(p.chunks)
		if !p.prefilling {
			e.cost.observe(len(p.chunks), p.rows, time.Since(start).Seconds())
		}
	case p.held > 0:
		// Every sequence is held (HoldAt): wait a little for a cancel or
		// a new request instead of spinning.
		time.Sleep(time.Millisecond)
	}
	e.apply(p, logits)
	return e.sweep(active)
}

// stepPlan is what one step computes: a chunk per sequence that takes
// part (owners[i] is chunks[i]'s), how many were held, whether any
// prefills, and its rows when it only decodes.
type stepPlan struct {
	chunks     []*chunk
	owners     []*sequence
	held       int
	prefilling bool
	rows       int // decode rows and drafts
}

// plan builds the step's chunks: a prompt chunk for a prefilling sequence
// within the step's token budget, the last token and its drafts for a
// decoding one.
func (e *Engine) plan(active []*sequence) stepPlan {
	p := stepPlan{chunks: e.chunks[:0], owners: e.owners[:0]}
	budget := e.cfg.ChunkSize
	decoding := 0
	for _, s := range active {
		if s.cancelErr() == nil && !e.holds(s) && s.prefilled >= s.target() {
			decoding++
		}
	}
	room := stepDraftRows - decoding // drafts this step may still add
	cost := e.cost.ratio(decoding)
	for _, s := range active {
		if s.cancelErr() != nil {
			continue
		}
		if e.holds(s) {
			p.held++
			continue
		}
		c := &e.chunkBuf[len(p.chunks)]
		if target := s.target(); s.prefilled < target {
			if budget <= 0 {
				continue
			}
			n := min(budget, target-s.prefilled)
			budget -= n
			*c = chunk{seq: s.kv, tokens: s.history[s.prefilled : s.prefilled+n], pos0: s.prefilled, adapter: s.req.Adapter}
			c.logits = s.prefilled+n == target
			p.prefilling = true
		} else {
			toks := s.draft(e.draftLimit(s, room), decoding, cost)
			room -= len(toks) - 1
			p.rows += len(toks)
			*c = chunk{seq: s.kv, tokens: toks, pos0: len(s.history) - 1, logits: true, every: len(toks) > 1, adapter: s.req.Adapter}
		}
		p.chunks = append(p.chunks, c)
		p.owners = append(p.owners, s)
	}
	return p
}

// apply takes the step's results: prompt progress (and the prefix cache's
// publication), then each chunk's logits: a Prefill's first token, a
// draft's verification, or the next token.
func (e *Engine) apply(p stepPlan, logits [][]float32) {
	li := 0
	for i, c := range p.chunks {
		s := p.owners[i]
		if c.err != nil {
			s.failed = c.err
			continue
		}
		if s.prefilled < s.target() {
			s.prefilled += len(c.tokens)
			if s.prefilled >= len(s.req.Prompt) && s.req.CachePrefix && !s.sched.published {
				s.sched.published = true
				e.publish(s)
			}
		}
		switch {
		case !c.logits:
		case s.handoff:
			s.first = s.pick(logits[li])
			s.finished = finishPrefilled
			li++
		case c.every:
			e.verify(s, c, logits[li:li+len(c.tokens)])
			li += len(c.tokens)
		default:
			g := s.generated
			s.next(logits[li])
			e.fair.decoded(s, s.generated-g)
			li++
		}
	}
}

// sweep drops finished, failed and cancelled sequences from active,
// freeing their pages, and returns the rest.
func (e *Engine) sweep(active []*sequence) []*sequence {
	kept := active[:0]
	for _, s := range active {
		switch {
		case s.failed != nil:
			e.log.Warn("sequence failed", "request", s.req.Owner.Request, "err", s.failed)
			s.finish(Event{Err: s.failed})
		case s.cancelErr() != nil:
			s.finish(Event{Err: s.cancelErr()})
		case s.finished != "":
			s.finish(Event{Done: true, Finish: s.finished})
		default:
			kept = append(kept, s)
		}
	}
	clear(active[len(kept):])
	return kept
}

// holds reports whether s is held by Config.HoldAt (fault tests).
func (e *Engine) holds(s *sequence) bool {
	return e.cfg.HoldAt > 0 && s.generated >= e.cfg.HoldAt && s.finished == ""
}

// Stats is a snapshot of an engine's scheduler, for metrics and fleet status.
type Stats struct {
	Running int // sequences in the batch
	Waiting int // requests queued for a batch slot
}

// Stats returns the scheduler's current figures.
func (e *Engine) Stats() Stats {
	e.mu.Lock()
	waiting := len(e.waiting)
	e.mu.Unlock()
	return Stats{Running: int(e.running.Load()), Waiting: waiting}
}

// MaxBatch returns the most sequences the engine runs at once.
func (e *Engine) MaxBatch() int { return e.cfg.MaxBatch }

// Threads returns the number of kernel threads.
func (e *Engine) Threads() int { return e.pool.Threads() }

// Kernels names the kernel set the engine computes with: its model's.
func (e *Engine) Kernels() string { return e.model.kernels.String() }

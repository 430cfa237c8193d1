package edge

import (
	"context"
	"fmt"
	"net/http"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/bulkhead-ai/bulkhead/edge/auth"
	"github.com/bulkhead-ai/bulkhead/edge/quota"
	"github.com/bulkhead-ai/bulkhead/queue"
)

// MaxChoices bounds OpenAI's n: how many choices one request samples.
const MaxChoices = 8

// A request with n above 1 runs as n jobs, one a choice, as vLLM fans a
// request out into child requests: the same prompt, choice i sampled with
// seed + i (seed is the request's, 0 when it gave none), each reported on
// its choice so that a request with n 1 and that seed samples the same
// tokens. Choice 0 is queued first; the others once its first token
// arrived, by then its prefill has published the prompt's full pages in the
// tenant's prefix cache, and the same session routes every choice to the
// same worker, so they attach those pages and compute only the tail. The
// others are routed only then, too: an edge that routed choice 0 to the
// shared queue (it knew fewer than two workers, just started) routes them
// by what it knows by then, the prompt's prefix announced by the worker
// that took choice 0 among it. Each
// choice is a job of its own to the queue, the quota and billing: its
// concurrency slot, its reservation, its usage event and charge. The answer
// carries every choice, in index order, with their usage summed. Each
// choice renders through a format of its own, so that with tools in play
// each choice's output is parsed for calls apart from the others' (OpenAI
// samples each choice's calls independently too).

// choicesFormat renders an answer of several choices.
type choicesFormat interface {
	format
	// choice is res as one choice of a whole answer, or the error that
	// fails the request (a tool_choice it did not follow).
	choice(res *result) (any, error)
	// writeChoices answers with choices, res giving the head and usage.
	writeChoices(w http.ResponseWriter, res *result, choices []any)
	// streamFinish sends the chunk that ends one choice of a stream.
	streamFinish(sw *sse, res *result) error
	// streamClose ends the stream: res's usage when asked, then [DONE].
	streamClose(sw *sse, res *result) error
}

// checkChoices refuses n above 1 where the answer's format cannot carry
// several choices.
func checkChoices(in *genInput, f format) error {
	if in.n <= 1 {
		return nil
	}
	if _, ok := f.(choicesFormat); !ok {
		return &InputError{Field: "n", Msg: "must be 1 on this API"}
	}
	return nil
}

// choiceID is the job id of choice i of request id.
func choiceID(id string, i int) string {
	if i == 0 {
		return id
	}
	return fmt.Sprintf("%s-c%d", id, i)
}

// choiceGroup is what the choices of one request share.
type choiceGroup struct {
	f       choicesFormat      // the answer's head, end and errors: choice 0's
	fs      []choicesFormat    // each choice's own, by index: its text and calls
	stop    context.CancelFunc // ends every choice's relay
	session string             // routes every choice's job (sessionOf)

	first     chan struct{} // closed at choice 0's first token
	firstOnce sync.Once

	mu  sync.Mutex
	sw  *sse  // the stream, once a first frame started it
	err error // the first failure: it ends the whole request
}

// started says choice 0's first token arrived: its prompt is prefilled.
func (g *choiceGroup) started() { g.firstOnce.Do(func() { close(g.first) }) }

// begin starts the stream (at the first frame of any choice) and rep's
// choice in it; it reports false once the request failed.
func (g *choiceGroup) begin(rep *replyStream) bool {
	if g.err != nil {
		return false
	}
	if g.sw == nil {
		g.sw = startSSE(rep.w)
	}
	if !rep.begun {
		rep.begun = true
		if err := g.fs[rep.index].streamBegin(g.sw, rep.res); err != nil {
			g.failLocked(err)
			return false
		}
	}
	return true
}

// streamText sends one choice's text.
func (g *choiceGroup) streamText(rep *replyStream, text string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.begin(rep) {
		return false
	}
	if text == "" {
		return true
	}
	if err := g.fs[rep.index].streamText(g.sw, rep.res, text); err != nil {
		g.failLocked(err)
		return false
	}
	return true
}

// finish ends one choice: its last chunk when streaming (the answer is
// written when all have ended).
func (g *choiceGroup) finish(rep *replyStream) {
	if !rep.c.in.stream {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.begin(rep) {
		if err := g.fs[rep.index].streamFinish(g.sw, rep.res); err != nil {
			g.failLocked(err)
		}
	}
}

// fail ends the request with err, the first failure of any choice.
func (g *choiceGroup) fail(err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.failLocked(err)
}

func (g *choiceGroup) failLocked(err error) {
	if g.err == nil {
		g.err = err
		g.stop()
	}
}

// generateChoices is generate for a request with n above 1 (c.in.n): n
// jobs, one a choice, their replies rendered as one answer by formats, one
// a choice.
func (s *Server) generateChoices(w http.ResponseWriter, r *http.Request, c call, formats []choicesFormat) {
	n := c.in.n
	ri := infoOf(r)
	ri.model = c.m.Name
	ids := make([]string, n)
	for i := range ids {
		ids[i] = choiceID(ri.id, i)
	}
	releases, err := s.acquireChoices(r, c.p, ids)
	if err != nil {
		c.f.writeError(w, s.refuse(r, err))
		return
	}
	reps := make([]*replyStream, n)
	defer func() {
		for i, release := range releases {
			var used quota.Usage // zero unless the choice completed
			if reps[i] != nil {  // nil if refused at admission
				used = reps[i].used
			}
			release(used)
		}
	}()
	a, err := s.admitChoices(r, c, ids)
	if err != nil {
		c.f.writeError(w, s.refuse(r, err))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.RequestTimeout+replyGrace)
	defer cancel()
	gctx, stop := context.WithCancel(ctx)
	defer stop()
	g := &choiceGroup{f: formats[0], fs: formats, stop: stop, first: make(chan struct{})}
	jobs := make([]*queue.Job, n)
	for i := range n {
		in := *c.in
		in.sampling.Seed = c.in.sampling.Seed + uint64(i)
		if in.cacheKey == "" {
			in.cacheKey = ri.id // one session: every choice to the worker holding the prompt
		}
		cc := c
		cc.in, cc.f = &in, formats[i]
		jobs[i] = s.buildJob(ids[i], c.p, c.m, a, &in, r)
		reps[i] = &replyStream{s: s, w: w, r: r, c: cc, group: g, index: i, seed: in.sampling.Seed}
		g.session = sessionOf(r, &in) // the same for every choice
	}
	submitted := s.submitChoices(ctx, gctx, c, g, jobs, reps)
	defer s.cancelUnfinished(r.Context(), ids[:submitted], reps[:submitted])
	s.answerChoices(w, r, g, reps)
}

// admitChoices admits c's prompt once and reserves the quota of every
// choice's job (ids) for it.
func (s *Server) admitChoices(r *http.Request, c call, ids []string) (admitted, error) {
	_, aspan := s.startSpan(r.Context(), spanAdmission)
	a, err := c.v.admit(r.Context(), c.in, c.m.ContextWindow, c.defaultMax)
	if err == nil {
		aspan.SetAttributes(queue.AttrInTokens.Int(a.tokens), queue.AttrMaxTokens.Int(a.maxTokens))
		as := make([]admitted, len(ids))
		for i := range as {
			as[i] = a
		}
		err = s.reserve(r.Context(), c.p, c.m, ids, as)
	}
	endSpan(aspan, err)
	return a, err
}

// submitChoices routes and submits the choices' jobs, the others once
// choice 0's prompt is prefilled, and relays each one's replies into reps
// under gctx. It returns once every relay has ended, with how many jobs it
// submitted (the first ones): it stops at a failure or when gctx ends.
func (s *Server) submitChoices(ctx, gctx context.Context, c call, g *choiceGroup, jobs []*queue.Job, reps []*replyStream) int {
	var wg sync.WaitGroup
	defer wg.Wait()
	for i := range jobs {
		if i == 1 {
			// The others wait for choice 0's prompt to be prefilled.
			select {
			case <-g.first:
			case <-gctx.Done():
			}
		}
		if gctx.Err() != nil {
			return i
		}
		s.route(jobs[i], g.session)
		replies, err := s.submitChoice(ctx, c, jobs[i])
		if err != nil {
			g.fail(err)
			return i
		}
		wg.Go(func() {
			defer replies.Close()
			reps[i].relay(gctx, replies)
			if i == 0 && !reps[0].finished {
				g.fail(ErrBrokenStream) // ended before any token: nothing to wait for
			}
		})
	}
	return len(jobs)
}

// cancelUnfinished cancels the jobs (ids) whose replies (reps) did not
// finish.
func (s *Server) cancelUnfinished(ctx context.Context, ids []string, reps []*replyStream) {
	for i, rep := range reps {
		if !rep.finished {
			if err := s.cancel(ctx, ids[i]); err != nil {
				s.log.Warn("edge: cancel", "id", ids[i], "error", err)
			}
		}
	}
}

// acquireChoices takes a concurrency slot for each choice's job, all or
// none.
func (s *Server) acquireChoices(r *http.Request, p auth.Principal, ids []string) ([]func(quota.Usage), error) {
	_, qspan := s.startSpan(r.Context(), spanQuota)
	var releases []func(quota.Usage)
	var err error
	for _, id := range ids {
		var release func(quota.Usage)
		if release, err = s.acquireSync(r.Context(), p, id); err != nil {
			break
		}
		releases = append(releases, release)
	}
	endSpan(qspan, err)
	if err != nil {
		for _, release := range releases {
			release(quota.Usage{})
		}
		return nil, err
	}
	return releases, nil
}

// submitChoice queues one choice's job.
func (s *Server) submitChoice(ctx context.Context, c call, job *queue.Job) (*queue.Replies, error) {
	ectx, espan := s.startSpan(ctx, spanEnqueue, trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(attribute.String("messaging.system", "nats"),
			attribute.String("messaging.destination.name", queue.JobSubject(c.m.Name))))
	replies, err := s.cfg.Queue.Submit(ectx, job)
	endSpan(espan, err)
	return replies, err
}

// answerChoices writes the answer once every choice ended: the first
// failure, or every choice with the usage summed.
func (s *Server) answerChoices(w http.ResponseWriter, r *http.Request, g *choiceGroup, reps []*replyStream) {
	if r.Context().Err() != nil {
		return // the client is gone (or the edge's drain ran out): nothing to answer
	}
	head := &result{id: infoOf(r).id, model: reps[0].c.m.Name}
	var choices []any
	for i, rep := range reps {
		if rep.res == nil || !rep.finished || rep.err != nil {
			if g.err == nil {
				g.err = ErrBrokenStream
			}
			break
		}
		if i == 0 {
			head.created = rep.res.created
		}
		u := rep.res.usage
		head.usage.PromptTokens += u.PromptTokens
		head.usage.CompletionTokens += u.CompletionTokens
		head.usage.CachedTokens += u.CachedTokens
		head.usage.AcceptedPrediction += u.AcceptedPrediction
		head.usage.RejectedPrediction += u.RejectedPrediction
		if rep.c.in.stream {
			continue // streamed: each choice was sent and checked as it came
		}
		c, err := g.fs[i].choice(rep.res)
		if err != nil {
			g.err = err
			break
		}
		choices = append(choices, c)
	}
	if g.err != nil {
		e := s.refuse(r, g.err)
		if g.sw == nil {
			g.f.writeError(w, e)
		} else {
			_ = g.f.streamError(g.sw, e)
		}
		return
	}
	infoOf(r).span.SetAttributes(queue.AttrInTokens.Int(head.usage.PromptTokens), queue.AttrOutTokens.Int(head.usage.CompletionTokens))
	if g.sw != nil {
		_ = g.f.streamClose(g.sw, head)
		return
	}
	g.f.writeChoices(w, head, choices)
}

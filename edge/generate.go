package edge

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/bulkhead-ai/bulkhead/edge/auth"
	"github.com/bulkhead-ai/bulkhead/edge/quota"
	"github.com/bulkhead-ai/bulkhead/models/catalog"
	"github.com/bulkhead-ai/bulkhead/queue"
)

// result is a finished generation.
type result struct {
	id      string // request id
	model   string
	created int64
	text    string
	finish  string // "stop" or "length"
	usage   queue.Usage

	logprobs *logprobTrack // nil unless the request asked (logprobs.go)

	// index is the choice's index and seed its sampling seed, reported
	// when the request asked for several (OpenAI's n, choices.go).
	index int
	seed  *uint64
}

// format renders one API's responses: whole JSON answers, errors, and the
// events of a stream.
type format interface {
	writeError(w http.ResponseWriter, e *Error)
	writeResult(w http.ResponseWriter, res *result)
	streamBegin(sw *sse, res *result) error
	streamText(sw *sse, res *result, text string) error
	streamEnd(sw *sse, res *result) error // ends with data: [DONE]
	streamError(sw *sse, e *Error) error  // no [DONE] follows
}

// sse writes server-sent events, flushing each; the choices of one
// request (choices.go) write through one, so it serializes its writes.
type sse struct {
	mu sync.Mutex
	w  http.ResponseWriter
	rc *http.ResponseController
}

func startSSE(w http.ResponseWriter) *sse {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	return &sse{w: w, rc: http.NewResponseController(w)}
}

// send writes one event: an optional event name and one data line.
func (s *sse) send(event string, data []byte) error {
	var b []byte
	if event != "" {
		b = append(b, "event: "...)
		b = append(b, event...)
		b = append(b, '\n')
	}
	b = append(b, "data: "...)
	b = append(b, data...)
	b = append(b, "\n\n"...)
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := s.w.Write(b); err != nil {
		return err
	}
	return s.rc.Flush()
}

func (s *sse) json(event string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return s.send(event, b)
}

func (s *sse) done() error { return s.send("", []byte("[DONE]")) }

// refuse logs a refusal's cause, counts it, and returns its table row
// naming the request.
func (s *Server) refuse(r *http.Request, err error) *Error {
	c := *Classify(err)
	e := &c
	ri := infoOf(r)
	e.RequestID = ri.id
	ri.code = e.Row.Code
	s.cfg.Metrics.refused(e, err)
	lvl := slog.LevelDebug
	if e.Row.Status >= 500 {
		lvl = slog.LevelError
	}
	s.log.Log(r.Context(), lvl, "edge: request refused", "request_id", ri.id, "path", r.URL.Path, "code", e.Row.Code, "error", err)
	return e
}

// newJob builds the job for an admitted request and routes it (route).
func (s *Server) newJob(id string, p auth.Principal, m *catalog.Model, a admitted, in *genInput, r *http.Request) *queue.Job {
	job := s.buildJob(id, p, m, a, in, r)
	s.route(job, sessionOf(r, in))
	return job
}

// buildJob builds the job for an admitted request, not yet routed. The
// tenant, which is also the prefix cache's namespace, is the verified
// principal's. The job uses the cache unless the body opted out or the
// tenant's class keeps it out.
func (s *Server) buildJob(id string, p auth.Principal, m *catalog.Model, a admitted, in *genInput, r *http.Request) *queue.Job {
	class := s.class(p.Tenant)
	job := &queue.Job{
		ID:           id,
		Tenant:       p.Tenant,
		Key:          p.Key,
		Model:        m.Name,
		Prompt:       a.prompt,
		Segments:     a.segments,
		ParseSpecial: a.parseSpecial,
		AddBOS:       a.addBOS,
		PromptTokens: a.tokens,
		MaxTokens:    a.maxTokens,
		Sampling:     in.sampling,
		Stop:         in.stop,
		RejectIfBusy: in.rejectIfBusy || r.URL.Query().Get("rejectIfBusy") == "true",
		CachePrefix:  in.cachePrefix && !class.PrefixCacheOff,
		Reply:        queue.ReplySubject(id),
		Deadline:     time.Now().Add(s.cfg.RequestTimeout),
		Rates:        jobRates(m),
		Grammar:      in.grammar,
		Logprobs:     in.logprobs,
		TopLogprobs:  in.topLogprobs,
		LogitBias:    in.logitBias,
		Metadata:     in.metadata,
		User:         in.user,
		Weight:       class.Weight,
		Prediction:   in.prediction,
		NoDraft:      in.noDraft,
		LoRA:         in.adapter,
	}
	if span := infoOf(r).span; len(in.metadata) > 0 && span.IsRecording() {
		span.SetAttributes(queue.MetadataAttributes(in.metadata)...) // sorted and allocated only when traced
	}
	return job
}

// sessionOf is the request's session for routing: its x-session-affinity
// header, else its prompt_cache_key.
func sessionOf(r *http.Request, in *genInput) string {
	if session := r.Header.Get(SessionHeader); session != "" {
		return session
	}
	return in.cacheKey
}

// SessionHeader names a conversation, so that its jobs go to the worker
// that holds its KV (Workers AI's header; scoped to the tenant). OpenAI's
// prompt_cache_key in the body does the same where the header is absent.
const SessionHeader = "x-session-affinity"

// MaxSessionKey bounds a prompt_cache_key.
const MaxSessionKey = 1024

// route sets job.Route (docs/routing.md): by the session, else by the
// longest prefix the workers announced when the job uses the prefix
// cache, else by load.
func (s *Server) route(job *queue.Job, session string) {
	if s.cfg.Router == nil {
		return
	}
	prompt := ""
	if job.CachePrefix && job.LoRA == nil { // workers announce no prefix computed under an adapter
		prompt = job.Prompt
	}
	d := s.cfg.Router.Route(job.Model, job.Tenant, session, prompt)
	job.Route = d.Worker
	s.cfg.Metrics.routed(job.Model, d.Kind)
}

// call is one decoded and validated generation request on its way to a
// worker.
type call struct {
	p  auth.Principal
	m  *catalog.Model
	v  *vocab
	in *genInput
	// defaultMax is the max_tokens used when the request gave none
	// (negative, -n: n or the rest of the window, whichever is less).
	defaultMax int
	f          format // renders the answer in the request's API
}

// generate runs one admitted-to-be request to the end: quota, admission,
// enqueue, and the reply frames rendered by c.f.
//
// A response is either a refusal from the error table or the whole answer:
// a non-streaming answer is written only after the final frame; a stream
// starts only after the first frame, so a worker's refusal still gets its
// HTTP status, and a stream that breaks later ends with an error event and no
// [DONE]. If the handler returns before the worker's last frame (client gone,
// timeout, broken stream) the job is cancelled.
func (s *Server) generate(w http.ResponseWriter, r *http.Request, c call) {
	ri := infoOf(r)
	ri.model = c.m.Name
	_, qspan := s.startSpan(r.Context(), spanQuota)
	release, err := s.acquireSync(r.Context(), c.p, infoOf(r).id)
	endSpan(qspan, err)
	if err != nil {
		c.f.writeError(w, s.refuse(r, err))
		return
	}
	rep := &replyStream{s: s, w: w, r: r, c: c}
	defer func() { release(rep.used) }() // zero unless the request completes

	_, aspan := s.startSpan(r.Context(), spanAdmission)
	a, err := c.v.admit(r.Context(), c.in, c.m.ContextWindow, c.defaultMax)
	if err == nil {
		aspan.SetAttributes(queue.AttrInTokens.Int(a.tokens), queue.AttrMaxTokens.Int(a.maxTokens))
	}
	if err == nil {
		err = s.reserve(r.Context(), c.p, c.m, []string{ri.id}, []admitted{a})
	}
	endSpan(aspan, err)
	if err != nil {
		c.f.writeError(w, s.refuse(r, err))
		return
	}
	job := s.newJob(ri.id, c.p, c.m, a, c.in, r)
	if s.cfg.LogContent {
		s.log.DebugContext(r.Context(), "edge: prompt (--log-content)", "request_id", job.ID, "prompt", job.Prompt)
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.RequestTimeout+replyGrace)
	defer cancel()
	ectx, espan := s.startSpan(ctx, spanEnqueue, trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(attribute.String("messaging.system", "nats"),
			attribute.String("messaging.destination.name", queue.JobSubject(c.m.Name))))
	replies, err := s.cfg.Queue.Submit(ectx, job)
	endSpan(espan, err)
	if err != nil {
		c.f.writeError(w, s.refuse(r, err))
		return
	}
	defer replies.Close()
	defer func() {
		if !rep.finished {
			if err := s.cancel(r.Context(), job.ID); err != nil {
				s.log.Warn("edge: cancel", "id", job.ID, "error", err)
			}
		}
	}()
	rep.relay(ctx, replies)
}

// cancel cancels job id. It outlives ctx's cancellation (the client may be
// gone) by cancelTimeout at most.
func (s *Server) cancel(ctx context.Context, id string) error {
	ctx, stop := context.WithTimeout(context.WithoutCancel(ctx), cancelTimeout)
	defer stop()
	return s.cfg.Queue.Cancel(ctx, id)
}

// replyStream renders one request's reply frames as they arrive (generate).
type replyStream struct {
	s *Server
	w http.ResponseWriter
	r *http.Request
	c call

	res      *result
	sw       *sse // the stream, once it started
	text     strings.Builder
	frames   int       // token and final frames so far
	lastTok  time.Time // when the last of them arrived
	err      error     // what ended the reply, if not its final frame
	finished bool      // the worker sent its last frame
	used     quota.Usage

	// group, when the request asked for several choices, is what they
	// share (choices.go); index and seed are this one's.
	group *choiceGroup
	index int
	seed  uint64
	begun bool // this choice's stream has begun (group only)
}

// relay renders the frames of replies until the last, or until they break.
func (rep *replyStream) relay(ctx context.Context, replies *queue.Replies) {
	s, r := rep.s, rep.r
	_, rspan := s.startSpan(ctx, spanReply)
	defer func() {
		rspan.SetAttributes(attribute.Int("bulkhead.reply.frames", rep.frames))
		endSpan(rspan, rep.err)
	}()
	rep.res = &result{id: infoOf(r).id, model: rep.c.m.Name, created: time.Now().Unix(), index: rep.index}
	if rep.group != nil {
		rep.res.seed = &rep.seed
	}
	if rep.c.in.logprobs {
		rep.res.logprobs = &logprobTrack{}
	}
	for {
		fr, err := replies.Next(ctx)
		if err != nil {
			if r.Context().Err() != nil {
				if cause := context.Cause(r.Context()); errors.Is(cause, ErrDraining) {
					rep.fail(cause) // the edge's drain ran out of time: say so
					return
				}
				s.log.Debug("edge: client gone", "id", rep.res.id)
				return
			}
			if errors.Is(err, io.EOF) {
				err = ErrBrokenStream
			}
			rep.fail(err)
			return
		}
		if !rep.frame(fr) {
			return
		}
	}
}

// frame renders one frame and reports whether more are to come.
func (rep *replyStream) frame(fr *queue.Frame) bool {
	c, res := rep.c, rep.res
	if fr.Kind == queue.KindToken || fr.Kind == queue.KindFinal {
		now := time.Now()
		if rep.frames == 0 && rep.index == 0 {
			if rep.group != nil {
				rep.group.started()
			}
			rep.s.cfg.Metrics.firstToken(c.m.Name, now.Sub(infoOf(rep.r).start))
		} else if fr.Kind == queue.KindToken {
			rep.s.cfg.Metrics.interToken(c.m.Name, now.Sub(rep.lastTok))
		}
		rep.frames++
		rep.lastTok = now
	}
	switch fr.Kind {
	case queue.KindError:
		rep.finished = true
		if fr.Error == nil {
			rep.fail(ErrBrokenStream)
			return false
		}
		rep.fail(fr.Error)
		return false
	case queue.KindToken, queue.KindFinal:
		c.v.addLogprobs(res, fr)
		if !c.in.stream {
			rep.text.WriteString(c.v.frameText(c.in, fr))
		} else if !rep.streamText(fr) {
			return false
		}
		if fr.Kind == queue.KindToken {
			return true
		}
		rep.final(fr)
		return false
	}
	rep.fail(ErrBrokenStream)
	return false
}

// streamText sends a frame's text as a stream event, starting the stream at
// the first; it reports false once the client cannot be written to.
func (rep *replyStream) streamText(fr *queue.Frame) bool {
	c := rep.c
	if rep.group != nil {
		return rep.group.streamText(rep, c.v.frameText(c.in, fr))
	}
	if rep.sw == nil {
		rep.sw = startSSE(rep.w)
		if err := c.f.streamBegin(rep.sw, rep.res); err != nil {
			return false
		}
	}
	if chunk := c.v.frameText(c.in, fr); chunk != "" {
		if err := c.f.streamText(rep.sw, rep.res, chunk); err != nil {
			return false
		}
	}
	return true
}

// final ends the reply at its final frame: usage counted and charged, and
// the stream's end or the whole answer written.
func (rep *replyStream) final(fr *queue.Frame) {
	c, res := rep.c, rep.res
	rep.finished = true
	if fr.Usage == nil {
		rep.fail(ErrBrokenStream)
		return
	}
	res.finish, res.usage = fr.Finish, *fr.Usage
	rep.s.cfg.Metrics.tokens(c.m.Name, res.usage.PromptTokens, res.usage.CompletionTokens)
	infoOf(rep.r).span.SetAttributes(queue.AttrInTokens.Int(res.usage.PromptTokens), queue.AttrOutTokens.Int(res.usage.CompletionTokens),
		queue.AttrFinish.StringSlice([]string{res.finish}))
	if rep.group != nil {
		rep.used = charge(c.m, choiceID(res.id, rep.index), res.usage)
		res.text = rep.text.String()
		rep.group.finish(rep)
		return
	}
	rep.used = charge(c.m, res.id, res.usage)
	if rep.sw != nil {
		_ = c.f.streamEnd(rep.sw, res)
		return
	}
	res.text = rep.text.String()
	c.f.writeResult(rep.w, res)
}

// fail ends the reply with err's table row: an error answer, or an error
// event once the stream started.
func (rep *replyStream) fail(err error) {
	rep.err = err
	if rep.group != nil {
		rep.group.fail(err)
		return
	}
	e := rep.s.refuse(rep.r, err)
	if rep.sw == nil {
		rep.c.f.writeError(rep.w, e)
		return
	}
	_ = rep.c.f.streamError(rep.sw, e)
}

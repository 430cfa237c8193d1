package edge

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
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

// sse writes server-sent events, flushing each.
type sse struct {
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

// newJob builds the job for an admitted request. The tenant, which is also
// the prefix cache's namespace, is the verified principal's; the body only
// opts in to the cache.
func (s *Server) newJob(id string, p auth.Principal, m *catalog.Model, a admitted, in *genInput, r *http.Request) *queue.Job {
	return &queue.Job{
		ID:           id,
		Tenant:       p.Tenant,
		Model:        m.Name,
		Prompt:       a.prompt,
		Segments:     a.segments,
		ParseSpecial: a.parseSpecial,
		AddBOS:       a.addBOS,
		PromptTokens: a.tokens,
		MaxTokens:    a.maxTokens,
		Sampling:     in.sampling,
		Stop:         in.stop,
		RejectIfBusy: r.URL.Query().Get("rejectIfBusy") == "true",
		CachePrefix:  in.cachePrefix,
		Reply:        queue.ReplySubject(id),
		Deadline:     time.Now().Add(s.cfg.RequestTimeout),
		Rates:        jobRates(m),
		Grammar:      in.grammar,
		Logprobs:     in.logprobs,
		TopLogprobs:  in.topLogprobs,
	}
}

// generate runs one admitted-to-be request to the end: quota, admission,
// enqueue, and the reply frames rendered by f. defaultMax is the max_tokens
// used when the request gave none (negative: the rest of the window).
//
// A response is either a refusal from the error table or the whole answer:
// a non-streaming answer is written only after the final frame; a stream
// starts only after the first frame, so a worker's refusal still gets its
// HTTP status, and a stream that breaks later ends with an error event and no
// [DONE]. If the handler returns before the worker's last frame (client gone,
// timeout, broken stream) the job is cancelled.
func (s *Server) generate(w http.ResponseWriter, r *http.Request, p auth.Principal,
	m *catalog.Model, v *vocab, in *genInput, defaultMax int, f format) {
	ri := infoOf(r)
	ri.model = m.Name
	_, qspan := s.startSpan(r.Context(), spanQuota)
	release, err := s.cfg.Quota.Acquire(r.Context(), p.Tenant)
	endSpan(qspan, err)
	if err != nil {
		f.writeError(w, s.refuse(r, err))
		return
	}
	var used quota.Usage // what release charges; zero unless the request completes
	defer func() { release(used) }()

	_, aspan := s.startSpan(r.Context(), spanAdmission)
	a, err := v.admit(in, m.ContextWindow, defaultMax)
	if err == nil {
		aspan.SetAttributes(attrInTokens.Int(a.tokens), attrMaxTokens.Int(a.maxTokens))
	}
	endSpan(aspan, err)
	if err != nil {
		f.writeError(w, s.refuse(r, err))
		return
	}
	id := ri.id
	job := s.newJob(id, p, m, a, in, r)
	if s.cfg.LogContent {
		s.log.DebugContext(r.Context(), "edge: prompt (--log-content)", "request_id", id, "prompt", job.Prompt)
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.RequestTimeout+replyGrace)
	defer cancel()
	ectx, espan := s.startSpan(ctx, spanEnqueue, trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(attribute.String("messaging.system", "nats"),
			attribute.String("messaging.destination.name", queue.JobSubject(m.Name))))
	replies, err := s.cfg.Queue.Submit(ectx, job)
	endSpan(espan, err)
	if err != nil {
		f.writeError(w, s.refuse(r, err))
		return
	}
	defer replies.Close()
	finished := false // the worker sent its last frame
	defer func() {
		if !finished {
			if err := s.cfg.Queue.Cancel(id); err != nil {
				s.log.Warn("edge: cancel", "id", id, "error", err)
			}
		}
	}()
	_, rspan := s.startSpan(ctx, spanReply)
	var (
		frames   int
		lastTok  time.Time
		replyErr error
	)
	defer func() { rspan.SetAttributes(attribute.Int("bulkhead.reply.frames", frames)); endSpan(rspan, replyErr) }()

	res := &result{id: id, model: m.Name, created: time.Now().Unix()}
	if in.logprobs {
		res.logprobs = &logprobTrack{}
	}
	var (
		sw   *sse
		text strings.Builder
	)
	fail := func(err error) {
		replyErr = err
		e := s.refuse(r, err)
		if sw == nil {
			f.writeError(w, e)
			return
		}
		_ = f.streamError(sw, e)
	}
	for {
		fr, err := replies.Next(ctx)
		if err != nil {
			if r.Context().Err() != nil {
				if cause := context.Cause(r.Context()); errors.Is(cause, ErrDraining) {
					fail(cause) // the edge's drain ran out of time: say so
					return
				}
				s.log.Debug("edge: client gone", "id", id)
				return
			}
			if errors.Is(err, io.EOF) {
				err = ErrBrokenStream
			}
			fail(err)
			return
		}
		if fr.Kind == queue.KindToken || fr.Kind == queue.KindFinal {
			now := time.Now()
			if frames == 0 {
				s.cfg.Metrics.firstToken(m.Name, now.Sub(ri.start))
			} else if fr.Kind == queue.KindToken {
				s.cfg.Metrics.interToken(m.Name, now.Sub(lastTok))
			}
			frames++
			lastTok = now
		}
		switch fr.Kind {
		case queue.KindError:
			finished = true
			if fr.Error == nil {
				fail(ErrBrokenStream)
				return
			}
			fail(fr.Error)
			return
		case queue.KindToken, queue.KindFinal:
			v.addLogprobs(res, fr)
			if in.stream {
				if sw == nil {
					sw = startSSE(w)
					if err := f.streamBegin(sw, res); err != nil {
						return
					}
				}
				if chunk := v.frameText(in, fr); chunk != "" {
					if err := f.streamText(sw, res, chunk); err != nil {
						return
					}
				}
			} else {
				text.WriteString(v.frameText(in, fr))
			}
			if fr.Kind == queue.KindToken {
				continue
			}
			finished = true
			if fr.Usage == nil {
				fail(ErrBrokenStream)
				return
			}
			res.finish, res.usage = fr.Finish, *fr.Usage
			s.cfg.Metrics.tokens(m.Name, res.usage.PromptTokens, res.usage.CompletionTokens)
			ri.span.SetAttributes(attrInTokens.Int(res.usage.PromptTokens), attrOutTokens.Int(res.usage.CompletionTokens),
				attrFinish.StringSlice([]string{res.finish}))
			used = charge(m, id, res.usage)
			if sw != nil {
				_ = f.streamEnd(sw, res)
				return
			}
			res.text = text.String()
			f.writeResult(w, res)
			return
		default:
			fail(ErrBrokenStream)
			return
		}
	}
}

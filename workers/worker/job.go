package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/bulkhead-ai/bulkhead/queue"
	"github.com/bulkhead-ai/bulkhead/workers/engine"
	"github.com/bulkhead-ai/bulkhead/workers/kvcache"
	"github.com/bulkhead-ai/bulkhead/workers/sample"
)

// Causes a job's context is cancelled with.
var (
	errAborted  = errors.New("worker: cancelled by the client")
	errShutdown = errors.New("worker: shutting down")
)

// refusal is a job ended before it reached the engine.
type refusal struct {
	kind queue.ErrorKind
	msg  string
}

// handle runs one delivery of a job to its end: a frame stream, a hand-over
// to a decode worker (prefill role), a refusal, a requeue, or nothing
// (already finished, or another worker holds it).
func (w *Worker) handle(ctx context.Context, res *queue.Results, model string, eng *engine.Engine, msg jetstream.Msg) {
	ctx, log, end := w.startDelivery(ctx, model, msg)
	defer end()
	job, err := queue.DecodeJob(msg.Data())
	if err != nil {
		w.refuseUndecodable(log, msg, err)
		return
	}
	jobAttributes(ctx, job)
	log = log.With("job", job.ID, "tenant", job.Tenant)
	if md, err := msg.Metadata(); err == nil && job.Submitted.IsZero() {
		job.Submitted = md.Timestamp // usage events time the job from here
	}
	// Records outlive a shutdown: write them even after ctx is cancelled.
	kctx := context.WithoutCancel(ctx)
	rp := w.claim(kctx, log, res, job, model, msg)
	if rp == nil {
		return
	}
	req, ref := admit(job, eng)
	if ref != nil {
		w.fail(kctx, log, rp, ref.kind, ref.msg)
		w.settle(log, msg.Ack())
		return
	}
	if w.cfg.Role == RolePrefill {
		w.prefill(ctx, kctx, log, res, rp, job, eng, req, msg)
		return
	}
	w.run(ctx, kctx, log, res, rp, job, eng, req, msg)
}

// claim applies the redelivery rule (queue.Results.Claim) to a delivery of
// job and returns the Replier to run it with, or nil once it has settled msg
// (already finished, lost mid-stream, wrong model, or the claim failed).
func (w *Worker) claim(kctx context.Context, log *slog.Logger, res *queue.Results, job *queue.Job, model string, msg jetstream.Msg) *queue.Replier {
	rp, claim, err := res.Claim(kctx, w.nc, job)
	if err != nil {
		log.Warn("claiming job; will retry", "err", err)
		w.settle(log, msg.NakWithDelay(w.cfg.BusyDelay))
		return nil
	}
	switch claim {
	case queue.ClaimFinished:
		deliveryOf(kctx).outcome = outcomeFinished
		log.Info("job already finished or cancelled; not running it")
		w.settle(log, msg.Ack())
		return nil
	case queue.ClaimLostMidStream:
		log.Warn("job redelivered after its worker sent frames; failing it")
		w.fail(kctx, log, rp, queue.ErrKindInternal, "worker lost mid-stream")
		w.settle(log, msg.Ack())
		return nil
	}
	if job.Model != model {
		w.fail(kctx, log, rp, queue.ErrKindUnknownModel, fmt.Sprintf("job for model %q arrived on the subject of %q", job.Model, model))
		w.settle(log, msg.Term())
		return nil
	}
	return rp
}

// admit checks a job against the engine's own limits and builds its request.
// It never truncates: a prompt that does not fit is refused. The request's
// owner, which is also its prefix cache namespace, is the job's tenant (the
// edge's verified principal); job.CachePrefix only opts in.
func admit(job *queue.Job, eng *engine.Engine) (engine.Request, *refusal) {
	if !time.Now().Before(job.Deadline) {
		return engine.Request{}, &refusal{queue.ErrKindTimeout, "deadline passed before the job started"}
	}
	prompt := promptTokens(eng.Model().Tokenizer, job)
	if len(prompt) == 0 {
		return engine.Request{}, &refusal{queue.ErrKindInvalidInput, "empty prompt"}
	}
	if n, ctxLen := len(prompt)+job.MaxTokens, eng.Context(); n > ctxLen {
		return engine.Request{}, &refusal{queue.ErrKindPromptTooLong, fmt.Sprintf(
			"prompt of %d tokens + max_tokens %d = %d tokens exceeds the context window of %d tokens",
			len(prompt), job.MaxTokens, n, ctxLen)}
	}
	s := job.Sampling
	params := sample.Params{
		Temperature: s.Temperature, TopK: s.TopK, TopP: s.TopP, MinP: s.MinP,
		RepetitionPenalty: s.RepetitionPenalty, FrequencyPenalty: s.FrequencyPenalty,
		PresencePenalty: s.PresencePenalty, Seed: s.Seed,
	}
	if err := params.Validate(); err != nil {
		return engine.Request{}, &refusal{queue.ErrKindInvalidInput, err.Error()}
	}
	grammar, err := jobGrammar(job.Grammar)
	if err != nil {
		return engine.Request{}, &refusal{queue.ErrKindInvalidInput, err.Error()}
	}
	if job.TopLogprobs < 0 || job.TopLogprobs > sample.MaxTopLogprobs {
		return engine.Request{}, &refusal{queue.ErrKindInvalidInput, fmt.Sprintf("top_logprobs %d outside [0, %d]", job.TopLogprobs, sample.MaxTopLogprobs)}
	}
	return engine.Request{
		Grammar:     grammar,
		Logprobs:    job.Logprobs,
		TopLogprobs: job.TopLogprobs,
		Owner:       kvcache.Owner{Namespace: job.Tenant, Request: job.ID},
		Prompt:      prompt,
		MaxTokens:   job.MaxTokens,
		Sampling:    params,
		Stop:        job.Stop,
		CachePrefix: job.CachePrefix,
	}, nil
}

// watchCancel subscribes abort to job's cancel signal and then reads the
// job's cancel marker once more, reporting whether it was cancelled. The edge
// records the marker before it publishes the signal, and the subscription
// and the read go out on one connection in that order, so a cancel is either
// seen here or delivered to abort: none falls between the claim and the
// subscription. A marker that cannot be read is logged and taken as not
// cancelled (the signal still works). Only a failed subscription is an error;
// the caller unsubscribes sub.
func (w *Worker) watchCancel(kctx context.Context, log *slog.Logger, res *queue.Results, job *queue.Job,
	abort context.CancelCauseFunc) (sub *nats.Subscription, cancelled bool, err error) {
	if w.cfg.beforeWatch != nil {
		w.cfg.beforeWatch(job)
	}
	sub, err = w.nc.Subscribe(queue.CancelSubject(job.ID), func(*nats.Msg) { abort(errAborted) })
	if err != nil {
		return nil, false, err
	}
	cancelled, err = res.Cancelled(kctx, job.ID)
	if err != nil {
		log.Warn("reading the job's cancel marker; running it", "err", err)
		return sub, false, nil
	}
	return sub, cancelled, nil
}

// cancelled ends a job cancelled before it reached the engine: an aborted
// frame (nobody may be listening) and an ack.
func (w *Worker) cancelled(kctx context.Context, log *slog.Logger, rp *queue.Replier, msg jetstream.Msg) {
	w.fail(kctx, log, rp, queue.ErrKindAborted, "the request was cancelled")
	w.settle(log, msg.Ack())
}

// jobContext is the context a job's engine work runs under: it ends at the
// job's deadline, or with a cause when the job is aborted.
func jobContext(ctx context.Context, job *queue.Job) (context.Context, context.CancelCauseFunc, context.CancelFunc) {
	rctx, cancelDeadline := context.WithDeadline(ctx, job.Deadline)
	rctx, abort := context.WithCancelCause(rctx)
	return rctx, abort, func() { abort(nil); cancelDeadline() }
}

// begin prepares an admitted job that a unified or prefill worker is about to
// run: its context (see jobContext) is aborted by the job's cancel signal.
// It reports false, with the job already settled, when the job was cancelled
// (aborted frame, ack) or the cancel watch could not start (requeued).
// Otherwise the caller calls stop when the job's work is over.
func (w *Worker) begin(ctx, kctx context.Context, log *slog.Logger, res *queue.Results, rp *queue.Replier,
	job *queue.Job, msg jetstream.Msg) (rctx context.Context, abort context.CancelCauseFunc, stop func(), ok bool) {
	rctx, abort, release := jobContext(ctx, job)
	sub, cancelled, err := w.watchCancel(kctx, log, res, job, abort)
	if err != nil {
		release()
		log.Warn("subscribing to cancel; will retry", "err", err)
		w.requeue(kctx, log, rp, msg, w.cfg.BusyDelay)
		return nil, nil, nil, false
	}
	if cancelled {
		_ = sub.Unsubscribe()
		release()
		w.cancelled(kctx, log, rp, msg)
		return nil, nil, nil, false
	}
	return rctx, abort, func() { _ = sub.Unsubscribe(); release() }, true
}

// run submits an admitted job to the engine and streams its events.
func (w *Worker) run(ctx, kctx context.Context, log *slog.Logger, res *queue.Results, rp *queue.Replier,
	job *queue.Job, eng *engine.Engine, req engine.Request, msg jetstream.Msg) {
	rctx, abort, stop, ok := w.begin(ctx, kctx, log, res, rp, job, msg)
	if !ok {
		return
	}
	defer stop()

	pctx, prefill := w.startSpan(rctx, spanPrefill, attrModel.String(job.Model), attrInTokens.Int(len(req.Prompt)))
	events, err := eng.Submit(pctx, req)
	switch {
	case errors.Is(err, engine.ErrQueueFull) && job.RejectIfBusy:
		w.fail(kctx, log, rp, queue.ErrKindCapacity, "the model is busy and the request asked not to wait")
		w.settle(log, msg.Ack())
		return
	case errors.Is(err, engine.ErrQueueFull):
		w.requeue(kctx, log, rp, msg, w.cfg.BusyDelay)
		return
	case errors.Is(err, engine.ErrClosed):
		w.requeue(kctx, log, rp, msg, 0)
		return
	case err != nil:
		endSpan(prefill, err)
		kind, text := classify(err, nil)
		w.fail(kctx, log, rp, kind, text)
		w.settle(log, msg.Ack())
		return
	}
	rp.Started(len(req.Prompt), 0) // the engine reports the cached count at the end

	w.stream(rctx, kctx, abort, log, rp, job, events, msg, true, 0, prefill)
}

// stream sends a running request's events as reply frames and then ends the
// job: a final frame and a usage event, or an error frame, or (when
// canRequeue and nothing went out yet) a requeue after a shutdown. It marks
// msg in progress meanwhile and settles it. Unified and decode workers both
// stream through it. handedCached is added to the engine's cached-token
// count: the prompt tokens a prefill worker served from its prefix cache
// (decode role), 0 for a unified worker; the sum never exceeds the prompt.
// prefill, when not nil, is the span of the engine's prefill, ended at the
// first event; the decode span runs from then to the last.
func (w *Worker) stream(rctx, kctx context.Context, abort context.CancelCauseFunc, log *slog.Logger, rp *queue.Replier,
	job *queue.Job, events <-chan engine.Event, msg jetstream.Msg, canRequeue bool, handedCached int, prefill trace.Span) {
	stopBeat := w.heartbeat(log, msg, rp)
	var (
		final     *engine.Event
		endErr    error
		streamErr error
		decode    trace.Span
	)
	if prefill == nil {
		_, decode = w.startSpan(rctx, spanDecode, attrModel.String(job.Model))
	}
	for ev := range events {
		if decode == nil {
			endSpan(prefill, ev.Err)
			_, decode = w.startSpan(rctx, spanDecode, attrModel.String(job.Model))
		}
		switch {
		case ev.Err != nil:
			endErr = ev.Err
		case ev.Done:
			final = &ev
		case streamErr == nil:
			if err := rp.TokenLogprobs(kctx, ev.Text, []int32{ev.Token}, frameLogprobs(ev)); err != nil {
				streamErr = err
				abort(err) // the engine ends the request at its next step
			}
		}
	}
	stopBeat()
	if decode == nil { // no event at all
		endSpan(prefill, endErr)
	} else {
		if final != nil {
			decode.SetAttributes(attrOutTokens.Int(final.Usage.CompletionTokens))
		}
		endSpan(decode, endErr)
	}

	switch {
	case errors.Is(streamErr, queue.ErrLostClaim):
		log.Warn("another worker claimed the job; leaving it", "err", streamErr)
	case streamErr != nil:
		log.Error("streaming reply", "err", streamErr)
		if rp.Streamed() || !canRequeue {
			w.fail(kctx, log, rp, queue.ErrKindInternal, "worker could not send the reply")
			w.settle(log, msg.Ack())
		} else {
			w.requeue(kctx, log, rp, msg, w.cfg.BusyDelay)
		}
	case final != nil:
		u := queue.Usage{PromptTokens: final.Usage.PromptTokens, CompletionTokens: final.Usage.CompletionTokens,
			CachedTokens: min(final.Usage.CachedTokens+handedCached, final.Usage.PromptTokens)}
		// The usage event goes first: a worker that dies after the final
		// frame would leave a done record that no redelivery bills.
		w.publishUsage(kctx, log, rp, final.Finish, &u)
		if err := rp.Final(kctx, final.Text, final.Finish, u); err != nil {
			log.Error("sending final frame", "err", err)
		}
		deliveryOf(kctx).outcome = outcomeDone
		w.cfg.Metrics.usage(job.Model, u)
		if span := trace.SpanFromContext(kctx); span.IsRecording() {
			span.SetAttributes(attrInTokens.Int(u.PromptTokens), attrOutTokens.Int(u.CompletionTokens),
				attrCached.Int(u.CachedTokens), attrFinish.StringSlice([]string{final.Finish}))
		}
		w.settle(log, msg.Ack())
	default:
		cause := context.Cause(rctx)
		if canRequeue && (errors.Is(cause, errShutdown) || errors.Is(endErr, engine.ErrClosed)) && !rp.Streamed() {
			w.requeue(kctx, log, rp, msg, 0)
			return
		}
		kind, text := classify(endErr, cause)
		w.fail(kctx, log, rp, kind, text)
		w.settle(log, msg.Ack())
	}
}

// classify maps an engine error (and the cause of the request's context, if
// it was cancelled) to an error kind and a message for the client.
func classify(err, cause error) (queue.ErrorKind, string) {
	switch {
	case errors.Is(cause, errAborted):
		return queue.ErrKindAborted, "the request was cancelled"
	case errors.Is(cause, errShutdown), errors.Is(err, engine.ErrClosed):
		return queue.ErrKindInternal, "worker shut down mid-stream"
	case errors.Is(err, context.DeadlineExceeded), errors.Is(cause, context.DeadlineExceeded):
		return queue.ErrKindTimeout, "the request's deadline passed"
	case errors.Is(err, engine.ErrContextLength):
		return queue.ErrKindPromptTooLong, err.Error()
	case errors.Is(err, engine.ErrExceedsPool):
		return queue.ErrKindCapacity, exceedsPoolMessage(err)
	case errors.Is(err, kvcache.ErrPoolExhausted):
		return queue.ErrKindCapacity, "the worker's KV pool is full"
	case errors.Is(err, engine.ErrInvalidRequest), errors.Is(err, sample.ErrInvalidParams):
		return queue.ErrKindInvalidInput, err.Error()
	case errors.Is(err, context.Canceled):
		return queue.ErrKindAborted, "the request was cancelled"
	}
	return queue.ErrKindInternal, "the worker failed to run the request"
}

// exceedsPoolMessage says by how much a request exceeds the KV pool, from the
// engine's typed error's numbers (never its text).
func exceedsPoolMessage(err error) string {
	var le *engine.LengthError
	if !errors.As(err, &le) {
		return "the request can never fit this worker's KV pool"
	}
	if le.MaxTokens == 0 {
		return fmt.Sprintf("the request's %d prompt tokens can never fit this worker's KV pool of %d tokens", le.PromptTokens, le.Limit)
	}
	return fmt.Sprintf("the request's %d prompt tokens + %d max tokens can never fit this worker's KV pool of %d tokens", le.PromptTokens, le.MaxTokens, le.Limit)
}

// heartbeat sends a heartbeat frame on rp's reply subject at once and every
// queue.HeartbeatInterval, so the edge notices within
// queue.HeartbeatTimeout if this worker dies, and marks msg in progress every
// HeartbeatEvery, so JetStream does not redeliver it meanwhile, until the
// returned function is called (which waits for it to stop).
func (w *Worker) heartbeat(log *slog.Logger, msg jetstream.Msg, rp *queue.Replier) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		beat := func() {
			if err := rp.Heartbeat(); err != nil {
				log.Warn("sending heartbeat", "err", err)
			}
		}
		beat()
		every := min(w.cfg.HeartbeatEvery, queue.HeartbeatInterval)
		perProgress := max(int(w.cfg.HeartbeatEvery/every), 1) // ticks per in-progress mark
		t := time.NewTicker(every)
		defer t.Stop()
		for n := 1; ; n++ {
			select {
			case <-done:
				return
			case <-t.C:
				beat()
				if n%perProgress != 0 {
					continue
				}
				if err := msg.InProgress(); err != nil {
					log.Warn("marking job in progress", "err", err)
				}
			}
		}
	})
	return func() { close(done); wg.Wait() }
}

// fail ends the job with an error frame. Prefill and decode workers share
// each job's record across the hand-over, so they fail it only while their
// claim is current (Replier.FailIfHeld): at most one of them ends the stream.
func (w *Worker) fail(ctx context.Context, log *slog.Logger, rp *queue.Replier, kind queue.ErrorKind, text string) {
	log.Info("job refused or failed", "kind", kind, "reason", text)
	d := deliveryOf(ctx)
	d.outcome, d.kind = outcomeFailed, kind
	trace.SpanFromContext(ctx).SetStatus(codes.Error, text)
	var err error
	if w.cfg.Role == RoleUnified {
		// This worker alone ends the job: its usage event goes first (see
		// stream's final frame).
		w.publishUsage(ctx, log, rp, queue.OutcomeOf(kind), nil)
		err = rp.Fail(ctx, kind, text)
	} else {
		err = rp.FailIfHeld(ctx, kind, text)
		if !errors.Is(err, queue.ErrLostClaim) && !errors.Is(err, queue.ErrEnded) {
			w.publishUsage(ctx, log, rp, queue.OutcomeOf(kind), nil)
		}
	}
	switch {
	case errors.Is(err, queue.ErrLostClaim):
		log.Info("the job moved on to another worker; not failing it here", "err", err)
	case err != nil:
		log.Error("sending error frame", "err", err)
	}
}

// requeue gives the job back for another delivery after delay.
func (w *Worker) requeue(ctx context.Context, log *slog.Logger, rp *queue.Replier, msg jetstream.Msg, delay time.Duration) {
	deliveryOf(ctx).outcome = outcomeRequeued
	if err := rp.Requeue(ctx); err != nil {
		log.Warn("requeueing job record", "err", err)
	}
	if delay > 0 {
		w.settle(log, msg.NakWithDelay(delay))
	} else {
		w.settle(log, msg.Nak())
	}
}

func (w *Worker) settle(log *slog.Logger, err error) {
	if err != nil {
		log.Warn("acknowledging job message", "err", err)
	}
}

// refuseUndecodable ends a job that does not decode: an error frame if a
// reply subject can be read from it, and Term so it is not redelivered.
func (w *Worker) refuseUndecodable(log *slog.Logger, msg jetstream.Msg, derr error) {
	log.Warn("refusing undecodable job", "err", derr)
	var partial struct {
		Reply string `json:"reply"`
		Job   struct {
			Reply string `json:"reply"`
		} `json:"job"` // a decode hand-over
	}
	if json.Unmarshal(msg.Data(), &partial) == nil && partial.Reply == "" {
		partial.Reply = partial.Job.Reply
	}
	if partial.Reply != "" {
		b, err := queue.EncodeFrame(&queue.Frame{Seq: 1, Kind: queue.KindError,
			Error: &queue.FrameError{Kind: queue.ErrKindInvalidInput, Message: derr.Error()}})
		if err == nil {
			err = w.nc.Publish(partial.Reply, b)
		}
		if err != nil {
			log.Warn("sending error frame", "err", err)
		}
	}
	w.settle(log, msg.TermWithReason("undecodable job"))
}

// jobGrammar compiles a job's output constraint (nil for none). The edge
// compiled it already; a job that still fails is refused as invalid input.
func jobGrammar(g *queue.Grammar) (*sample.Grammar, error) {
	switch {
	case g == nil:
		return nil, nil
	case g.Kind == queue.GrammarJSONObject:
		return sample.JSONObject(), nil
	case g.Kind == queue.GrammarJSONSchema:
		return sample.CompileSchema(g.Schema)
	}
	return nil, fmt.Errorf("unknown grammar kind %q", g.Kind)
}

// frameLogprobs is a token event's logprob as the frame carries it.
func frameLogprobs(ev engine.Event) []queue.TokenLogprob {
	if ev.Logprob == nil {
		return nil
	}
	// JSON has no -Inf: a token the model gave no chance is floored.
	floor := func(x float32) float32 { return max(x, -9999) }
	lp := queue.TokenLogprob{Token: ev.Token, Logprob: floor(ev.Logprob.Logprob)}
	for _, t := range ev.Logprob.Top {
		lp.Top = append(lp.Top, queue.TopLogprob{Token: t.ID, Logprob: floor(t.Logprob)})
	}
	return []queue.TokenLogprob{lp}
}

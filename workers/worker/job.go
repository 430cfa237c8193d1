package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"

	"github.com/bulkhead-ai/bulkhead/models/grammar"
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

// handle runs one delivery of a job to its end: a frame stream, a hand-over
// to a decode worker (prefill role), a refusal, a requeue, or nothing
// (already finished, or another worker holds it).
func (w *Worker) handle(ctx context.Context, res *queue.Results, model string, eng *engine.Engine, msg jetstream.Msg) {
	ctx, d := w.startDelivery(ctx, res, model, eng, msg)
	defer d.record()
	defer d.enterEngine() // if it never did
	if !d.take(ctx) || !d.admit(ctx) {
		return
	}
	w.announcePrefix(d.job)
	if w.cfg.Role == RolePrefill {
		d.prefill(ctx)
		return
	}
	d.run(ctx)
}

// take decodes the delivery's job (an undecodable one is refused) and claims
// it; it reports false once the delivery ended.
func (d *delivery) take(ctx context.Context) bool {
	job, err := queue.DecodeJob(d.msg.Data())
	if err != nil {
		d.refuseUndecodable(err)
		return false
	}
	d.decoded(ctx, job)
	if md, err := d.msg.Metadata(); err == nil && job.Submitted.IsZero() {
		job.Submitted = md.Timestamp // usage events time the job from here
	}
	return d.claim(ctx)
}

// admit checks a job against the engine's own limits and builds its request.
// It never truncates: a prompt that does not fit is refused. The request's
// owner, which is also its prefix cache namespace, is the job's tenant (the
// edge's verified principal); job.CachePrefix only turns the cache on.
func admit(job *queue.Job, eng *engine.Engine) (engine.Request, *refusal) {
	if !time.Now().Before(job.Deadline) {
		return engine.Request{}, &refusal{queue.ErrKindTimeout, "deadline passed before the job started"}
	}
	if job.Embed != nil {
		return engine.Request{}, &refusal{queue.ErrKindInvalidInput, fmt.Sprintf("model %q generates text; it does not embed", job.Model)}
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
	vocab := eng.Model().Tokenizer.VocabSize()
	for _, b := range job.LogitBias {
		if int(b.Token) >= vocab {
			return engine.Request{}, &refusal{queue.ErrKindInvalidInput, fmt.Sprintf("logit_bias names token %d; the model's vocabulary has %d", b.Token, vocab)}
		}
		params.LogitBias = append(params.LogitBias, sample.TokenBias{Token: b.Token, Bias: b.Bias})
	}
	grammar, err := jobGrammar(job.Grammar)
	if err != nil {
		return engine.Request{}, &refusal{queue.ErrKindInvalidInput, err.Error()}
	}
	if job.TopLogprobs < 0 || job.TopLogprobs > sample.MaxTopLogprobs {
		return engine.Request{}, &refusal{queue.ErrKindInvalidInput, fmt.Sprintf("top_logprobs %d outside [0, %d]", job.TopLogprobs, sample.MaxTopLogprobs)}
	}
	var prediction []int32
	if job.Prediction != "" {
		prediction = eng.Model().Tokenizer.Encode(job.Prediction, false, false)
	}
	return engine.Request{
		Prediction:    prediction,
		NoSpeculation: job.NoDraft,
		Grammar:       grammar,
		Logprobs:      job.Logprobs,
		TopLogprobs:   job.TopLogprobs,
		Owner:         kvcache.Owner{Namespace: job.Tenant, Request: job.ID},
		Prompt:        prompt,
		MaxTokens:     job.MaxTokens,
		Sampling:      params,
		Stop:          job.Stop,
		CachePrefix:   job.CachePrefix,
		Weight:        job.SchedWeight(),
	}, nil
}

// run submits an admitted job to the engine and streams its events.
func (d *delivery) run(ctx context.Context) {
	rctx, abort, stop, ok := d.begin(ctx)
	if !ok {
		return
	}
	defer stop()

	pctx, prefill := d.w.startSpan(rctx, spanPrefill, queue.AttrModel.String(d.job.Model), queue.AttrInTokens.Int(len(d.req.Prompt)))
	events, err := d.eng.Submit(pctx, d.req)
	// After Submit: the job counts in the engine's queue before it stops
	// counting as pulled, so the gate never sees it in neither (and pulls
	// one more than Lookahead).
	d.enterEngine()
	if err != nil {
		if !errors.Is(err, engine.ErrQueueFull) && !errors.Is(err, engine.ErrClosed) {
			endSpan(prefill, err)
		}
		d.refuse(rctx, err)
		return
	}
	d.rp.Started(len(d.req.Prompt), 0) // the engine reports the cached count at the end
	d.stream(rctx, abort, events, 0, prefill)
}

// stream sends a running request's events as reply frames and then ends the
// job: a final frame and a usage event, or an error frame, or (a unified
// worker, when nothing went out yet) a requeue after a shutdown. It marks
// the message in progress meanwhile and settles it. Unified and decode
// workers both stream through it. handedCached is added to the engine's
// cached-token count: the prompt tokens a prefill worker served from its
// prefix cache (decode role), 0 for a unified worker; the sum never exceeds
// the prompt. prefill, when not nil, is the span of the engine's prefill,
// ended at the first event; the decode span runs from then to the last.
func (d *delivery) stream(rctx context.Context, abort context.CancelCauseFunc, events <-chan engine.Event, handedCached int, prefill trace.Span) {
	final, endErr, streamErr := d.send(rctx, abort, events, prefill)
	kctx := context.WithoutCancel(rctx)
	canRequeue := d.w.cfg.Role == RoleUnified
	switch {
	case errors.Is(streamErr, queue.ErrLostClaim):
		d.log.Warn("another worker claimed the job; leaving it", "err", streamErr)
	case streamErr != nil:
		d.log.Error("streaming reply", "err", streamErr)
		if d.rp.Streamed() || !canRequeue {
			d.end(kctx, queue.ErrKindInternal, "worker could not send the reply")
		} else {
			d.requeue(kctx, d.w.cfg.BusyDelay)
		}
	case final != nil:
		d.finish(kctx, final, handedCached)
	default:
		cause := context.Cause(rctx)
		if canRequeue && (errors.Is(cause, errShutdown) || errors.Is(endErr, engine.ErrClosed)) && !d.rp.Streamed() {
			d.requeue(kctx, 0)
			return
		}
		kind, text := classify(endErr, cause)
		d.end(kctx, kind, text)
	}
}

// send forwards events as token frames, with the heartbeat running, and
// returns the final event, the error the request ended with, and the error
// that stopped the frames (the request is aborted then, and its events
// drained).
func (d *delivery) send(rctx context.Context, abort context.CancelCauseFunc, events <-chan engine.Event, prefill trace.Span) (final *engine.Event, endErr, streamErr error) {
	kctx := context.WithoutCancel(rctx)
	stopBeat := d.heartbeat()
	var decode trace.Span
	if prefill == nil {
		_, decode = d.w.startSpan(rctx, spanDecode, queue.AttrModel.String(d.job.Model))
	}
	tokens, held := 0, false
	for ev := range events {
		if held {
			continue // the job ended while held (Config.AfterToken): drain
		}
		if decode == nil {
			endSpan(prefill, ev.Err)
			_, decode = d.w.startSpan(rctx, spanDecode, queue.AttrModel.String(d.job.Model))
		}
		switch {
		case ev.Err != nil:
			endErr = ev.Err
		case ev.Done:
			final = &ev
		case streamErr == nil:
			if err := d.rp.TokenLogprobs(kctx, ev.Text, []int32{ev.Token}, frameLogprobs(ev)); err != nil {
				streamErr = err
				abort(err) // the engine ends the request at its next step
				break
			}
			if hook := d.w.cfg.AfterToken; hook != nil {
				tokens++
				hook(rctx, d.job, tokens)
				if rctx.Err() != nil {
					held, endErr = true, context.Cause(rctx)
				}
			}
		}
	}
	stopBeat()
	if decode == nil { // no event at all
		endSpan(prefill, endErr)
	} else {
		if final != nil {
			decode.SetAttributes(queue.AttrOutTokens.Int(final.Usage.CompletionTokens))
		}
		endSpan(decode, endErr)
	}
	return final, endErr, streamErr
}

// finish ends a job that ran to its final event: its usage event, then its
// final frame, then the ack.
func (d *delivery) finish(kctx context.Context, final *engine.Event, handedCached int) {
	u := queue.Usage{PromptTokens: final.Usage.PromptTokens, CompletionTokens: final.Usage.CompletionTokens,
		CachedTokens:       min(final.Usage.CachedTokens+handedCached, final.Usage.PromptTokens),
		AcceptedPrediction: final.Usage.AcceptedPrediction, RejectedPrediction: final.Usage.RejectedPrediction}
	// The usage event goes first: a worker that dies after the final
	// frame would leave a done record that no redelivery bills.
	d.publishUsage(kctx, final.Finish, &u)
	if err := d.rp.Final(kctx, final.Text, final.Finish, u); err != nil {
		d.log.Error("sending final frame", "err", err)
	}
	d.outcome = outcomeDone
	d.w.cfg.Metrics.usage(d.w.cfg.Name, d.job.Model, u)
	d.w.cfg.Metrics.drafts(d.w.cfg.Name, d.job.Model, final.Usage)
	if span := trace.SpanFromContext(kctx); span.IsRecording() {
		span.SetAttributes(queue.AttrInTokens.Int(u.PromptTokens), queue.AttrOutTokens.Int(u.CompletionTokens),
			attrCached.Int(u.CachedTokens), queue.AttrFinish.StringSlice([]string{final.Finish}))
	}
	d.settleEnded(kctx)
}

// refuseUndecodable ends a job that does not decode: an error frame if a
// reply subject can be read from it, and Term so it is not redelivered.
func (d *delivery) refuseUndecodable(derr error) {
	d.log.Warn("refusing undecodable job", "err", derr)
	var partial struct {
		Reply string `json:"reply"`
		Job   struct {
			Reply string `json:"reply"`
		} `json:"job"` // a decode hand-over
	}
	if json.Unmarshal(d.msg.Data(), &partial) == nil && partial.Reply == "" {
		partial.Reply = partial.Job.Reply
	}
	if partial.Reply != "" {
		b, err := queue.EncodeFrame(&queue.Frame{Seq: 1, Kind: queue.KindError,
			Error: &queue.FrameError{Kind: queue.ErrKindInvalidInput, Message: derr.Error()}})
		if err == nil {
			err = d.w.nc.Publish(partial.Reply, b)
		}
		if err != nil {
			d.log.Warn("sending error frame", "err", err)
		}
	}
	d.settle(d.msg.TermWithReason("undecodable job"))
}

// jobGrammar compiles a job's output constraint (nil for none). The edge
// compiled it already; a job that still fails is refused as invalid input.
func jobGrammar(g *queue.Grammar) (*grammar.Grammar, error) {
	switch {
	case g == nil:
		return nil, nil
	case g.Kind == queue.GrammarJSONObject:
		return grammar.JSONObject(), nil
	case g.Kind == queue.GrammarJSONSchema:
		return grammar.CompileSchema(g.Schema)
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

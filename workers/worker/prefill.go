package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/bulkhead-ai/bulkhead/queue"
	"github.com/bulkhead-ai/bulkhead/workers/engine"
	"github.com/bulkhead-ai/bulkhead/workers/handoff"
)

// prefill runs an admitted job's prompt on eng and hands the request and its
// KV to a decode worker: it exports every page, builds the manifest, offers
// the pages (subscribed before the hand-over is published), publishes the
// hand-over on the decode stream and serves the transfer until the decode
// side is done. The prompt's pages go back to the pool however that ends.
// If the hand-over fails before the decode side streamed anything, the
// request ends with an error frame; msg is acked once the hand-over ended.
func (w *Worker) prefill(ctx, kctx context.Context, log *slog.Logger, res *queue.Results, rp *queue.Replier,
	job *queue.Job, eng *engine.Engine, req engine.Request, msg jetstream.Msg) {
	rctx, _, stop, ok := w.begin(ctx, kctx, log, res, rp, job, msg)
	if !ok {
		return
	}
	defer stop()

	stopBeat := w.heartbeat(log, msg, rp)
	pctx, pspan := w.startSpan(rctx, spanPrefill, attrModel.String(job.Model), attrInTokens.Int(len(req.Prompt)))
	p, err := eng.Prefill(pctx, req)
	endSpan(pspan, err)
	if err != nil {
		stopBeat()
		cause := context.Cause(rctx)
		switch {
		case errors.Is(err, engine.ErrQueueFull) && job.RejectIfBusy:
			w.fail(kctx, log, rp, queue.ErrKindCapacity, "the model is busy and the request asked not to wait")
			w.settle(log, msg.Ack())
		case errors.Is(err, engine.ErrQueueFull):
			w.requeue(kctx, log, rp, msg, w.cfg.BusyDelay)
		case errors.Is(err, engine.ErrClosed), errors.Is(cause, errShutdown):
			w.requeue(kctx, log, rp, msg, 0)
		default:
			kind, text := classify(err, cause)
			w.fail(kctx, log, rp, kind, text)
			w.settle(log, msg.Ack())
		}
		return
	}
	rp.Started(p.PromptTokens, p.CachedTokens)
	err = w.handOver(rctx, log, job, eng, req, p)
	p.Release() // Serve has returned: nothing reads the pages any more
	stopBeat()
	if err != nil {
		w.failHandOver(kctx, log, res, rp, job, err, context.Cause(rctx))
	} else {
		deliveryOf(kctx).outcome = outcomeHandedOver
		log.Info("handed over to a decode worker", "prompt_tokens", p.PromptTokens, "cached_tokens", p.CachedTokens)
	}
	w.settle(log, msg.Ack())
}

// handOver exports p's pages, offers them and publishes the hand-over, then
// serves the transfer. It returns nil only when the decode side pulled every
// page and said it is done.
func (w *Worker) handOver(rctx context.Context, log *slog.Logger, job *queue.Job, eng *engine.Engine, req engine.Request, p *engine.Prefilled) (err error) {
	// The decode side's spans are children of the send span: the hand-over
	// message carries its context.
	rctx, span := w.startSpan(rctx, spanHandoffSend, attrModel.String(job.Model))
	start, sent := time.Now(), 0
	defer func() {
		w.cfg.Metrics.handoff(job.Model, "send", sent, time.Since(start), err)
		span.SetAttributes(attrBytes.Int(sent))
		endSpan(span, err)
	}()
	size := eng.KV().PageSize()
	pages := make([][]byte, (p.PromptTokens+size-1)/size)
	for i := range pages {
		b, err := p.Seq.ExportPage(i)
		if err != nil {
			return fmt.Errorf("exporting KV page %d: %w", i, err)
		}
		pages[i] = b
		sent += len(b)
	}
	m, err := handoff.NewManifest(handoff.Source{
		RequestID:     job.ID,
		Tenant:        job.Tenant,
		Model:         job.Model,
		WeightsDigest: eng.Model().Digest,
		Prompt:        req.Prompt,
		FirstToken:    p.First,
		Layout:        handoff.Layout(eng.KV().Layout()),
	}, pages)
	if err != nil {
		return err
	}
	raw, err := m.Marshal()
	if err != nil {
		return err
	}
	snd, err := handoff.NewSender(w.nc, m, pages, w.cfg.Handoff.Sender)
	if err != nil {
		return err
	}
	if err := queue.PublishHandover(rctx, w.js, &queue.Handover{Job: *job, Manifest: raw, CachedTokens: p.CachedTokens}); err != nil {
		snd.Close()
		return err
	}
	log.Debug("hand-over published", "transfer", m.TransferID, "pages", len(pages))
	return snd.Serve(rctx)
}

// failHandOver ends a job whose hand-over failed, unless the decode side has
// taken it over meanwhile: it fails the job while this worker's claim is
// current; if a decode worker claimed it since, it claims it back and fails
// it only if nothing was streamed and it has not ended (a decode worker that
// streamed, or its redelivery, ends the job itself).
func (w *Worker) failHandOver(kctx context.Context, log *slog.Logger, res *queue.Results, rp *queue.Replier, job *queue.Job, err, cause error) {
	log.Warn("KV hand-over failed", "err", err)
	kind, text := handOverFailure(err, cause, false, w.cfg.Handoff.Sender)
	ferr := rp.FailIfHeld(kctx, kind, text)
	if !errors.Is(ferr, queue.ErrLostClaim) {
		if !errors.Is(ferr, queue.ErrEnded) {
			w.publishUsage(kctx, log, rp, queue.OutcomeOf(kind), nil)
		}
		if ferr != nil {
			log.Error("sending error frame", "err", ferr)
		} else {
			log.Info("job failed", "kind", kind, "reason", text)
		}
		return
	}
	// A decode worker claimed the job after the hand-over was published.
	rp2, claim, cerr := res.Claim(kctx, w.nc, job)
	switch {
	case cerr != nil:
		log.Error("claiming the job back to fail it", "err", cerr)
	case claim == queue.ClaimRun:
		kind, text := handOverFailure(err, cause, true, w.cfg.Handoff.Sender)
		w.fail(kctx, log, rp2, kind, text)
	default:
		log.Info("the decode side ended or streamed the job; leaving it", "claim", claim)
	}
}

// handOverFailure maps a failed hand-over to an error kind and a message for
// the client. claimed says whether a decode worker had taken the hand-over.
func handOverFailure(err, cause error, claimed bool, cfg handoff.SenderConfig) (queue.ErrorKind, string) {
	switch {
	case errors.Is(cause, errAborted):
		return queue.ErrKindAborted, "the request was cancelled"
	case errors.Is(cause, context.DeadlineExceeded), errors.Is(err, context.DeadlineExceeded):
		return queue.ErrKindTimeout, "the request's deadline passed"
	case errors.Is(cause, errShutdown):
		return queue.ErrKindInternal, "worker shut down during the KV handoff"
	case errors.Is(err, queue.ErrQueueFull):
		return queue.ErrKindCapacity, "no decode capacity: the decode queue is full"
	case errors.Is(err, handoff.ErrAbandoned) && !claimed:
		wait := cfg.StartTimeout
		if wait == 0 {
			wait = cfg.IdleTimeout
		}
		if wait == 0 {
			wait = handoff.DefaultIdleTimeout
		}
		return queue.ErrKindCapacity, fmt.Sprintf("no decode worker took the request within %v", wait)
	}
	return queue.ErrKindInternal, "KV handoff failed: " + err.Error()
}

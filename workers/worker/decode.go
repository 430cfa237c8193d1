package worker

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/bulkhead-ai/bulkhead/queue"
	"github.com/bulkhead-ai/bulkhead/workers/engine"
	"github.com/bulkhead-ai/bulkhead/workers/handoff"
	"github.com/bulkhead-ai/bulkhead/workers/kvcache"
)

// handleDecode runs one delivery of a decode hand-over to its end: the KV
// pulled and verified and the answer streamed, or an error frame, or nothing
// (the job already ended, or another worker holds it).
func (w *Worker) handleDecode(ctx context.Context, res *queue.Results, model string, eng *engine.Engine, msg jetstream.Msg) {
	ctx, log, endDelivery := w.startDelivery(ctx, model, msg)
	defer endDelivery()
	log = log.With("role", RoleDecode)
	h, err := queue.DecodeHandover(msg.Data())
	if err != nil {
		w.refuseUndecodable(log, msg, err)
		return
	}
	job := &h.Job
	jobAttributes(ctx, job)
	log = log.With("job", job.ID, "tenant", job.Tenant)
	kctx := context.WithoutCancel(ctx)
	rp := w.claim(kctx, log, res, job, model, msg)
	if rp == nil {
		return
	}
	w.decode(ctx, kctx, log, res, rp, h, eng, msg)
}

// decode admits the job again with its own tokenizer, verifies the manifest
// against what it knows without trusting the prefill side, reserves exactly
// what the manifest names, pulls and imports every page, and only then
// resumes the request and streams it. Any failure frees the sequence and
// ends the job with an error; no path leads from a failed or partial
// transfer to Resume.
func (w *Worker) decode(ctx, kctx context.Context, log *slog.Logger, res *queue.Results, rp *queue.Replier,
	h *queue.Handover, eng *engine.Engine, msg jetstream.Msg) {
	job := &h.Job
	rctx, abort, release := jobContext(ctx, job)
	defer release()
	end := func(kind queue.ErrorKind, text string) {
		w.fail(kctx, log, rp, kind, text)
		w.settle(log, msg.Ack())
	}
	sub, cancelled, err := w.watchCancel(kctx, log, res, job, abort)
	if err != nil {
		end(queue.ErrKindInternal, "KV handoff failed: subscribing to cancel: "+err.Error())
		return
	}
	defer sub.Unsubscribe()
	if cancelled {
		end(queue.ErrKindAborted, "the request was cancelled")
		return
	}

	req, ref := admit(job, eng)
	if ref != nil {
		end(ref.kind, ref.msg)
		return
	}
	// The prompt's KV comes from the manifest: the prefill worker used the
	// tenant's prefix cache if the job asked; this engine neither looks up
	// nor publishes. Its usage reports the prefill side's count, which comes
	// from another node: bounded to the prompt this worker tokenized.
	req.CachePrefix = false
	cached := min(max(h.CachedTokens, 0), len(req.Prompt))
	m, err := handoff.DecodeManifest(h.Manifest)
	if err != nil {
		end(queue.ErrKindInternal, "KV handoff failed: "+err.Error())
		return
	}
	layout := eng.KV().Layout()
	if err := m.Verify(handoff.Expect{
		RequestID:     job.ID,
		Tenant:        job.Tenant,
		Model:         job.Model,
		WeightsDigest: eng.Model().Digest,
		PromptTokens:  req.Prompt,
		Layout:        handoff.Layout(layout),
		MaxPageBytes:  layout.PageBytes(layout.PageSize),
	}); err != nil {
		end(queue.ErrKindInternal, "KV handoff failed: "+err.Error())
		return
	}
	seq, err := eng.NewSequenceFor(req)
	switch {
	case errors.Is(err, kvcache.ErrPoolExhausted):
		// Busy, not broken: the sender waits StartTimeout for a taker.
		log.Info("KV pool full; requeueing the hand-over", "err", err)
		w.requeue(kctx, log, rp, msg, w.cfg.BusyDelay)
		return
	case err != nil:
		end(classify(err, nil))
		return
	}

	stopBeat := w.heartbeat(log, msg, rp)
	_, fspan := w.startSpan(rctx, spanHandoffReceive, attrModel.String(job.Model), attrPages.Int(len(m.Pages)))
	fetchStart, fetched := time.Now(), 0
	for _, pg := range m.Pages {
		fetched += pg.Bytes
	}
	rcfg := w.cfg.Handoff.Receiver
	if rcfg.MaxPageBytes == 0 {
		rcfg.MaxPageBytes = layout.PageBytes(layout.PageSize)
	}
	err = handoff.Fetch(rctx, w.nc, m, rcfg, func(i int, page []byte) error {
		return seq.ImportVerified(i, page, m.Pages[i].Checksum)
	})
	stopBeat()
	w.cfg.Metrics.handoff(job.Model, "receive", fetched, time.Since(fetchStart), err)
	fspan.SetAttributes(attrBytes.Int(fetched))
	endSpan(fspan, err)
	if err != nil {
		seq.Free()
		end(decodeFailure(err, context.Cause(rctx)))
		return
	}
	// Every page named by the manifest arrived, matched its checksum and was
	// imported: only now may the request run, and only from now on is it
	// billed (a hand-over that failed is the platform's loss, not the tenant's).
	rp.Started(len(req.Prompt), cached)
	events, err := eng.Resume(rctx, req, seq, m.FirstToken)
	if err != nil {
		seq.Free()
		end(classify(err, context.Cause(rctx)))
		return
	}
	w.stream(rctx, kctx, abort, log, rp, job, events, msg, false, cached, nil)
}

// decodeFailure maps a failed transfer to an error kind and message.
func decodeFailure(err, cause error) (queue.ErrorKind, string) {
	switch {
	case errors.Is(cause, errAborted):
		return queue.ErrKindAborted, "the request was cancelled"
	case errors.Is(cause, context.DeadlineExceeded), errors.Is(err, context.DeadlineExceeded):
		return queue.ErrKindTimeout, "the request's deadline passed"
	case errors.Is(cause, errShutdown):
		return queue.ErrKindInternal, "KV handoff failed: worker shut down"
	}
	return queue.ErrKindInternal, "KV handoff failed: " + err.Error()
}

package worker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/bulkhead-ai/bulkhead/queue"
	"github.com/bulkhead-ai/bulkhead/workers/engine"
	"github.com/bulkhead-ai/bulkhead/workers/handoff"
)

// prefill runs an admitted job's prompt on its engine and hands the request
// and its KV to a decode worker: it exports every page, builds the manifest,
// offers the pages (subscribed before the hand-over is published), publishes
// the hand-over on the decode stream and serves the transfer until the decode
// side is done. The prompt's pages go back to the pool however that ends.
// If the hand-over fails before the decode side streamed anything, the
// request ends with an error frame; the message is acked once the hand-over
// ended.
func (d *delivery) prefill(ctx context.Context) {
	rctx, _, stop, ok := d.begin(ctx)
	if !ok {
		return
	}
	defer stop()

	stopBeat := d.heartbeat()
	pctx, pspan := d.w.startSpan(rctx, spanPrefill, queue.AttrModel.String(d.job.Model), queue.AttrInTokens.Int(len(d.req.Prompt)))
	d.enterEngine()
	p, err := d.eng.Prefill(pctx, d.req)
	endSpan(pspan, err)
	if err != nil {
		stopBeat()
		d.refuse(rctx, err)
		return
	}
	d.rp.Started(p.PromptTokens, p.CachedTokens)
	err = d.handOver(rctx, p)
	p.Release() // Serve has returned: nothing reads the pages any more
	stopBeat()
	switch {
	case errors.Is(err, queue.ErrDuplicate):
		// An earlier delivery of this job published its hand-over (its ack
		// was lost): the decode side has the job. Failing it here would end
		// a job that is running or done.
		d.outcome = outcomeFinished
		d.log.Info("an earlier delivery handed the job over already; leaving it to the decode side")
	case err != nil:
		d.failHandOver(ctx, err, context.Cause(rctx))
	default:
		d.outcome = outcomeHandedOver
		d.log.Info("handed over to a decode worker", "prompt_tokens", p.PromptTokens, "cached_tokens", p.CachedTokens)
	}
	d.settleEnded(ctx)
}

// handOver exports p's pages, offers them and publishes the hand-over, then
// serves the transfer. It returns nil only when the decode side pulled every
// page and said it is done.
func (d *delivery) handOver(rctx context.Context, p *engine.Prefilled) (err error) {
	job, eng, w := d.job, d.eng, d.w
	// The decode side's spans are children of the send span: the hand-over
	// message carries its context.
	rctx, span := w.startSpan(rctx, spanHandoffSend, queue.AttrModel.String(job.Model))
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
		AdapterKey:    adapterKeyOf(d.req.Adapter),
		Prompt:        d.req.Prompt,
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
	d.log.Debug("hand-over published", "transfer", m.TransferID, "pages", len(pages))
	return snd.Serve(rctx)
}

// failHandOver ends a job whose hand-over failed, unless the decode side has
// taken it over meanwhile: it fails the job while this worker's claim is
// current; if a decode worker claimed it since, it claims it back and fails
// it only if nothing was streamed and it has not ended (a decode worker that
// streamed, or its redelivery, ends the job itself).
func (d *delivery) failHandOver(ctx context.Context, err, cause error) {
	kctx := context.WithoutCancel(ctx)
	kind, text := handOverFailure(err, cause, false, d.w.cfg.Handoff.Sender)
	if kind == queue.ErrKindAborted { // the client cancelled: routine
		d.log.Info("KV hand-over ended: the request was cancelled", "err", err)
	} else {
		d.log.Warn("KV hand-over failed", "err", err)
	}
	ferr := d.rp.FailIfHeld(kctx, kind, text)
	if !errors.Is(ferr, queue.ErrLostClaim) {
		if !errors.Is(ferr, queue.ErrEnded) {
			d.publishUsage(kctx, queue.OutcomeOf(kind), nil)
		}
		if ferr != nil {
			d.log.Error("sending error frame", "err", ferr)
		} else {
			d.log.Info("job failed", "kind", kind, "reason", text)
		}
		return
	}
	// A decode worker claimed the job after the hand-over was published.
	rp, claim, cerr := d.res.Claim(kctx, d.w.nc, d.job)
	switch {
	case cerr != nil:
		d.log.Error("claiming the job back to fail it", "err", cerr)
	case claim == queue.ClaimRun:
		d.rp = rp
		kind, text := handOverFailure(err, cause, true, d.w.cfg.Handoff.Sender)
		d.fail(kctx, kind, text)
	default:
		d.log.Info("the decode side ended or streamed the job; leaving it", "claim", claim)
	}
}

// handOverFailure maps a failed hand-over to an error kind and a message for
// the client: the shared cascade, then the sender's own cases. claimed says
// whether a decode worker had taken the hand-over.
func handOverFailure(err, cause error, claimed bool, cfg handoff.SenderConfig) (queue.ErrorKind, string) {
	if kind, text, ok := ended(err, cause, "worker shut down during the KV handoff"); ok {
		return kind, text
	}
	switch {
	case errors.Is(err, queue.ErrQueueFull):
		return queue.ErrKindCapacity, "no decode capacity: the decode queue is full"
	case errors.Is(err, handoff.ErrAbandoned) && !claimed:
		return queue.ErrKindCapacity, fmt.Sprintf("no decode worker took the request within %v", startTimeout(cfg))
	case errors.Is(err, handoff.ErrAbandoned), errors.Is(err, handoff.ErrTransfer):
		// The decode worker died or could not be reached mid-transfer:
		// the request may be sent again.
		return queue.ErrKindUnavailable, "KV handoff failed: the decode worker could not be reached; retry"
	}
	return queue.ErrKindInternal, "KV handoff failed: " + err.Error()
}

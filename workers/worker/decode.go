package worker

import (
	"context"
	"errors"
	"fmt"
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
	ctx, d := w.startDelivery(ctx, res, model, eng, msg)
	defer d.record()
	defer d.enterEngine() // if it never did
	d.log = d.log.With("role", RoleDecode)
	h, err := queue.DecodeHandover(msg.Data())
	if err != nil {
		d.refuseUndecodable(err)
		return
	}
	d.decoded(ctx, &h.Job)
	if !d.claim(ctx) {
		return
	}
	d.decode(ctx, h)
}

// decode admits the job again with its own tokenizer, verifies the manifest
// against what it knows without trusting the prefill side, reserves (in its
// tenant's turn) exactly what the manifest names, pulls and imports every page, and only then
// resumes the request and streams it. Any failure frees the sequence and
// ends the job with an error; no path leads from a failed or partial
// transfer to Resume.
func (d *delivery) decode(ctx context.Context, h *queue.Handover) {
	rctx, abort, release := jobContext(ctx, d.job)
	defer release()
	sub, cancelled, err := d.watchCancel(ctx, abort)
	if err != nil {
		d.end(ctx, queue.ErrKindInternal, "KV handoff failed: subscribing to cancel: "+err.Error())
		return
	}
	defer sub.Unsubscribe()
	if cancelled {
		d.end(ctx, queue.ErrKindAborted, "the request was cancelled")
		return
	}
	if !d.admit(ctx) {
		return
	}
	// The prompt's KV comes from the manifest: the prefill worker used the
	// tenant's prefix cache if the job asked; this engine neither looks up
	// nor publishes. Its usage reports the prefill side's count, which comes
	// from another node: bounded to the prompt this worker tokenized.
	d.req.CachePrefix = false
	cached := min(max(h.CachedTokens, 0), len(d.req.Prompt))
	m, err := d.verifyManifest(h.Manifest)
	if err != nil {
		d.end(ctx, queue.ErrKindInternal, "KV handoff failed: "+err.Error())
		return
	}
	seq, err := d.reserve(rctx)
	switch {
	case errors.Is(err, engine.ErrQueueFull):
		// Busy, not broken: the sender waits StartTimeout for a taker.
		d.log.Info("engine queue full; requeueing the hand-over", "err", err)
		d.requeue(ctx, d.w.cfg.BusyDelay)
		return
	case errors.Is(err, engine.ErrBroken):
		d.requeue(ctx, 0) // for another decode worker
		return
	case errors.Is(err, errNoRoom):
		// The sender has let the pages go by now: recompute them here.
		d.log.Info("no KV room while the sender held the pages; recomputing the prompt here", "err", err)
		d.resume(rctx, abort, cached, func() (<-chan engine.Event, error) {
			return d.eng.Recompute(rctx, d.req, m.FirstToken)
		})
		return
	case err != nil:
		kind, text := classify(err, context.Cause(rctx))
		d.end(ctx, kind, text)
		return
	}
	if err := d.fetchKV(rctx, m, seq); err != nil {
		seq.Free()
		kind, text := decodeFailure(err, context.Cause(rctx))
		d.end(ctx, kind, text)
		return
	}
	// Every page named by the manifest arrived, matched its checksum and was
	// imported: only now may the request run, and only from now on is it
	// billed (a hand-over that failed is the platform's loss, not the tenant's).
	d.resume(rctx, abort, cached, func() (<-chan engine.Event, error) {
		events, err := d.eng.Resume(rctx, d.req, seq, m.FirstToken)
		if err != nil {
			seq.Free()
		}
		return events, err
	})
}

// resume starts the request (a Resume or a Recompute) and streams it; cached is
// the prompt tokens the prefill side served from its prefix cache.
func (d *delivery) resume(rctx context.Context, abort context.CancelCauseFunc, cached int, start func() (<-chan engine.Event, error)) {
	d.rp.Started(len(d.req.Prompt), cached)
	events, err := start()
	d.enterEngine() // a transfer counted as not started yet; after the engine has it, as in run
	if err != nil {
		kind, text := classify(err, context.Cause(rctx))
		d.end(context.WithoutCancel(rctx), kind, text)
		return
	}
	d.stream(rctx, abort, events, cached, nil)
}

// verifyManifest decodes a hand-over's manifest and verifies it against what
// this worker knows: the job, its own weights, the prompt it tokenized and
// its pool's layout.
func (d *delivery) verifyManifest(raw []byte) (*handoff.Manifest, error) {
	m, err := handoff.DecodeManifest(raw)
	if err != nil {
		return nil, err
	}
	layout := d.eng.KV().Layout()
	err = m.Verify(handoff.Expect{
		RequestID:     d.job.ID,
		Tenant:        d.job.Tenant,
		Model:         d.job.Model,
		WeightsDigest: d.eng.Model().Digest,
		AdapterKey:    adapterKeyOf(d.req.Adapter),
		PromptTokens:  d.req.Prompt,
		Layout:        handoff.Layout(layout),
		MaxPageBytes:  layout.PageBytes(layout.PageSize),
	})
	if err != nil {
		return nil, err
	}
	return m, nil
}

// reserve waits, with the heartbeat running, for the KV the request needs in
// its tenant's turn (engine.Reserve): a pool full of other tenants' work
// makes room for it by preemption when its tenant is under its fair share,
// as it would for a job run here whole. It waits no longer than the prefill
// worker waits for a taker (its StartTimeout, from the hand-over's
// publication, less a tenth): past that the pages are gone, and it returns
// errNoRoom; the caller then recomputes the prompt here instead.
func (d *delivery) reserve(rctx context.Context) (*kvcache.Sequence, error) {
	stopBeat := d.heartbeat()
	defer stopBeat()
	wait := startTimeout(d.w.cfg.Handoff.Sender)
	from := time.Now()
	if md, err := d.msg.Metadata(); err == nil && md.Timestamp.Before(from) {
		from = md.Timestamp
	}
	ctx, cancel := context.WithDeadline(rctx, from.Add(wait-wait/10))
	defer cancel()
	seq, err := d.eng.Reserve(ctx, d.req)
	if err != nil && rctx.Err() == nil && ctx.Err() != nil {
		return nil, fmt.Errorf("%w within %v of the hand-over", errNoRoom, (wait - wait/10).Round(time.Millisecond))
	}
	return seq, err
}

// errNoRoom: the decode pool had no room for a hand-over's KV in time.
var errNoRoom = errors.New("no KV pages free for the request")

// startTimeout is how long a prefill worker with cfg waits for a decode
// worker to start pulling a hand-over.
func startTimeout(cfg handoff.SenderConfig) time.Duration {
	switch {
	case cfg.StartTimeout > 0:
		return cfg.StartTimeout
	case cfg.IdleTimeout > 0:
		return cfg.IdleTimeout
	}
	return handoff.DefaultIdleTimeout
}

// fetchKV pulls every page m names into seq, each checked against its
// checksum on import, with the heartbeat running; it returns nil only when
// all arrived.
func (d *delivery) fetchKV(rctx context.Context, m *handoff.Manifest, seq *kvcache.Sequence) error {
	stopBeat := d.heartbeat()
	_, span := d.w.startSpan(rctx, spanHandoffReceive, queue.AttrModel.String(d.job.Model), attrPages.Int(len(m.Pages)))
	start, fetched := time.Now(), 0
	for _, pg := range m.Pages {
		fetched += pg.Bytes
	}
	rcfg := d.w.cfg.Handoff.Receiver
	if rcfg.MaxPageBytes == 0 {
		layout := d.eng.KV().Layout()
		rcfg.MaxPageBytes = layout.PageBytes(layout.PageSize)
	}
	err := handoff.Fetch(rctx, d.w.nc, m, rcfg, func(i int, page []byte) error {
		return seq.ImportVerified(i, page, m.Pages[i].Checksum)
	})
	stopBeat()
	d.w.cfg.Metrics.handoff(d.job.Model, "receive", fetched, time.Since(start), err)
	span.SetAttributes(attrBytes.Int(fetched))
	endSpan(span, err)
	return err
}

// decodeFailure maps a failed transfer to an error kind and a message for
// the client: the shared cascade, then the transfer's error.
func decodeFailure(err, cause error) (queue.ErrorKind, string) {
	if kind, text, ok := ended(err, cause, "KV handoff failed: worker shut down"); ok {
		return kind, text
	}
	if errors.Is(err, handoff.ErrTransfer) {
		// The prefill worker died or could not be reached (a NATS server
		// failing over): nothing is wrong with the request, which may be
		// sent again.
		return queue.ErrKindUnavailable, "KV handoff failed: the prefill worker could not be reached; retry"
	}
	return queue.ErrKindInternal, "KV handoff failed: " + err.Error()
}

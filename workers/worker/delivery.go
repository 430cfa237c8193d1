package worker

import (
	"context"
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

// delivery is one delivery of a job message being run, from its message to
// its end: what every step of every role shares. It holds no context: each
// step takes the one it runs under as its first parameter. A step that
// writes a record (a frame, the job's record, a usage event, the message's
// settlement) detaches it from cancellation: records outlive a shutdown.
type delivery struct {
	w     *Worker
	log   *slog.Logger
	msg   jetstream.Msg
	res   *queue.Results
	model string         // the model whose subject the message came on
	eng   *engine.Engine // that model's engine
	job   *queue.Job     // set once the message decoded
	rp    *queue.Replier // set once the job was claimed
	req   engine.Request // set once the job was admitted
	span  trace.Span     // the delivery's consumer span; nil when not tracing

	// How the delivery ended, recorded as a metric and on the span by record.
	outcome string
	kind    queue.ErrorKind

	entered bool // the job reached the engine's queue, or ended (enterEngine)

	// stop is closed when the worker cancels its jobs (shutdown past its
	// grace): settleEnded stops writing a job's end again then.
	stop <-chan struct{}
}

// refusal is a job ended before it reached the engine.
type refusal struct {
	kind queue.ErrorKind
	msg  string
}

// decoded names the delivery's job once its message decoded.
func (d *delivery) decoded(ctx context.Context, job *queue.Job) {
	d.job = job
	jobAttributes(ctx, job)
	d.log = d.log.With("job", job.ID, "tenant", job.Tenant)
}

// claim applies the redelivery rule (queue.Results.Claim) to the delivery
// and reports whether the job is to run (d.rp set), or false once it settled
// the message (already finished, lost mid-stream, wrong model, or the claim
// failed).
func (d *delivery) claim(ctx context.Context) bool {
	ctx = context.WithoutCancel(ctx)
	rp, claim, err := d.res.Claim(ctx, d.w.nc, d.job)
	if err != nil {
		d.log.Warn("claiming job; will retry", "err", err)
		d.settle(d.msg.NakWithDelay(d.w.cfg.BusyDelay))
		return false
	}
	d.rp = rp
	switch claim {
	case queue.ClaimFinished:
		d.outcome = outcomeFinished
		d.log.Info("job already finished or cancelled; not running it")
		d.settle(d.msg.Ack())
		return false
	case queue.ClaimLostMidStream:
		if d.w.cfg.Role == RolePrefill {
			// Only decode workers stream: this job was handed over and
			// streamed (an ack of this worker's was lost). If that decode
			// worker died, the hand-over's redelivery ends the job.
			d.outcome = outcomeFinished
			d.log.Info("job redelivered after the decode side streamed it; leaving it to that side")
			d.settle(d.msg.Ack())
			return false
		}
		d.log.Warn("job redelivered after its worker sent frames; failing it")
		d.end(ctx, queue.ErrKindInternal, "worker lost mid-stream")
		return false
	}
	if d.job.Model != d.model {
		d.fail(ctx, queue.ErrKindUnknownModel, fmt.Sprintf("job for model %q arrived on the subject of %q", d.job.Model, d.model))
		d.settle(d.msg.Term())
		return false
	}
	return true
}

// admit checks the job against the engine's limits and sets d.req (see
// admit); it reports false once it refused the job (error frame, ack).
func (d *delivery) admit(ctx context.Context) bool {
	req, ref := admit(d.job, d.eng)
	if ref == nil && d.job.LoRA != nil {
		a, err := d.w.adapters.get(ctx, d.job, d.eng)
		if err != nil {
			d.log.Warn("LoRA adapter", "lora", d.job.LoRA.ID, "err", err)
			ref = adapterRefusal(err)
		}
		req.Adapter = a
	}
	if ref != nil {
		d.end(ctx, ref.kind, ref.msg)
		return false
	}
	d.req = req
	return true
}

// watchCancel subscribes abort to the job's cancel signal and then reads the
// job's cancel marker once more, reporting whether it was cancelled. The edge
// records the marker before it publishes the signal, and the subscription
// and the read go out on one connection in that order, so a cancel is either
// seen here or delivered to abort: none falls between the claim and the
// subscription. A marker that cannot be read is logged and taken as not
// cancelled (the signal still works). Only a failed subscription is an error;
// the caller unsubscribes sub.
func (d *delivery) watchCancel(ctx context.Context, abort context.CancelCauseFunc) (sub *nats.Subscription, cancelled bool, err error) {
	if d.w.cfg.beforeWatch != nil {
		d.w.cfg.beforeWatch(d.job)
	}
	sub, err = d.w.nc.Subscribe(queue.CancelSubject(d.job.ID), func(*nats.Msg) { abort(errAborted) })
	if err != nil {
		return nil, false, err
	}
	cancelled, err = d.res.Cancelled(context.WithoutCancel(ctx), d.job.ID)
	if err != nil {
		d.log.Warn("reading the job's cancel marker; running it", "err", err)
		return sub, false, nil
	}
	return sub, cancelled, nil
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
func (d *delivery) begin(ctx context.Context) (rctx context.Context, abort context.CancelCauseFunc, stop func(), ok bool) {
	rctx, abort, release := jobContext(ctx, d.job)
	sub, cancelled, err := d.watchCancel(ctx, abort)
	if err != nil {
		release()
		d.log.Warn("subscribing to cancel; will retry", "err", err)
		d.requeue(ctx, d.w.cfg.BusyDelay)
		return nil, nil, nil, false
	}
	if cancelled {
		_ = sub.Unsubscribe()
		release()
		d.end(ctx, queue.ErrKindAborted, "the request was cancelled")
		return nil, nil, nil, false
	}
	return rctx, abort, func() { _ = sub.Unsubscribe(); release() }, true
}

// refuse ends a job the engine did not take (Submit or Prefill returned err;
// ctx is the job's context): refused as busy when the job asked not to wait,
// requeued when the engine's queue is full, the engine is shutting down or
// broken (another worker takes the job) or the worker is shutting down,
// failed otherwise.
func (d *delivery) refuse(ctx context.Context, err error) {
	cause := context.Cause(ctx)
	switch {
	case errors.Is(err, engine.ErrQueueFull) && d.job.RejectIfBusy:
		d.end(ctx, queue.ErrKindCapacity, "the model is busy and the request asked not to wait")
	case errors.Is(err, engine.ErrQueueFull):
		d.requeue(ctx, d.w.cfg.BusyDelay)
	case errors.Is(err, engine.ErrClosed), errors.Is(err, engine.ErrBroken), errors.Is(cause, errShutdown):
		d.requeue(ctx, 0)
	default:
		kind, text := classify(err, cause)
		d.end(ctx, kind, text)
	}
}

// ended classifies why a job's context ended, from the cause of its context
// (nil while it runs) and the error its work returned: the cascade every
// role shares. shutdown is the message of a job cut off by the worker's
// shutdown. It reports false for an error that is none of these.
func ended(err, cause error, shutdown string) (queue.ErrorKind, string, bool) {
	switch {
	case errors.Is(cause, errAborted):
		return queue.ErrKindAborted, "the request was cancelled", true
	case errors.Is(cause, context.DeadlineExceeded), errors.Is(err, context.DeadlineExceeded):
		return queue.ErrKindTimeout, "the request's deadline passed", true
	case errors.Is(cause, errShutdown):
		return queue.ErrKindInternal, shutdown, true
	}
	return "", "", false
}

// classify maps an engine error (and the cause of the request's context, if
// it was cancelled) to an error kind and a message for the client: the
// shared cascade (ended), then the engine's own errors.
func classify(err, cause error) (queue.ErrorKind, string) {
	const shutdown = "worker shut down mid-stream"
	if kind, text, ok := ended(err, cause, shutdown); ok {
		return kind, text
	}
	switch {
	case errors.Is(err, engine.ErrBroken):
		return queue.ErrKindInternal, brokenMessage
	case errors.Is(err, engine.ErrClosed):
		return queue.ErrKindInternal, shutdown
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

// brokenMessage ends the requests of an engine that found a broken invariant
// (engine.ErrBroken): the panic's text goes to the worker's log only.
const brokenMessage = "the worker's engine stopped after a broken invariant; the request was ended"

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

// heartbeat sends a heartbeat frame on the job's reply subject at once and
// every queue.HeartbeatInterval, so the edge notices within
// queue.HeartbeatTimeout if this worker dies, and marks the message in
// progress every HeartbeatEvery, so JetStream does not redeliver it
// meanwhile, until the returned function is called (which waits for it to
// stop).
func (d *delivery) heartbeat() (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		beat := func() {
			if err := d.rp.Heartbeat(); err != nil {
				d.log.Warn("sending heartbeat", "err", err)
			}
		}
		beat()
		every := min(d.w.cfg.HeartbeatEvery, queue.HeartbeatInterval)
		perProgress := max(int(d.w.cfg.HeartbeatEvery/every), 1) // ticks per in-progress mark
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
				if err := d.msg.InProgress(); err != nil {
					d.log.Warn("marking job in progress", "err", err)
				}
			}
		}
	})
	return func() { close(done); wg.Wait() }
}

// end fails the job (fail) and acks its message (settleEnded).
func (d *delivery) end(ctx context.Context, kind queue.ErrorKind, text string) {
	d.fail(ctx, kind, text)
	d.settleEnded(ctx)
}

// recordRetryEvery is the pause between two writes of an unrecorded end.
const recordRetryEvery = time.Second

// settleEnded acks the message of a job that ended. An async job's record
// is its only answer: while its end is unrecorded, the message is kept in
// progress and the end written again, for up to queue.EndRetry; one still
// unrecorded then (or when the worker cancels its jobs) is given back, so
// the job runs again, rather than acked with its answer nowhere. A
// synchronous job's client has its answer in its frames already.
func (d *delivery) settleEnded(ctx context.Context) {
	if d.rp == nil || !d.rp.Unrecorded() || !d.job.Async {
		d.settle(d.msg.Ack())
		return
	}
	ctx = context.WithoutCancel(ctx)
	deadline := time.Now().Add(queue.EndRetry)
	for d.rp.Unrecorded() && time.Now().Before(deadline) {
		select {
		case <-d.stop:
			deadline = time.Now()
			continue
		case <-time.After(recordRetryEvery):
		}
		if err := d.msg.InProgress(); err != nil {
			d.log.Warn("marking job in progress", "err", err)
		}
		switch err := d.rp.RecordEnd(ctx); {
		case errors.Is(err, queue.ErrLostClaim):
			d.log.Info("the job's record moved on (claimed again, or an earlier write was stored); leaving it", "err", err)
		case err != nil && d.rp.Unrecorded():
			d.log.Warn("recording the job's end; will retry", "err", err)
		case err != nil:
			d.log.Warn("the job's end is recorded; announcing it failed", "err", err)
		default:
			d.log.Info("the job's end is recorded")
		}
	}
	if d.rp.Unrecorded() {
		d.log.Error("the job's end could not be recorded; giving the job back to run again")
		d.outcome = outcomeRequeued
		d.settle(d.msg.NakWithDelay(d.w.cfg.BusyDelay))
		return
	}
	d.settle(d.msg.Ack())
}

// fail ends the job with an error frame. Prefill and decode workers share
// each job's record across the hand-over, so they fail it only while their
// claim is current (Replier.FailIfHeld): at most one of them ends the stream.
func (d *delivery) fail(ctx context.Context, kind queue.ErrorKind, text string) {
	ctx = context.WithoutCancel(ctx)
	d.log.Info("job refused or failed", "kind", kind, "reason", text)
	d.outcome, d.kind = outcomeFailed, kind
	trace.SpanFromContext(ctx).SetStatus(codes.Error, text)
	var err error
	if d.w.cfg.Role == RoleUnified {
		// This worker alone ends the job: its usage event goes first (see
		// stream's final frame).
		d.publishUsage(ctx, queue.OutcomeOf(kind), nil)
		err = d.rp.Fail(ctx, kind, text)
	} else {
		err = d.rp.FailIfHeld(ctx, kind, text)
		if !errors.Is(err, queue.ErrLostClaim) && !errors.Is(err, queue.ErrEnded) {
			d.publishUsage(ctx, queue.OutcomeOf(kind), nil)
		}
	}
	switch {
	case errors.Is(err, queue.ErrLostClaim):
		d.log.Info("the job moved on to another worker; not failing it here", "err", err)
	case err != nil:
		d.log.Error("sending error frame", "err", err)
	}
}

// requeue gives the job back for another delivery after delay.
func (d *delivery) requeue(ctx context.Context, delay time.Duration) {
	d.outcome = outcomeRequeued
	if err := d.rp.Requeue(context.WithoutCancel(ctx)); err != nil {
		d.log.Warn("requeueing job record", "err", err)
	}
	if delay > 0 {
		d.settle(d.msg.NakWithDelay(delay))
	} else {
		d.settle(d.msg.Nak())
	}
}

// settle logs a failed acknowledgement of the message.
func (d *delivery) settle(err error) {
	if err != nil {
		d.log.Warn("acknowledging job message", "err", err)
	}
}

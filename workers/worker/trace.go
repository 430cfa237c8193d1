package worker

import (
	"context"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/bulkhead-ai/bulkhead/queue"
	"github.com/bulkhead-ai/bulkhead/workers/engine"
)

// tracerName is the instrumentation scope of the worker's spans.
const tracerName = "github.com/bulkhead-ai/bulkhead/workers/worker"

// Span names (docs/operations.md lists them).
const (
	spanQueueWait      = "queue.wait"
	spanJob            = "worker.job"
	spanPrefill        = "engine.prefill"
	spanDecode         = "engine.decode"
	spanHandoffSend    = "handoff.send"
	spanHandoffReceive = "handoff.receive"
)

// The worker's own span attribute keys (the ones every node sets are
// queue.Attr*). Prompt and completion text are never attributes.
const (
	attrRole   = attribute.Key("bulkhead.role")
	attrCached = attribute.Key("bulkhead.usage.cached_tokens")
	attrPages  = attribute.Key("bulkhead.handoff.pages")
	attrBytes  = attribute.Key("bulkhead.handoff.bytes")
)

// Job outcomes, the outcome label of bulkhead_worker_jobs_total.
const (
	outcomeDone       = "done"
	outcomeHandedOver = "handed_over"
	outcomeFailed     = "failed"
	outcomeRequeued   = "requeued"
	outcomeFinished   = "finished" // already ended or cancelled: not run
)

// startDelivery begins one delivery of a job message: the trace context from
// its headers, the queue-wait span and histogram (from the stream's
// timestamp to now), and the consumer span of the job, with the log carrying
// its trace and span ids. The delivery's record method records its outcome
// as a metric and on the span and ends it.
func (w *Worker) startDelivery(ctx context.Context, res *queue.Results, model string, eng *engine.Engine, msg jetstream.Msg) (context.Context, *delivery) {
	ctx = queue.ExtractTrace(ctx, msg.Headers())
	now := time.Now()
	if meta, err := msg.Metadata(); err == nil && !meta.Timestamp.IsZero() && meta.Timestamp.Before(now) {
		w.cfg.Metrics.waited(model, w.cfg.Role, now.Sub(meta.Timestamp))
		if w.tracing {
			_, wait := w.tracer.Start(ctx, spanQueueWait, trace.WithTimestamp(meta.Timestamp),
				trace.WithAttributes(queue.AttrModel.String(model), attrRole.String(string(w.cfg.Role))))
			wait.End(trace.WithTimestamp(now))
		}
	}
	d := &delivery{w: w, log: w.log.With("model", model), msg: msg, res: res, model: model, eng: eng, stop: ctx.Done()}
	if w.tracing {
		ctx, d.span = w.tracer.Start(ctx, spanJob, trace.WithSpanKind(trace.SpanKindConsumer),
			trace.WithAttributes(queue.AttrModel.String(model), attrRole.String(string(w.cfg.Role)),
				attribute.String("messaging.system", "nats"),
				attribute.String("messaging.destination.name", msg.Subject())))
		sc := d.span.SpanContext()
		d.log = d.log.With("trace_id", sc.TraceID().String(), "span_id", sc.SpanID().String())
	}
	return ctx, d
}

// record ends a delivery: its outcome as a metric and on its span.
func (d *delivery) record() {
	outcome := d.outcome
	if outcome == "" {
		outcome = outcomeFailed
	}
	d.w.cfg.Metrics.job(d.w.cfg.Name, d.model, d.w.cfg.Role, outcome)
	if outcome == outcomeDone || outcome == outcomeHandedOver {
		d.w.jobsDone.Add(1)
	}
	if d.span != nil {
		d.span.SetAttributes(queue.AttrOutcome.String(outcome))
		if d.kind != "" {
			d.span.SetAttributes(queue.AttrErrorType.String(string(d.kind)))
		}
		d.span.End()
	}
}

// jobAttributes names the job on the delivery's span once it is decoded:
// tenant, request id, API key, metadata and requested tokens, never its
// text.
func jobAttributes(ctx context.Context, job *queue.Job) {
	span := trace.SpanFromContext(ctx)
	if span.IsRecording() {
		span.SetAttributes(queue.JobAttributes(job)...)
		span.SetAttributes(queue.AttrMaxTokens.Int(job.MaxTokens))
	}
}

// startSpan starts a child span when tracing is on; the returned span is
// never nil.
func (w *Worker) startSpan(ctx context.Context, name string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	if !w.tracing {
		return ctx, trace.SpanFromContext(context.Background())
	}
	return w.tracer.Start(ctx, name, trace.WithAttributes(attrs...))
}

// endSpan ends span, marking it failed when err is not nil.
func endSpan(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

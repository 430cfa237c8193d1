package worker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"

	"github.com/bulkhead-ai/bulkhead/queue"
	"github.com/bulkhead-ai/bulkhead/workers/encoder"
	"github.com/bulkhead-ai/bulkhead/workers/engine"
)

// handleEmbed runs one delivery of an encoder job (queue.Job.Embed) to its
// end: its inputs encoded in the model's shared passes (encoder.Server) and
// one final frame with their vectors, a refusal, or a requeue. It shares
// every step but the work with handle: decode, claim, the cancel watch, the
// heartbeat, the usage event before the final frame.
func (w *Worker) handleEmbed(ctx context.Context, res *queue.Results, model string, srv *encoder.Server, msg jetstream.Msg) {
	ctx, d := w.startDelivery(ctx, res, model, nil, msg)
	defer d.record()
	defer d.enterEngine() // if it never did
	if !d.take(ctx) {
		return
	}
	job, info := d.job, srv.Info()
	inputs, tokens, ref := embedInputs(job, info)
	if ref != nil {
		d.end(ctx, ref.kind, ref.msg)
		return
	}
	rctx, _, stop, ok := d.begin(ctx)
	if !ok {
		return
	}
	defer stop()
	d.enterEngine()
	d.rp.Started(tokens, 0)
	stopBeat := d.heartbeat()
	vecs, err := srv.Embed(rctx, job.Tenant, inputs)
	stopBeat()
	if err != nil {
		d.refuseEmbed(rctx, err)
		return
	}
	pooling := info.Pooling
	if job.Embed.Normalize && pooling != encoder.PoolRank {
		for _, v := range vecs {
			encoder.Normalize(v)
		}
	}
	kctx := context.WithoutCancel(ctx)
	u := queue.Usage{PromptTokens: tokens}
	d.publishUsage(kctx, "stop", &u)
	if err := d.rp.FinalVectors(kctx, queue.PackVectors(vecs, pooling.String()), u); err != nil {
		d.log.Error("sending final frame", "err", err)
	}
	d.outcome = outcomeDone
	d.w.cfg.Metrics.usage(d.w.cfg.Name, job.Model, u)
	if span := trace.SpanFromContext(kctx); span.IsRecording() {
		span.SetAttributes(queue.AttrInTokens.Int(tokens), queue.AttrOutTokens.Int(0))
	}
	d.settleEnded(kctx)
}

// refuseEmbed ends an encoder job whose inputs the server did not encode:
// requeued when the server is full (or refused as busy when the job asked
// not to wait) or closing, failed otherwise.
func (d *delivery) refuseEmbed(ctx context.Context, err error) {
	cause := context.Cause(ctx)
	switch {
	case errors.Is(err, encoder.ErrQueueFull) && d.job.RejectIfBusy:
		d.end(ctx, queue.ErrKindCapacity, "the model is busy and the request asked not to wait")
	case errors.Is(err, encoder.ErrQueueFull):
		d.requeue(ctx, d.w.cfg.BusyDelay)
	case errors.Is(err, encoder.ErrClosed), errors.Is(cause, errShutdown):
		d.requeue(ctx, 0)
	default:
		kind, text, ok := ended(err, cause, "worker shut down mid-request")
		if !ok {
			kind, text = queue.ErrKindInternal, "the worker failed to encode the inputs"
			if errors.Is(err, encoder.ErrTooLong) || errors.Is(err, encoder.ErrBadToken) || errors.Is(err, encoder.ErrEmptyInput) ||
				errors.Is(err, engine.ErrEmbedInput) || errors.Is(err, engine.ErrContextLength) {
				kind, text = queue.ErrKindInvalidInput, err.Error()
			}
		}
		d.end(ctx, kind, text)
	}
}

// embedInputs turns an encoder job's inputs into the model's token ids and
// counts them. Texts are tokenized with the model's special tokens (a
// reranker's as (query, text) pairs); token ids are taken as sent, with the
// model's opening and closing special tokens added where missing. An input
// over the model's window is refused, or cut to it (keeping its closing
// token) when the job asks; nothing is truncated silently.
func embedInputs(job *queue.Job, m encoder.Info) ([][]int32, int, *refusal) {
	if !time.Now().Before(job.Deadline) {
		return nil, 0, &refusal{queue.ErrKindTimeout, "deadline passed before the job started"}
	}
	e := job.Embed
	if e == nil {
		return nil, 0, &refusal{queue.ErrKindInvalidInput, fmt.Sprintf("model %q encodes; it does not generate text", job.Model)}
	}
	rank := m.Pooling == encoder.PoolRank
	switch {
	case rank && (e.Query == "" || len(e.Tokens) > 0):
		return nil, 0, &refusal{queue.ErrKindInvalidInput, fmt.Sprintf("model %q ranks texts against a query: give a query and texts", job.Model)}
	case !rank && e.Query != "":
		return nil, 0, &refusal{queue.ErrKindInvalidInput, fmt.Sprintf("model %q embeds texts; it takes no query", job.Model)}
	}
	tok := m.Tokenizer
	var inputs [][]int32
	for _, text := range e.Inputs {
		if rank {
			inputs = append(inputs, tok.EncodePair(e.Query, text))
		} else {
			inputs = append(inputs, tok.Encode(text, true, false))
		}
	}
	for i, ids := range e.Tokens {
		if len(ids) == 0 {
			return nil, 0, &refusal{queue.ErrKindInvalidInput, fmt.Sprintf("input %d is an empty list of tokens", i)}
		}
		in := make([]int32, 0, len(ids)+2)
		if tok.AddBOS() && ids[0] != tok.BOS() {
			in = append(in, tok.BOS())
		}
		in = append(in, ids...)
		if tok.AddEOS() && ids[len(ids)-1] != tok.EOS() {
			in = append(in, tok.EOS())
		}
		inputs = append(inputs, in)
	}
	window, total := m.Window, 0
	for i, ids := range inputs {
		if len(ids) > window {
			if !e.Truncate {
				return nil, 0, &refusal{queue.ErrKindPromptTooLong, fmt.Sprintf(
					"input %d of %d tokens exceeds the model's window of %d tokens", i, len(ids), window)}
			}
			ids = append(ids[:window-1:window-1], ids[len(ids)-1])
			inputs[i] = ids
		}
		for _, id := range ids {
			if id < 0 || int(id) >= m.Vocab {
				return nil, 0, &refusal{queue.ErrKindInvalidInput, fmt.Sprintf("input %d holds token %d; the model's vocabulary has %d", i, id, m.Vocab)}
			}
		}
		total += len(ids)
	}
	return inputs, total, nil
}

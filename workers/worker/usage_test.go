package worker

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/bulkhead-ai/bulkhead/billing/price"
	"github.com/bulkhead-ai/bulkhead/queue"
	"github.com/bulkhead-ai/bulkhead/workers/engine"
)

// TestUsageEvents: every job the engine took leaves exactly one usage event
// on the usage stream, with Nats-Msg-Id = request id, whatever its outcome,
// billed for what ran: a completed job for its final usage at the job's
// rates, a job cancelled mid-stream for its prompt and the tokens produced
// before the cancel.
func TestUsageEvents(t *testing.T) {
	ev := startNATS(t)
	e := startEngine(t, engine.Config{})
	startWorker(t, ev, Config{Models: map[string]*engine.Engine{model: e}, ID: "worker-under-test"})
	ctx := context.Background()
	rates := &queue.Rates{Prompt: 1000, CachedPrompt: 100, Completion: 10000}

	cons, err := queue.EnsureUsageConsumer(ctx, ev.js, queue.UsageConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	next := func(t *testing.T) (*queue.UsageEvent, jetstream.Msg) {
		t.Helper()
		msgs, err := cons.Fetch(1, jetstream.FetchMaxWait(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		m, ok := <-msgs.Messages()
		if !ok {
			t.Fatalf("no usage event: %v", msgs.Error())
		}
		if err := m.Ack(); err != nil {
			t.Fatal(err)
		}
		u, err := queue.DecodeUsage(m.Data())
		if err != nil {
			t.Fatal(err)
		}
		return u, m
	}

	t.Run("completed", func(t *testing.T) {
		job := newJob(t, "Once upon a time", 12)
		job.Rates = rates
		r, err := ev.client.Submit(ctx, job)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		frames, _ := collect(t, r)
		last := frames[len(frames)-1]
		if last.Kind != queue.KindFinal {
			t.Fatalf("last frame %+v", last)
		}
		u, m := next(t)
		want := price.Micro(*rates, price.Usage{PromptTokens: last.Usage.PromptTokens, CompletionTokens: last.Usage.CompletionTokens})
		switch {
		case u.RequestID != job.ID || m.Headers().Get(jetstream.MsgIDHeader) != job.ID:
			t.Fatalf("event %+v with message id %q, want request %s", u, m.Headers().Get(jetstream.MsgIDHeader), job.ID)
		case u.PromptTokens != last.Usage.PromptTokens || u.CompletionTokens != last.Usage.CompletionTokens:
			t.Fatalf("event %+v, final usage %+v", u, last.Usage)
		case u.Finish != last.Finish || u.WorkerID != "worker-under-test" || u.Tenant != job.Tenant || u.Model != model:
			t.Fatalf("event %+v", u)
		case u.MicroNeurons != want || u.MicroNeurons == 0:
			t.Fatalf("event costs %d micro-neurons, want %d", u.MicroNeurons, want)
		case u.TTFTMs <= 0 || u.TotalMs < u.TTFTMs || u.QueueMs > u.TotalMs:
			t.Fatalf("times queue %d, ttft %d, total %d ms", u.QueueMs, u.TTFTMs, u.TotalMs)
		}
	})

	t.Run("cancelled mid-stream", func(t *testing.T) {
		job := newJob(t, "Once upon a time", 1500)
		job.Sampling.Temperature, job.Sampling.Seed = 1, 7 // long enough to cancel
		job.Rates = rates
		r, err := ev.client.Submit(ctx, job)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		seen := 0
		for seen < 5 {
			f, err := r.Next(ctx)
			if err != nil {
				t.Fatalf("after %d frames: %v", seen, err)
			}
			if f.Kind != queue.KindToken {
				t.Fatalf("frame %+v before the cancel", f)
			}
			seen++
		}
		if err := ev.client.Cancel(t.Context(), job.ID); err != nil {
			t.Fatal(err)
		}
		var produced int
		for {
			f, err := r.Next(ctx)
			if err != nil {
				t.Fatalf("stream ended with %v, want an aborted frame", err)
			}
			if f.Kind == queue.KindToken {
				produced++
				continue
			}
			if f.Kind != queue.KindError || f.Error.Kind != queue.ErrKindAborted {
				t.Fatalf("last frame %+v", f)
			}
			break
		}
		produced += seen
		u, _ := next(t)
		prompt := len(e.Model().Tokenizer.Encode(job.Prompt, job.AddBOS, false))
		want := price.Micro(*rates, price.Usage{PromptTokens: prompt, CompletionTokens: produced})
		if u.RequestID != job.ID || u.Finish != queue.OutcomeCancelled || u.CompletionTokens != produced ||
			u.PromptTokens != prompt || u.MicroNeurons != want {
			t.Fatalf("event %+v; want cancelled, %d prompt and %d completion tokens, %d micro-neurons", u, prompt, produced, want)
		}
	})

	t.Run("a duplicate event is dropped by the stream", func(t *testing.T) {
		dup := &queue.UsageEvent{Tenant: "t", Model: model, RequestID: "dup-1", Finish: queue.OutcomeStop, Time: time.Now()}
		for range 2 {
			if err := queue.PublishUsage(ctx, ev.js, dup); err != nil {
				t.Fatal(err)
			}
		}
		if u, _ := next(t); u.RequestID != "dup-1" {
			t.Fatalf("event %+v", u)
		}
		msgs, err := cons.Fetch(1, jetstream.FetchMaxWait(300*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		for m := range msgs.Messages() {
			t.Fatalf("second event delivered: %s", m.Data())
		}
		if err := msgs.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) && !errors.Is(err, context.DeadlineExceeded) {
			t.Fatal(err)
		}
	})
}

// TestUsageEventMetadata: a job's metadata is carried into its usage event.
func TestUsageEventMetadata(t *testing.T) {
	job := newJob(t, "Once", 4)
	job.Metadata = map[string]string{"app": "checkout"}
	job.User = "u-17"
	ev := usageEvent(job, queue.Meter{Claimed: time.Now()}, queue.OutcomeStop, &queue.Usage{PromptTokens: 2, CompletionTokens: 4}, "w", time.Now())
	if ev.Metadata["app"] != "checkout" || ev.User != "u-17" {
		t.Fatalf("usage event metadata %v", ev.Metadata)
	}
	if err := ev.Validate(); err != nil {
		t.Fatal(err)
	}
}

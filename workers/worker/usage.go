package worker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"time"

	"github.com/bulkhead-ai/bulkhead/billing/price"
	"github.com/bulkhead-ai/bulkhead/queue"
)

// usagePublishTimeout bounds how long a job's end waits to store its usage
// event (retries included): longer than a JetStream cluster takes to elect a
// new stream leader after losing a server.
const usagePublishTimeout = 20 * time.Second

// usageTryTimeout bounds one try: a publish sent to a server that then died
// is never answered, and must not use up the whole timeout.
const usageTryTimeout = 2 * time.Second

// publishUsage publishes the one usage event of the delivery's job, which is
// ending with outcome. final is the usage its final frame reports; nil for a
// job that failed, which is billed for what ran: the prompt the engine took
// (Replier.Started) and the tokens produced so far. A job refused or
// cancelled before the engine took it cost nothing and has no event.
func (d *delivery) publishUsage(ctx context.Context, outcome string, final *queue.Usage) {
	rp := d.rp
	if final == nil && !rp.Meter().Started {
		return
	}
	ev := usageEvent(rp.Job(), rp.Meter(), outcome, final, d.w.cfg.ID, time.Now())
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), usagePublishTimeout)
	defer cancel()
	var err error
	for attempt := 0; ; attempt++ {
		tctx, tcancel := context.WithTimeout(ctx, usageTryTimeout)
		err = queue.PublishUsage(tctx, d.w.js, ev)
		tcancel()
		if err == nil {
			return
		}
		// Retry until the timeout: a stream whose leader was lost answers
		// nothing until a new one is elected (seconds), and the message id
		// makes a retry of a publish that did land a no-op.
		if ctx.Err() != nil {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(min(time.Duration(50<<min(attempt, 5))*time.Millisecond, time.Second)):
		}
	}
	d.log.Error("publishing usage event: this request goes unbilled", "err", err, "outcome", outcome,
		"prompt_tokens", ev.PromptTokens, "completion_tokens", ev.CompletionTokens)
}

// usageEvent builds the usage event of job, ended at end with outcome.
func usageEvent(job *queue.Job, m queue.Meter, outcome string, final *queue.Usage, workerID string, end time.Time) *queue.UsageEvent {
	var u price.Usage
	switch {
	case final != nil:
		u = price.Usage{PromptTokens: final.PromptTokens, CachedTokens: final.CachedTokens, CompletionTokens: final.CompletionTokens}
	case m.Started:
		u = price.Usage{PromptTokens: m.PromptTokens, CachedTokens: m.CachedTokens, CompletionTokens: m.Tokens}
	}
	rates := price.Default()
	if job.Rates != nil {
		rates = *job.Rates
	}
	micro := price.Micro(rates, u)
	from := job.Submitted
	if from.IsZero() || from.After(m.Claimed) {
		from = m.Claimed // no (or a skewed) submission time: measure from the claim
	}
	ms := func(t time.Time) int64 { return max(t.Sub(from).Milliseconds(), 0) }
	ev := &queue.UsageEvent{
		Tenant: job.Tenant, Key: job.Key, Model: job.Model, RequestID: job.ID,
		PromptTokens: u.PromptTokens, CachedTokens: min(u.CachedTokens, u.PromptTokens), CompletionTokens: u.CompletionTokens,
		Finish: outcome, Time: end.UTC(),
		MicroNeurons: micro, Neurons: price.Neurons(micro),
		QueueMs: ms(m.Claimed), TotalMs: ms(end), WorkerID: workerID,
		Metadata: job.Metadata, User: job.User,
	}
	if !m.FirstToken.IsZero() {
		ev.TTFTMs = max(ms(m.FirstToken), 1)
	}
	return ev
}

// defaultID names a worker: host, pid and 4 random bytes.
func defaultID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "worker"
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}

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
	// Retried for a while: a stream whose leader was lost answers nothing
	// until a new one is elected (seconds), and the message id makes a
	// retry of a publish that did land a no-op.
	err := queue.PublishRetrying(ctx, func(ctx context.Context) error { return queue.PublishUsage(ctx, d.w.js, ev) })
	if err == nil {
		return
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
	if job.LoRA != nil {
		ev.LoRA, ev.LoRAName = job.LoRA.ID, job.LoRA.Name
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

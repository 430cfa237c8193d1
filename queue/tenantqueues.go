package queue

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Fair dequeue across tenants (docs/fairness.md, "The queue").
//
// Each tenant's jobs for a model wait on their own subject
// (TenantJobSubject), and each such subject has its own durable pull
// consumer, shared by every worker of the model (TenantConsumerName). A
// worker therefore chooses *which tenant* it takes its next job from, by
// the same virtual token counters its engine schedules with: a tenant's
// backlog in the stream never stands in front of another tenant's job.
//
// A worker learns which tenants have jobs from a doorbell the edge rings
// after each publish (ReadySubject, core NATS, no payload) and, as a safety
// net for edges that ring none and for bells lost with a server, from the
// stream's per-subject counts every TenantRefresh.

// ReadyPrefix is the subject prefix of the doorbells the edge rings after
// publishing a job: ReadyPrefix + model token + "." + tenant token.
const ReadyPrefix = "bulkhead.jobready."

// ReadySubject is the doorbell of tenant's jobs for model.
func ReadySubject(model, tenant string) string {
	return ReadyPrefix + ModelToken(model) + "." + TenantToken(tenant)
}

// LegacyQueue is the key TenantQueues uses for jobs on the model's own
// subject (JobSubject, published by edges older than per-tenant subjects).
const LegacyQueue = ""

// TenantConsumerName is the durable consumer of one tenant's jobs for a
// model (token is TenantToken of the tenant), shared by every worker
// serving the model; LegacyQueue's is ConsumerName(model).
func TenantConsumerName(model, token string) string {
	if token == LegacyQueue {
		return ConsumerName(model)
	}
	return ConsumerName(model) + "-" + token
}

// TenantRefresh is how often TenantQueues reads the stream's per-subject
// counts while it knows of no tenant with jobs.
const TenantRefresh = 250 * time.Millisecond

// tenantConsumerIdle is how long a tenant's consumer lives with no pull
// before the server deletes it (a later job recreates it; jobs stay in the
// stream meanwhile): an hour, the jobs' default MaxAge.
const tenantConsumerIdle = time.Hour

// TenantQueues is one model's per-tenant job queues as a worker reads them.
// Its methods are safe for concurrent use.
type TenantQueues struct {
	js    jetstream.JetStream
	model string
	cfg   ConsumerConfig
	sub   *nats.Subscription
	bell  chan struct{} // capacity 1: a doorbell rang

	mu      sync.Mutex                    // guards the fields below
	pending map[string]uint64             // tenant tokens that may have jobs waiting -> rings (and refreshes) so far
	cons    map[string]jetstream.Consumer // consumers created or joined, by token
	last    time.Time                     // the last refresh from the stream
}

// OpenTenantQueues joins model's per-tenant queues: it narrows the model's
// own consumer (ConsumerName) to the legacy subject, so that the per-tenant
// consumers' filters do not overlap it (a work-queue stream requires that),
// subscribes to the model's doorbells and reads which tenants have jobs.
// Close releases the subscription.
func OpenTenantQueues(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, model string, cfg ConsumerConfig) (*TenantQueues, error) {
	legacy, err := ensureConsumer(ctx, js, durable{stream: JobsStream, model: model, name: ConsumerName(model),
		subjects: []string{JobSubject(model)}, description: "jobs for " + model + " from edges without per-tenant subjects"}, cfg)
	if err != nil {
		return nil, err
	}
	q := &TenantQueues{js: js, model: model, cfg: cfg, bell: make(chan struct{}, 1),
		pending: map[string]uint64{LegacyQueue: 1}, cons: map[string]jetstream.Consumer{LegacyQueue: legacy}}
	prefix := ReadyPrefix + ModelToken(model) + "."
	q.sub, err = nc.Subscribe(prefix+"*", func(m *nats.Msg) {
		q.mark(strings.TrimPrefix(m.Subject, prefix))
	})
	if err != nil {
		return nil, fmt.Errorf("queue: doorbells of %s: %w", model, err)
	}
	if err := q.Refresh(ctx); err != nil {
		q.Close()
		return nil, err
	}
	return q, nil
}

// Legacy is the consumer of the model's own subject (metrics read its lag).
func (q *TenantQueues) Legacy() jetstream.Consumer {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.cons[LegacyQueue]
}

// Close unsubscribes from the doorbells.
func (q *TenantQueues) Close() {
	if q.sub != nil {
		q.sub.Unsubscribe()
	}
}

func (q *TenantQueues) mark(token string) {
	if !validToken(token) {
		return
	}
	q.mu.Lock()
	q.pending[token]++
	q.mu.Unlock()
	select {
	case q.bell <- struct{}{}:
	default:
	}
}

// validToken reports whether s can be a subject token TenantToken made.
func validToken(s string) bool {
	if s == "" || len(s) > 200 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return false
		}
	}
	return true
}

// Refresh marks every tenant whose subject holds jobs (waiting or running)
// as pending, from the stream's per-subject counts, and the legacy queue.
func (q *TenantQueues) Refresh(ctx context.Context) error {
	counts, err := q.counts(ctx)
	if err != nil {
		return err
	}
	prefix := JobSubject(q.model) + "."
	q.mu.Lock()
	defer q.mu.Unlock()
	q.last = time.Now()
	q.pending[LegacyQueue]++
	for subj, n := range counts {
		if tok := strings.TrimPrefix(subj, prefix); n > 0 && validToken(tok) {
			q.pending[tok]++
		}
	}
	return nil
}

// Depth is how many of the model's jobs the stream holds (waiting or
// running, legacy subject included) and how many tenants they belong to:
// what metrics and autoscalers read, since no one consumer's lag counts them
// all.
func (q *TenantQueues) Depth(ctx context.Context) (jobs, tenants int, err error) {
	counts, err := q.counts(ctx)
	if err != nil {
		return 0, 0, err
	}
	for _, n := range counts {
		jobs += int(n)
		tenants++
	}
	if info, err := q.Legacy().Info(ctx); err == nil {
		jobs += int(info.NumPending) + info.NumAckPending
	}
	return jobs, tenants, nil
}

// counts are the jobs the stream holds on each tenant subject of the model.
func (q *TenantQueues) counts(ctx context.Context) (map[string]uint64, error) {
	st, err := q.js.Stream(ctx, JobsStream)
	if err != nil {
		return nil, fmt.Errorf("queue: stream %s: %w", JobsStream, err)
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(JobSubject(q.model)+".*"))
	if err != nil {
		return nil, fmt.Errorf("queue: stream %s: %w", JobsStream, err)
	}
	return info.State.Subjects, nil
}

// Pending lists the tenant tokens that may have jobs waiting (LegacyQueue
// among them). A token stays listed until a Fetch from it finds nothing.
func (q *TenantQueues) Pending() []string {
	q.mu.Lock()
	defer q.mu.Unlock()
	out := make([]string, 0, len(q.pending))
	for tok := range q.pending {
		out = append(out, tok)
	}
	return out
}

// Bell fires (at most once per batch of rings) when a doorbell rang.
func (q *TenantQueues) Bell() <-chan struct{} { return q.bell }

// Wait returns when a doorbell rings, when TenantRefresh has passed since
// the last refresh (it then refreshes), or when ctx ends.
func (q *TenantQueues) Wait(ctx context.Context) error {
	q.mu.Lock()
	due := TenantRefresh - time.Since(q.last)
	q.mu.Unlock()
	if due > 0 {
		t := time.NewTimer(due)
		defer t.Stop()
		select {
		case <-q.bell:
			return nil
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return q.Refresh(ctx)
}

// Fetch takes the next job of tenant token's queue, without waiting: nil
// when it has none (the token is then no longer pending until its next
// doorbell or refresh; one that rang while the fetch was under way keeps it
// pending, as its job may have been stored after the fetch was answered).
// The consumer is created on first use.
func (q *TenantQueues) Fetch(ctx context.Context, token string) (jetstream.Msg, error) {
	c, err := q.consumer(ctx, token)
	if err != nil {
		return nil, err
	}
	q.mu.Lock()
	rung := q.pending[token]
	q.mu.Unlock()
	batch, err := c.FetchNoWait(1)
	if err != nil {
		return nil, err
	}
	var got jetstream.Msg
	for msg := range batch.Messages() {
		got = msg
	}
	if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) && got == nil {
		return nil, err
	}
	if got == nil {
		q.mu.Lock()
		if q.pending[token] == rung {
			delete(q.pending, token)
		}
		q.mu.Unlock()
	}
	return got, nil
}

func (q *TenantQueues) consumer(ctx context.Context, token string) (jetstream.Consumer, error) {
	q.mu.Lock()
	c, ok := q.cons[token]
	q.mu.Unlock()
	if ok {
		return c, nil
	}
	if !validToken(token) {
		return nil, fmt.Errorf("%w: tenant token %q", ErrConfig, token)
	}
	c, err := ensureConsumer(ctx, q.js, durable{stream: JobsStream, model: q.model, name: TenantConsumerName(q.model, token),
		subjects: []string{JobSubject(q.model) + "." + token}, description: "one tenant's jobs for " + q.model,
		idle: tenantConsumerIdle}, q.cfg)
	if err != nil {
		return nil, err
	}
	q.mu.Lock()
	if len(q.cons) > maxTenantConsumers {
		// Forget the handles (not the consumers): a busy tenant's is
		// looked up again on its next job.
		legacy := q.cons[LegacyQueue]
		clear(q.cons)
		q.cons[LegacyQueue] = legacy
	}
	q.cons[token] = c
	q.mu.Unlock()
	return c, nil
}

// maxTenantConsumers bounds the consumer handles a worker keeps per model.
const maxTenantConsumers = 4096

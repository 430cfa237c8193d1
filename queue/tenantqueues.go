package queue

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
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
//
// A routed queue's key (RouteToken) holds a dot, which a consumer name may
// not: its consumer is named by the tenant token and a hash of the worker
// token instead.
func TenantConsumerName(model, token string) string {
	return tenantConsumerName(ConsumerName(model), token)
}

// TenantDecodeConsumerName is the durable consumer of one tenant's decode
// hand-overs for a model, shared by every decode worker serving it;
// LegacyQueue's is DecodeConsumerName(model).
func TenantDecodeConsumerName(model, token string) string {
	return tenantConsumerName(DecodeConsumerName(model), token)
}

func tenantConsumerName(base, token string) string {
	if token == LegacyQueue {
		return base
	}
	if t, w := SplitRoute(token); w != "" {
		sum := sha256.Sum256([]byte(w))
		return base + "-" + t + "-R-" + hex.EncodeToString(sum[:6]) // tenant tokens are lower case: no shared name has "-R-"
	}
	return base + "-" + token
}

// tenantStream is what tells one kind of per-tenant queues from the other:
// jobs (the jobs stream, read by unified and prefill workers) or decode
// hand-overs (the decode stream, read by decode workers).
type tenantStream struct {
	model   string // the model whose queues these are
	stream  string // JobsStream or DecodeStream
	subject string // the model's own (legacy) subject; a queue's is subject + "." + key
	legacy  string // the legacy subject's consumer; a queue's is tenantConsumerName(legacy, key)
	bell    string // doorbell prefix: bell + key
	what    string // what the queues hold, for consumer descriptions
}

func jobQueues(model string) tenantStream {
	return tenantStream{model: model, stream: JobsStream, subject: JobSubject(model), legacy: ConsumerName(model),
		bell: ReadyPrefix + ModelToken(model) + ".", what: "jobs"}
}

func decodeQueues(model string) tenantStream {
	return tenantStream{model: model, stream: DecodeStream, subject: DecodeSubject(model), legacy: DecodeConsumerName(model),
		bell: DecodeReadyPrefix + ModelToken(model) + ".", what: "decode hand-overs"}
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
	kind  tenantStream
	self  string // this worker's token (WorkerToken): its routed queues are read first-hand; "" on the decode stream
	cfg   ConsumerConfig
	subs  []*nats.Subscription
	bell  chan struct{} // capacity 1: a doorbell rang
	start time.Time

	mu      sync.Mutex                    // guards the fields below
	pending map[string]uint64             // queue keys (tenant or RouteToken) that may have jobs waiting -> rings (and refreshes) so far
	rungAt  map[string]time.Time          // queue key -> when its doorbell last rang, while a look after it is due (see Fetch)
	retry   map[string]backoff            // queue key -> its back-off, while its fetches fail (see Fetch)
	replica bool                          // the stream has more than one replica: a doorbell can beat its job (RingSettle)
	cons    map[string]jetstream.Consumer // consumers created or joined, by queue key
	last    time.Time                     // the last refresh from the stream
	peers   map[string]peer               // other workers of the model, by token, from their announcements
}

// peer is what a worker knows of another worker of its model.
type peer struct {
	seen     time.Time
	draining bool
}

// OpenTenantQueues joins model's per-tenant queues for the worker whose id
// is worker: it narrows the model's own consumer (ConsumerName) to the
// legacy subject, so that the per-tenant consumers' filters do not overlap
// it (a work-queue stream requires that), subscribes to the model's
// doorbells (the tenants' shared ones and this worker's routed ones) and to
// the other workers' announcements (StatusSubject), and reads which tenants
// have jobs. Close releases the subscriptions.
func OpenTenantQueues(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, model, worker string, cfg ConsumerConfig) (*TenantQueues, error) {
	return openTenantQueues(ctx, nc, js, WorkerToken(worker), jobQueues(model), cfg)
}

// OpenDecodeQueues joins model's per-tenant decode hand-over queues
// (TenantDecodeSubject), as OpenTenantQueues joins its job queues, for a
// decode worker: so a decode worker, too, chooses which tenant's hand-over
// it takes next, and one tenant's hand-overs never stand in front of
// another's. Hand-overs are not routed: any decode worker takes any (decode
// goes by load: whoever has room pulls).
func OpenDecodeQueues(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, model string, cfg ConsumerConfig) (*TenantQueues, error) {
	return openTenantQueues(ctx, nc, js, "", decodeQueues(model), cfg)
}

// openTenantQueues joins kind's queues; self is the worker's token for
// routed queues, empty for unrouted ones.
func openTenantQueues(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, self string, kind tenantStream, cfg ConsumerConfig) (*TenantQueues, error) {
	model := kind.model
	legacy, err := ensureConsumer(ctx, js, durable{stream: kind.stream, model: model, name: kind.legacy,
		subjects: []string{kind.subject}, description: kind.what + " for " + model + " without per-tenant subjects"}, cfg)
	if err != nil {
		return nil, err
	}
	q := &TenantQueues{js: js, model: model, kind: kind, self: self, cfg: cfg, bell: make(chan struct{}, 1), start: time.Now(),
		pending: map[string]uint64{LegacyQueue: 1}, rungAt: map[string]time.Time{}, retry: map[string]backoff{}, cons: map[string]jetstream.Consumer{LegacyQueue: legacy}, peers: map[string]peer{}}
	subs := map[string]nats.MsgHandler{kind.bell + "*": func(m *nats.Msg) { q.mark(strings.TrimPrefix(m.Subject, kind.bell)) }}
	if self != "" { // routed queues: this worker's doorbells, and its peers' announcements
		subs[kind.bell+"*."+self] = subs[kind.bell+"*"]
		subs[StatusSubject(model)] = q.heard
	}
	for subj, handler := range subs {
		sub, err := nc.Subscribe(subj, handler)
		if err != nil {
			q.Close()
			return nil, fmt.Errorf("queue: subscribing to %s: %w", subj, err)
		}
		q.subs = append(q.subs, sub)
	}
	if err := q.Refresh(ctx); err != nil {
		q.Close()
		return nil, err
	}
	return q, nil
}

// heard records another worker's announcement. A peer newly gone (it said
// it drains) rings the bell, so that its routed queues are looked at now.
func (q *TenantQueues) heard(m *nats.Msg) {
	st, err := DecodeStatus(m.Data)
	if err != nil {
		return
	}
	tok := WorkerToken(st.Worker)
	if tok == q.self {
		return
	}
	q.mu.Lock()
	gone := st.Draining && !q.peers[tok].draining
	q.peers[tok] = peer{seen: time.Now(), draining: st.Draining}
	if len(q.peers) > maxPeers {
		q.forgetPeers()
	}
	if gone {
		q.last = time.Time{} // the next RefreshIfOlder reads the stream
	}
	q.mu.Unlock()
	if gone {
		q.ring()
	}
}

// maxPeers bounds the workers remembered per model.
const maxPeers = 4096

// forgetPeers drops the peers gone for long; q.mu is held.
func (q *TenantQueues) forgetPeers() {
	for tok, p := range q.peers {
		if time.Since(p.seen) > 10*PeerTimeout {
			delete(q.peers, tok)
		}
	}
}

// reads reports whether this worker reads the routed queues of the worker
// whose token is tok: its own, and those of a worker that said it drains
// or has not announced itself for PeerTimeout (one never heard counts from
// this worker's own start). q.mu is held.
func (q *TenantQueues) reads(tok string) bool {
	if tok == q.self {
		return true
	}
	p, ok := q.peers[tok]
	if !ok {
		return time.Since(q.start) > PeerTimeout
	}
	return p.draining || time.Since(p.seen) > PeerTimeout
}

// Legacy is the consumer of the model's own subject (metrics read its lag).
func (q *TenantQueues) Legacy() jetstream.Consumer {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.cons[LegacyQueue]
}

// Close unsubscribes from the doorbells and announcements.
func (q *TenantQueues) Close() {
	for _, sub := range q.subs {
		sub.Unsubscribe()
	}
}

func (q *TenantQueues) mark(key string) {
	if !validKey(key) {
		return
	}
	q.mu.Lock()
	q.pending[key]++
	if len(q.rungAt) >= maxTenantConsumers {
		clear(q.rungAt)
	}
	q.rungAt[key] = time.Now()
	q.mu.Unlock()
	q.ring()
}

// RingSettle is how long after a doorbell a fetch that finds nothing on its
// queue looks again (at 1, 2, 4, ... ms) before leaving the queue to the next
// doorbell or refresh, on a stream with replicas. The publisher's ack means a
// majority of the stream's replicas stored the job, not that the replica the
// consumer's leader reads from has applied it: on an R3 stream a fetch right
// after the doorbell can come back empty, and the job then waited for the
// next refresh (up to busyRefresh on a busy worker; a flood measured 300-690
// ms on the decode queues of deploy/local's cluster). A single-replica
// stream has no such race, and there every worker but the one that took the
// job would only look again for nothing.
const RingSettle = 100 * time.Millisecond

// relook marks key pending again after d, unless it was marked since.
func (q *TenantQueues) relook(key string, d time.Duration) {
	time.AfterFunc(d, func() {
		q.mu.Lock()
		_, marked := q.pending[key]
		if !marked {
			q.pending[key]++
		}
		q.mu.Unlock()
		if !marked {
			q.ring()
		}
	})
}

func (q *TenantQueues) ring() {
	select {
	case q.bell <- struct{}{}:
	default:
	}
}

// validKey reports whether s can be a queue key: a tenant token, or a
// RouteToken.
func validKey(s string) bool {
	t, w := SplitRoute(s)
	return validToken(t) && (w == "" && !strings.Contains(s, ".") || validToken(w))
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

// Refresh marks every queue this worker reads whose subject holds jobs
// (waiting or running) as pending, from the stream's per-subject counts:
// each tenant's shared queue, the legacy queue, this worker's routed queues
// and those of workers gone (see reads).
func (q *TenantQueues) Refresh(ctx context.Context) error {
	counts, err := q.counts(ctx)
	if err != nil {
		return err
	}
	prefix := q.kind.subject + "."
	q.mu.Lock()
	defer q.mu.Unlock()
	q.last = time.Now()
	q.pending[LegacyQueue]++
	for subj, n := range counts {
		key := strings.TrimPrefix(subj, prefix)
		if n == 0 || !validKey(key) {
			continue
		}
		if _, w := SplitRoute(key); w == "" || q.reads(w) {
			q.pending[key]++
		}
	}
	return nil
}

// RefreshIfOlder refreshes when the last refresh is older than age: a busy
// worker, which does not wait for doorbells, still finds the routed queues
// of a worker that died.
func (q *TenantQueues) RefreshIfOlder(ctx context.Context, age time.Duration) error {
	q.mu.Lock()
	due := time.Since(q.last) > age
	q.mu.Unlock()
	if !due {
		return nil
	}
	return q.Refresh(ctx)
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
	st, err := q.js.Stream(ctx, q.kind.stream)
	if err != nil {
		return nil, fmt.Errorf("queue: stream %s: %w", q.kind.stream, err)
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(q.kind.subject+".>"))
	if err != nil {
		return nil, fmt.Errorf("queue: stream %s: %w", q.kind.stream, err)
	}
	q.mu.Lock()
	q.replica = info.Config.Replicas > 1
	q.mu.Unlock()
	return info.State.Subjects, nil
}

// Pending lists the tenant tokens that may have jobs waiting (LegacyQueue
// among them). A token stays listed until a Fetch from it finds nothing; one
// whose last Fetch failed is left out until its back-off ends.
func (q *TenantQueues) Pending() []string {
	q.mu.Lock()
	defer q.mu.Unlock()
	now := time.Now()
	out := make([]string, 0, len(q.pending))
	for tok := range q.pending {
		if r, ok := q.retry[tok]; ok && now.Before(r.until) {
			continue
		}
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
//
// A fetch that fails leaves the token pending but unlisted (Pending) for a
// back-off that doubles with each failure in a row, from FetchRetryMin to
// FetchRetryMax, and rings the bell when it ends; the other queues are read
// meanwhile, and the next try looks the consumer up again. On an R3 stream a
// consumer just created has no reachable leader for tens of milliseconds
// ("no responders"), and a caller that paused every queue for a second
// after that failure held another tenant's job for that second
// (docs/fairness.md).
func (q *TenantQueues) Fetch(ctx context.Context, token string) (jetstream.Msg, error) {
	msg, err := q.fetch(ctx, token)
	q.mu.Lock()
	if err == nil {
		delete(q.retry, token)
		q.mu.Unlock()
		return msg, nil
	}
	d := min(max(2*q.retry[token].delay, FetchRetryMin), FetchRetryMax)
	if len(q.retry) >= maxTenantConsumers {
		clear(q.retry)
	}
	q.retry[token] = backoff{delay: d, until: time.Now().Add(d)}
	if _, ok := q.pending[token]; !ok {
		q.pending[token]++
	}
	if token != LegacyQueue {
		// The server may have deleted the consumer (idle past
		// tenantConsumerIdle): the next try joins or recreates it.
		delete(q.cons, token)
	}
	q.mu.Unlock()
	time.AfterFunc(d, q.ring)
	return nil, err
}

// FetchRetryMin and FetchRetryMax bound the back-off of a queue whose
// fetches fail (Fetch).
const (
	FetchRetryMin = 10 * time.Millisecond
	FetchRetryMax = time.Second
)

// backoff is a failing queue's: the last delay, and when it ends.
type backoff struct {
	delay time.Duration
	until time.Time
}

func (q *TenantQueues) fetch(ctx context.Context, token string) (jetstream.Msg, error) {
	c, err := q.consumer(ctx, token)
	if err != nil {
		return nil, err
	}
	q.mu.Lock()
	rung := q.pending[token]
	q.mu.Unlock()
	asked := time.Now()
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
			if at, ok := q.rungAt[token]; ok {
				if since := time.Since(at); since < RingSettle && q.replica {
					q.relook(token, max(since, time.Millisecond))
				} else {
					delete(q.rungAt, token)
				}
			}
		}
		q.mu.Unlock()
	} else {
		// The doorbells rung before this fetch are taken as answered by it.
		q.mu.Lock()
		if at, ok := q.rungAt[token]; ok && at.Before(asked) {
			delete(q.rungAt, token)
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
	if !validKey(token) {
		return nil, fmt.Errorf("%w: tenant queue %q", ErrConfig, token)
	}
	desc := "one tenant's " + q.kind.what + " for " + q.model
	if _, w := SplitRoute(token); w != "" {
		desc += " routed to one worker"
	}
	c, err := ensureConsumer(ctx, q.js, durable{stream: q.kind.stream, model: q.model, name: tenantConsumerName(q.kind.legacy, token),
		subjects: []string{q.kind.subject + "." + token}, description: desc, idle: tenantConsumerIdle}, q.cfg)
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

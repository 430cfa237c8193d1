package queue

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/bulkhead-ai/bulkhead/models/testkit"
)

// TestTenantQueues: each tenant's jobs are fetched from its own queue, in
// the order the caller asks, whatever the stream's order; a doorbell or a
// refresh lists a tenant with jobs, an empty fetch unlists it; a consumer
// that read the whole model (an older worker's) is narrowed to the legacy
// subject, whose jobs are still served.
func TestTenantQueues(t *testing.T) {
	env := startEnv(t, StreamConfig{})
	ctx := context.Background()
	c := NewClient(env.nc, env.js)
	const model = "m1"
	// An older worker's consumer, reading every subject of the model.
	if _, err := EnsureConsumer(ctx, env.js, model, ConsumerConfig{}); err != nil {
		t.Fatal(err)
	}
	legacy := testJob("legacy-0")
	legacy.Model = model
	b, err := EncodeJob(legacy)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.js.Publish(ctx, JobSubject(model), b); err != nil {
		t.Fatal(err)
	}
	submit := func(id, tenant string) { submitJob(t, c, model, id, tenant, "") }
	for _, id := range []string{"a-0", "a-1", "a-2"} {
		submit(id, "tenant-a")
	}
	q, err := OpenTenantQueues(ctx, env.nc, env.js, model, "w1", ConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	ta, tb := TenantToken("tenant-a"), TenantToken("tenant-b")
	if got := q.Pending(); !slices.Contains(got, ta) || !slices.Contains(got, LegacyQueue) {
		t.Fatalf("pending after open = %q, want tenant-a's token and the legacy queue", got)
	}
	submit("b-0", "tenant-b") // after A's in the stream; its doorbell lists it
	testkit.Poll(t, 5*time.Second, testkit.Cond("tenant-b's doorbell", func() bool { return slices.Contains(q.Pending(), tb) }))
	id := func(tok string) string {
		t.Helper()
		msg, err := q.Fetch(ctx, tok)
		if err != nil {
			t.Fatal(err)
		}
		if msg == nil {
			return ""
		}
		job, err := DecodeJob(msg.Data())
		if err != nil {
			t.Fatal(err)
		}
		if err := msg.Ack(); err != nil {
			t.Fatal(err)
		}
		return job.ID
	}
	for _, step := range []struct{ tok, want string }{
		{tb, "b-0"}, {tb, ""}, {ta, "a-0"}, {LegacyQueue, "legacy-0"}, {LegacyQueue, ""}, {ta, "a-1"},
	} {
		if got := id(step.tok); got != step.want {
			t.Fatalf("fetch from %q = %q, want %q", step.tok, got, step.want)
		}
	}
	if got := q.Pending(); slices.Contains(got, tb) || slices.Contains(got, LegacyQueue) || !slices.Contains(got, ta) {
		t.Errorf("pending = %q, want tenant-a's token only", got)
	}
	info, err := env.js.Consumer(ctx, JobsStream, ConsumerName(model))
	if err != nil {
		t.Fatal(err)
	}
	if cfg := info.CachedInfo().Config; cfg.FilterSubject != JobSubject(model) || len(cfg.FilterSubjects) != 0 {
		t.Errorf("the model's own consumer reads %q %q, want %q alone", cfg.FilterSubject, cfg.FilterSubjects, JobSubject(model))
	}
	// A tenant queue lists again from the stream's counts, without a bell.
	q.mu.Lock()
	clear(q.pending)
	q.mu.Unlock()
	if err := q.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if got := q.Pending(); !slices.Contains(got, ta) {
		t.Errorf("pending after refresh = %q, want tenant-a's token", got)
	}
	if got := id(ta); got != "a-2" {
		t.Errorf("last fetch = %q, want a-2", got)
	}
	// A doorbell that names no valid token is ignored.
	if err := env.nc.Publish(ReadyPrefix+ModelToken(model)+".BAD$", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Fetch(ctx, "BAD$"); err == nil {
		t.Error("fetching an invalid token succeeded")
	}
}

// TestRoutedQueues: a job routed to a worker waits on that worker's queue
// of its tenant, which its bell lists on that worker only; another worker
// reads it only once the first has said it drains or gone silent for
// PeerTimeout, and then finds it by its refresh.
func TestRoutedQueues(t *testing.T) {
	env := startEnv(t, StreamConfig{})
	ctx := context.Background()
	c := NewClient(env.nc, env.js)
	const model = "m1"
	open := func(worker string) *TenantQueues {
		q, err := OpenTenantQueues(ctx, env.nc, env.js, model, worker, ConsumerConfig{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(q.Close)
		return q
	}
	w1, w2 := open("w1"), open("w2")
	announce := func(worker string, draining bool) {
		b, err := json.Marshal(WorkerStatus{Worker: worker, Draining: draining, MaxBatch: 1})
		if err != nil {
			t.Fatal(err)
		}
		if err := env.nc.Publish(StatusSubject(model), b); err != nil {
			t.Fatal(err)
		}
	}
	announce("w1", false)
	env.nc.Flush()
	job := submitJob(t, c, model, "routed-0", "tenant-a", "w1")
	key := RouteToken(TenantToken(job.Tenant), WorkerToken("w1"))
	if job.Subject() != JobSubject(model)+"."+key {
		t.Fatalf("routed subject %q, want the queue key %q under the model's subject", job.Subject(), key)
	}
	testkit.Poll(t, 5*time.Second, testkit.Cond("w1's own bell", func() bool { return slices.Contains(w1.Pending(), key) }))
	if err := w2.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if slices.Contains(w2.Pending(), key) {
		t.Fatalf("w2 lists w1's routed queue while w1 announces itself: %q", w2.Pending())
	}
	if slices.Contains(w2.Pending(), TenantToken(job.Tenant)) && mustFetch(t, w2, TenantToken(job.Tenant)) != nil {
		t.Fatal("the routed job came out of the tenant's shared queue")
	}
	announce("w1", true) // w1 drains: w2 reads its queues from now on
	testkit.Poll(t, 5*time.Second, testkit.Cond("w2 lists w1's queue after w1 said it drains", func() bool {
		if err := w2.RefreshIfOlder(ctx, 0); err != nil {
			t.Fatal(err)
		}
		return slices.Contains(w2.Pending(), key)
	}))
	msg := mustFetch(t, w2, key)
	if msg == nil {
		t.Fatal("w2 found nothing in w1's routed queue")
	}
	got, err := DecodeJob(msg.Data())
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != job.ID || got.Route != "w1" {
		t.Errorf("w2 took %s routed to %q, want %s routed to w1", got.ID, got.Route, job.ID)
	}
	if err := msg.Ack(); err != nil {
		t.Fatal(err)
	}
	// A worker never heard of, after PeerTimeout, counts as gone too.
	w2.mu.Lock()
	silent := w2.reads(WorkerToken("w9"))
	w2.start = w2.start.Add(-PeerTimeout - time.Millisecond)
	gone := w2.reads(WorkerToken("w9"))
	w2.mu.Unlock()
	if silent || !gone {
		t.Errorf("an unheard worker read at start %v, after PeerTimeout %v; want false, true", silent, gone)
	}
}

func mustFetch(t *testing.T, q *TenantQueues, key string) jetstream.Msg {
	t.Helper()
	msg, err := q.Fetch(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	return msg
}

// TestTenantConsumerNames: routed queues get consumer names of their own,
// valid for JetStream, which no shared queue's name can take.
func TestTenantConsumerNames(t *testing.T) {
	a, w := TenantToken("a"), WorkerToken("w1")
	shared, routed := TenantConsumerName("m", a), TenantConsumerName("m", RouteToken(a, w))
	if shared == routed || strings.ContainsAny(routed, ".*> ") || !strings.Contains(routed, "-R-") {
		t.Errorf("shared %q, routed %q: want distinct names, the routed one with -R- and no subject characters", shared, routed)
	}
	if TenantConsumerName("m", RouteToken(a, WorkerToken("w2"))) == routed {
		t.Error("two workers' routed queues share a consumer name")
	}
}

// TestBacklog: a tenant's jobs on its shared and routed queues count
// together, the tenant with most first, with its oldest job's time.
func TestBacklog(t *testing.T) {
	env := startEnv(t, StreamConfig{})
	ctx := context.Background()
	c := NewClient(env.nc, env.js)
	const model = "m1"
	before := time.Now().Add(-time.Second)
	submit := func(id, tenant, route string) { submitJob(t, c, model, id, tenant, route) }
	submit("a-0", "tenant-a", "")
	submit("a-1", "tenant-a", "w1")
	submit("a-2", "tenant-a", "w2")
	submit("b-0", "tenant-b", "")
	got, err := Backlog(ctx, env.js, model, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Tenant != TenantToken("tenant-a") || got[0].Jobs != 3 || got[1].Jobs != 1 ||
		got[0].Oldest.Before(before) || got[0].Oldest.After(time.Now()) {
		t.Fatalf("backlog %+v, want tenant-a's 3 jobs (queued since the test began) then tenant-b's 1", got)
	}
	if got, err := Backlog(ctx, env.js, model, 1); err != nil || len(got) != 1 {
		t.Errorf("backlog of at most 1: %+v, %v", got, err)
	}
}

// submitJob queues job id of tenant for model through c, routed to route
// ("" for the tenant's shared queue), and returns it.
func submitJob(t *testing.T, c *Client, model, id, tenant, route string) *Job {
	t.Helper()
	job := testJob(id)
	job.Tenant, job.Model, job.Route = tenant, model, route
	r, err := c.Submit(context.Background(), job)
	if err != nil {
		t.Fatal(err)
	}
	r.Close()
	return job
}

// TestRelookAfterAnEarlyDoorbell: a doorbell may ring before its job is
// visible to the tenant's consumer (the replica of an R3 stream that the
// consumer's leader reads applies it a moment after the publisher's ack).
// The fetch that finds nothing looks again, within RingSettle, instead of
// leaving the job to the next refresh (up to a second on a busy worker).
func TestRelookAfterAnEarlyDoorbell(t *testing.T) {
	env := startEnv(t, StreamConfig{})
	ctx := context.Background()
	const model = "m1"
	q, err := OpenTenantQueues(ctx, env.nc, env.js, model, "w1", ConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	// This stream has one replica, where a job is visible once acked; the
	// race needs replicas, so the queues are told they have them.
	q.mu.Lock()
	q.replica = true
	q.mu.Unlock()
	tb := TenantToken("tenant-b")
	q.mark(tb) // the doorbell, ahead of its job
	<-q.Bell()
	if msg, err := q.Fetch(ctx, tb); err != nil || msg != nil {
		t.Fatalf("fetch before the job is stored: %v, %v", msg, err)
	}
	job := testJob("b-0")
	job.Model, job.Tenant = model, "tenant-b"
	b, err := EncodeJob(job)
	if err != nil {
		t.Fatal(err)
	}
	// Stored without a doorbell of its own: only the look again finds it.
	if _, err := env.js.Publish(ctx, TenantJobSubject(model, "tenant-b"), b); err != nil {
		t.Fatal(err)
	}
	deadline := time.After(RingSettle)
	for {
		select {
		case <-q.Bell():
		case <-deadline:
			t.Fatalf("no look again within %v of the doorbell; pending %q", RingSettle, q.Pending())
		}
		if !slices.Contains(q.Pending(), tb) {
			continue
		}
		msg, err := q.Fetch(ctx, tb)
		if err != nil {
			t.Fatal(err)
		}
		if msg != nil {
			if got, err := DecodeJob(msg.Data()); err != nil || got.ID != "b-0" {
				t.Fatalf("fetched %v, %v", got, err)
			}
			return
		}
	}
}

// TestFetchFailureBacksOff: a queue whose fetch fails (here its consumer
// was deleted under the worker, as the server deletes one idle for
// tenantConsumerIdle) is left out of the pending list, the other queues are
// read meanwhile, and it is listed again, with the bell rung, after its
// back-off; its next fetch finds the consumer again and the job.
func TestFetchFailureBacksOff(t *testing.T) {
	env := startEnv(t, StreamConfig{})
	ctx := context.Background()
	c := NewClient(env.nc, env.js)
	const model = "m1"
	q, err := OpenTenantQueues(ctx, env.nc, env.js, model, "w1", ConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	ta, tb := TenantToken("tenant-a"), TenantToken("tenant-b")
	fetchID := func(tok string) string {
		t.Helper()
		msg, err := q.Fetch(ctx, tok)
		if err != nil || msg == nil {
			t.Fatalf("fetch from %q: %v, %v", tok, msg, err)
		}
		job, err := DecodeJob(msg.Data())
		if err != nil {
			t.Fatal(err)
		}
		if err := msg.DoubleAck(ctx); err != nil { // stored before the consumer is deleted below
			t.Fatal(err)
		}
		return job.ID
	}
	listed := func(tok string) func() bool { return func() bool { return slices.Contains(q.Pending(), tok) } }
	submitJob(t, c, model, "a-0", "tenant-a", "")
	testkit.Poll(t, 5*time.Second, testkit.Cond("tenant-a's doorbell", listed(ta)))
	if got := fetchID(ta); got != "a-0" {
		t.Fatalf("first fetch = %q", got)
	}
	if err := env.js.DeleteConsumer(ctx, JobsStream, TenantConsumerName(model, ta)); err != nil {
		t.Fatal(err)
	}
	submitJob(t, c, model, "a-1", "tenant-a", "")
	submitJob(t, c, model, "b-0", "tenant-b", "")
	testkit.Poll(t, 5*time.Second, testkit.Cond("both doorbells", func() bool { return listed(ta)() && listed(tb)() }))
	if msg, err := q.Fetch(ctx, ta); err == nil {
		t.Fatalf("fetch through a deleted consumer: %v, no error", msg)
	}
	if listed(ta)() {
		t.Errorf("a queue whose fetch failed is still listed: %q", q.Pending())
	}
	if got := fetchID(tb); got != "b-0" {
		t.Errorf("the other tenant's fetch = %q, want b-0", got)
	}
	deadline := time.After(5 * time.Second)
	for !listed(ta)() {
		select {
		case <-q.Bell():
		case <-deadline:
			t.Fatalf("the failed queue was not listed again; pending %q", q.Pending())
		}
	}
	if got := fetchID(ta); got != "a-1" {
		t.Errorf("fetch after the back-off = %q, want a-1", got)
	}
}

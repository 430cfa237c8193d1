package queue

import (
	"context"
	"slices"
	"testing"
	"time"

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
	submit := func(id, tenant string) {
		job := testJob(id)
		job.Tenant, job.Model = tenant, model
		r, err := c.Submit(ctx, job)
		if err != nil {
			t.Fatal(err)
		}
		r.Close()
	}
	for _, id := range []string{"a-0", "a-1", "a-2"} {
		submit(id, "tenant-a")
	}
	q, err := OpenTenantQueues(ctx, env.nc, env.js, model, ConsumerConfig{})
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

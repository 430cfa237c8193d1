package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// TestTenantBound: a tenant at MaxJobsPerTenant for a model is refused at
// once with ErrTenantQueueFull, on Submit and SubmitAsync alike, while
// another tenant, and the same tenant on another model, still get in.
func TestTenantBound(t *testing.T) {
	env := startEnv(t, StreamConfig{MaxJobs: 10, MaxJobsPerTenant: 2})
	ctx := context.Background()
	c := NewClient(env.nc, env.js)
	submit := func(id, tenant, model string) error {
		job := testJob(id)
		job.Tenant, job.Model = tenant, model
		r, err := c.Submit(ctx, job)
		if r != nil {
			r.Close()
		}
		return err
	}
	for i := range 2 {
		if err := submit(fmt.Sprintf("a-%d", i), "tenant-a", "m1"); err != nil {
			t.Fatalf("job %d of tenant-a: %v", i, err)
		}
	}
	if err := submit("a-2", "tenant-a", "m1"); !errors.Is(err, ErrTenantQueueFull) {
		t.Fatalf("third job of tenant-a = %v, want ErrTenantQueueFull", err)
	}
	async := &Job{ID: "a-async", Tenant: "tenant-a", Model: "m1", MaxTokens: 1, Deadline: time.Now().Add(time.Minute)}
	if err := c.SubmitAsync(ctx, async); !errors.Is(err, ErrTenantQueueFull) {
		t.Fatalf("async job of tenant-a = %v, want ErrTenantQueueFull", err)
	}
	if _, err := c.AsyncStatus(ctx, "a-async"); !errors.Is(err, ErrNotFound) {
		t.Errorf("refused async job left a record: %v", err)
	}
	if err := submit("b-0", "tenant-b", "m1"); err != nil {
		t.Errorf("tenant-b refused beside a full tenant-a: %v", err)
	}
	if err := submit("a-m2", "tenant-a", "m2"); err != nil {
		t.Errorf("tenant-a refused on another model: %v", err)
	}
	// The total bound holds too: 4 jobs in, 6 more fill the stream.
	for i := range 6 {
		if err := submit(fmt.Sprintf("t%d", i), fmt.Sprintf("tenant-%d", i), "m1"); err != nil {
			t.Fatalf("filling job %d: %v", i, err)
		}
	}
	if err := submit("c-0", "tenant-c", "m1"); !errors.Is(err, ErrQueueFull) || errors.Is(err, ErrTenantQueueFull) {
		t.Fatalf("job on a full stream = %v, want ErrQueueFull alone", err)
	}
	// A worker consumes every tenant's subject.
	cons, err := EnsureConsumer(ctx, env.js, "m1", ConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	tenants := map[string]int{}
	for range 9 {
		msgs, err := cons.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		for m := range msgs.Messages() {
			job, err := DecodeJob(m.Data())
			if err != nil {
				t.Fatal(err)
			}
			if m.Subject() != TenantJobSubject("m1", job.Tenant) {
				t.Errorf("job of %s on %s, want %s", job.Tenant, m.Subject(), TenantJobSubject("m1", job.Tenant))
			}
			tenants[job.Tenant]++
			_ = m.Ack()
		}
	}
	if len(tenants) != 8 || tenants["tenant-a"] != 2 {
		t.Errorf("consumed per tenant %v, want 8 tenants, tenant-a twice", tenants)
	}
}

// TestSetupUpgrade: Setup on a jobs stream made before per-tenant subjects
// (no per-subject limit, jobs on the model's own subject, a consumer filtered
// to it) keeps every queued job, and the updated consumer delivers the old
// jobs and new per-tenant ones; once drained, Setup lowers the limit.
func TestSetupUpgrade(t *testing.T) {
	env := startEnv(t, StreamConfig{Memory: true})
	ctx := context.Background()
	const model = "@cf/test/model"
	// The old shape: no per-subject limit, a single-subject consumer.
	st, err := env.js.Stream(ctx, JobsStream)
	if err != nil {
		t.Fatal(err)
	}
	old := st.CachedInfo().Config
	old.MaxMsgsPerSubject, old.DiscardNewPerSubject = 0, false
	if _, err := env.js.UpdateStream(ctx, old); err != nil {
		t.Fatal(err)
	}
	if _, err := env.js.CreateOrUpdateConsumer(ctx, JobsStream, jetstream.ConsumerConfig{
		Durable: ConsumerName(model), FilterSubject: JobSubject(model), AckPolicy: jetstream.AckExplicitPolicy,
	}); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		job := testJob(fmt.Sprintf("old-%d", i))
		b, _ := EncodeJob(job)
		if _, err := env.js.Publish(ctx, JobSubject(model), b); err != nil {
			t.Fatal(err)
		}
	}
	cfg := StreamConfig{Memory: true, MaxJobsPerTenant: 2}
	if err := Setup(ctx, env.js, cfg); err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 5 || info.Config.MaxMsgsPerSubject != 5 || !info.Config.DiscardNewPerSubject {
		t.Fatalf("after Setup: %d jobs, per-subject limit %d (discard new %v); want 5 kept under a limit of 5",
			info.State.Msgs, info.Config.MaxMsgsPerSubject, info.Config.DiscardNewPerSubject)
	}
	cons, err := EnsureConsumer(ctx, env.js, model, ConsumerConfig{})
	if err != nil {
		t.Fatalf("updating the old consumer: %v", err)
	}
	r, err := NewClient(env.nc, env.js).Submit(ctx, testJob("new-0"))
	if err != nil {
		t.Fatal(err)
	}
	r.Close()
	var got []string
	for len(got) < 6 {
		msgs, err := cons.Fetch(6-len(got), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		n := len(got)
		for m := range msgs.Messages() {
			job, err := DecodeJob(m.Data())
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, job.ID)
			if err := m.DoubleAck(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if len(got) == n {
			t.Fatalf("consumer delivered %v, want the 5 old jobs and new-0", got)
		}
	}
	if got[0] != "old-0" || got[5] != "new-0" {
		t.Errorf("delivered %v, want old-0..old-4 then new-0", got)
	}
	if err := Setup(ctx, env.js, cfg); err != nil {
		t.Fatal(err)
	}
	if info, err = st.Info(ctx); err != nil {
		t.Fatal(err)
	}
	if info.Config.MaxMsgsPerSubject != 2 {
		t.Errorf("drained stream's per-subject limit %d, want 2", info.Config.MaxMsgsPerSubject)
	}
}

// TestValidTenant: the one tenant rule, and every decoder that holds to it:
// a job, a decode hand-over and a usage event naming a malformed tenant are
// refused.
func TestValidTenant(t *testing.T) {
	for s, want := range map[string]bool{
		"acme": true, "Tenant_2-b": true, strings.Repeat("a", MaxTenantLen): true,
		"": false, strings.Repeat("a", MaxTenantLen+1): false, "a.b": false, "a b": false, "a*": false,
		"a>": false, "{a}": false, "a:b": false, "é": false, "a/b": false,
	} {
		if got := ValidTenant(s); got != want {
			t.Errorf("ValidTenant(%q) = %v, want %v", s, got, want)
		}
	}
	for _, bad := range []string{"", "a.b", "{x}", strings.Repeat("a", MaxTenantLen+1)} {
		job := testJob("bad-tenant")
		job.Tenant = bad
		b, err := json.Marshal(job)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := DecodeJob(b); !errors.Is(err, ErrBadMessage) {
			t.Errorf("DecodeJob with tenant %q: %v, want ErrBadMessage", bad, err)
		}
		h, _ := json.Marshal(&Handover{Job: *job, Manifest: json.RawMessage(`{"v":1}`)})
		if _, err := DecodeHandover(h); !errors.Is(err, ErrBadMessage) {
			t.Errorf("DecodeHandover with tenant %q: %v, want ErrBadMessage", bad, err)
		}
		ev := &UsageEvent{RequestID: "r", Tenant: bad, Model: "m", Time: time.Now()}
		u, _ := json.Marshal(ev)
		if _, err := DecodeUsage(u); !errors.Is(err, ErrBadMessage) {
			t.Errorf("DecodeUsage with tenant %q: %v, want ErrBadMessage", bad, err)
		}
	}
}

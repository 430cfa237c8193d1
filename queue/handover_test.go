package queue

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

func TestHandoverCodec(t *testing.T) {
	dl := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	job := Job{ID: "a", Tenant: "t", Model: "m", Prompt: "p", MaxTokens: 3, Reply: "r", Deadline: dl}
	t.Run("round trip", func(t *testing.T) {
		in := &Handover{Job: job, Manifest: json.RawMessage(`{"version":1,"pages":[]}`), CachedTokens: 32}
		b, err := EncodeHandover(in)
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeHandover(b)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got.Job, in.Job) || string(got.Manifest) != string(in.Manifest) || got.CachedTokens != in.CachedTokens {
			t.Errorf("round trip\n got %+v %s %d cached\nwant %+v %s %d cached",
				got.Job, got.Manifest, got.CachedTokens, in.Job, in.Manifest, in.CachedTokens)
		}
	})
	big := `{"x":"` + strings.Repeat("a", MaxManifestBytes) + `"}`
	for _, tc := range []struct{ name, in string }{
		{"not json", "{"},
		{"bad job", `{"job":{"id":""},"manifest":{}}`},
		{"no manifest", `{"job":{"id":"a","tenant":"t","model":"m","max_tokens":1,"reply":"r","deadline":"2030-01-01T00:00:00Z"}}`},
		{"null manifest", `{"job":{"id":"a","tenant":"t","model":"m","max_tokens":1,"reply":"r","deadline":"2030-01-01T00:00:00Z"},"manifest":null}`},
		{"manifest too big", `{"job":{"id":"a","tenant":"t","model":"m","max_tokens":1,"reply":"r","deadline":"2030-01-01T00:00:00Z"},"manifest":` + big + `}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := DecodeHandover([]byte(tc.in)); !errors.Is(err, ErrBadMessage) {
				t.Errorf("DecodeHandover = %v, want ErrBadMessage", err)
			}
		})
	}
}

func FuzzDecodeHandover(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := DecodeHandover(b)
		if err != nil {
			if !errors.Is(err, ErrBadMessage) {
				t.Fatalf("error %v does not wrap ErrBadMessage", err)
			}
			return
		}
		if err := d.Job.Validate(); err != nil || len(d.Manifest) == 0 {
			t.Fatalf("accepted %+v (%v)", d, err)
		}
		again, err := EncodeHandover(d)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := DecodeHandover(again); err != nil {
			t.Fatalf("re-encoded decode job does not decode: %v", err)
		}
	})
}

// TestPublishHandover: Setup makes the bounded decode stream; a hand-over is
// published once per job, on its tenant's decode subject, and rings its
// doorbell; a decode worker's queues (OpenDecodeQueues) take it from there
// and the model's legacy decode consumer never sees it.
func TestPublishHandover(t *testing.T) {
	env := startEnv(t, StreamConfig{MaxDecodeJobs: 2})
	ctx := context.Background()
	s, err := env.js.Stream(ctx, DecodeStream)
	if err != nil {
		t.Fatal(err)
	}
	cfg := s.CachedInfo().Config
	if cfg.MaxMsgs != 2 || cfg.Retention != jetstream.WorkQueuePolicy || cfg.Discard != jetstream.DiscardNew ||
		len(cfg.Subjects) != 1 || cfg.Subjects[0] != "decode.>" {
		t.Errorf("decode stream config %+v", cfg)
	}
	q, err := OpenDecodeQueues(ctx, env.nc, env.js, "@cf/test/model", ConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	if _, err := EnsureConsumer(ctx, env.js, "@cf/test/model", ConsumerConfig{}); err != nil {
		t.Fatalf("jobs consumer beside the decode consumer: %v", err)
	}
	d := &Handover{Job: *testJob("dec-1"), Manifest: json.RawMessage(`{"v":1}`)}
	t.Run("publish", func(t *testing.T) {
		if err := PublishHandover(ctx, env.js, d); err != nil {
			t.Fatal(err)
		}
		if err := PublishHandover(ctx, env.js, d); !errors.Is(err, ErrDuplicate) {
			t.Fatalf("second publish: %v, want ErrDuplicate", err)
		}
		select {
		case <-q.Bell():
		case <-time.After(5 * time.Second):
			t.Fatal("no doorbell for the hand-over")
		}
		tok := TenantToken(d.Job.Tenant)
		if !slices.Contains(q.Pending(), tok) {
			t.Fatalf("pending queues %q, want the tenant's %q", q.Pending(), tok)
		}
		if m, err := q.Fetch(ctx, LegacyQueue); m != nil || err != nil {
			t.Fatalf("the legacy decode consumer got %v, %v", m, err)
		}
		m, err := q.Fetch(ctx, tok)
		if err != nil || m == nil {
			t.Fatalf("fetching the tenant's hand-over: %v, %v", m, err)
		}
		got, err := DecodeHandover(m.Data())
		if err != nil || got.Job.ID != "dec-1" || m.Subject() != TenantDecodeSubject("@cf/test/model", d.Job.Tenant) {
			t.Fatalf("message on %s: %+v, %v", m.Subject(), got, err)
		}
		if id := m.Headers().Get(jetstream.MsgIDHeader); id != "dec-1/decode" {
			t.Errorf("Nats-Msg-Id %q", id)
		}
		if err := m.Ack(); err != nil {
			t.Fatal(err)
		}
		if m, err := q.Fetch(ctx, tok); m != nil || err != nil {
			t.Fatalf("a second fetch got %v, %v: the hand-over was published twice", m, err)
		}
	})
	t.Run("bounded", func(t *testing.T) {
		var last error
		for i := range 4 {
			dj := &Handover{Job: *testJob("dec-full-" + string(rune('a'+i))), Manifest: json.RawMessage(`{}`)}
			if last = PublishHandover(ctx, env.js, dj); last != nil {
				break
			}
		}
		if !errors.Is(last, ErrQueueFull) {
			t.Errorf("publishing past MaxDecodeJobs: %v, want ErrQueueFull", last)
		}
	})
	t.Run("bad config", func(t *testing.T) {
		if err := Setup(ctx, env.js, StreamConfig{MaxDecodeJobs: -1}); !errors.Is(err, ErrConfig) {
			t.Errorf("negative MaxDecodeJobs: %v", err)
		}
		if _, err := EnsureDecodeConsumer(ctx, env.js, "", ConsumerConfig{}); !errors.Is(err, ErrConfig) {
			t.Errorf("empty model: %v", err)
		}
	})
}

// TestFailIfHeld: across a hand-over two workers hold deliveries of one job;
// only the one whose claim is current may end it, and the other sends nothing.
func TestFailIfHeld(t *testing.T) {
	env := startEnv(t, StreamConfig{})
	ctx := context.Background()
	res, err := OpenResults(ctx, env.js)
	if err != nil {
		t.Fatal(err)
	}
	job := testJob("held-1")
	sub, err := env.nc.SubscribeSync(job.Reply)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	prefill, _, err := res.Claim(ctx, env.nc, job)
	if err != nil {
		t.Fatal(err)
	}
	decode, claim, err := res.Claim(ctx, env.nc, job)
	if err != nil || claim != ClaimRun {
		t.Fatalf("decode claim %v, %v", claim, err)
	}
	if err := prefill.FailIfHeld(ctx, ErrKindInternal, "stale"); !errors.Is(err, ErrLostClaim) {
		t.Fatalf("stale FailIfHeld: %v, want ErrLostClaim", err)
	}
	if m, err := sub.NextMsg(100 * time.Millisecond); err == nil {
		t.Fatalf("stale claimant sent %s", m.Data)
	}
	if err := decode.FailIfHeld(ctx, ErrKindInternal, "KV handoff failed: x"); err != nil {
		t.Fatal(err)
	}
	m, err := sub.NextMsg(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	f, err := DecodeFrame(m.Data)
	if err != nil || f.Kind != KindError || f.Seq != 1 || f.Error.Message != "KV handoff failed: x" {
		t.Fatalf("frame %+v, %v", f, err)
	}
	if rec, _, _ := res.Get(ctx, job.ID); rec.Status != StatusFailed || rec.Error == nil {
		t.Errorf("record %+v", rec)
	}
	if err := decode.FailIfHeld(ctx, ErrKindInternal, "again"); !errors.Is(err, ErrEnded) {
		t.Errorf("second FailIfHeld: %v, want ErrEnded", err)
	}
	if _, claim, _ := res.Claim(ctx, env.nc, job); claim != ClaimFinished {
		t.Errorf("claim after failure: %v, want finished", claim)
	}
}

// TestFailIfHeldUnrecorded: a FailIfHeld whose write finds no stream to
// answer it (a results bucket without a leader) sends nothing and leaves
// the end unrecorded; RecordEnd, once the bucket answers again, writes the
// failure and only then sends the error frame, once.
func TestFailIfHeldUnrecorded(t *testing.T) {
	env := startEnv(t, StreamConfig{})
	ctx := context.Background()
	res, err := OpenResults(ctx, env.js)
	if err != nil {
		t.Fatal(err)
	}
	job := testJob("held-unrecorded")
	sub, err := env.nc.SubscribeSync(job.Reply)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	rp, claim, err := res.Claim(ctx, env.nc, job)
	if err != nil || claim != ClaimRun {
		t.Fatalf("claim %v, %v", claim, err)
	}
	listening := res.stream.CachedInfo().Config
	deaf := listening
	deaf.Subjects = []string{"paused." + ResultsBucket + ".>"}
	if _, err := env.js.UpdateStream(ctx, deaf); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	err = rp.FailIfHeld(short, ErrKindUnavailable, "KV handoff failed: y")
	cancel()
	if err == nil || errors.Is(err, ErrLostClaim) || !rp.Unrecorded() {
		t.Fatalf("FailIfHeld on a deaf bucket: %v, unrecorded %v; want an error and unrecorded", err, rp.Unrecorded())
	}
	if m, err := sub.NextMsg(100 * time.Millisecond); err == nil {
		t.Fatalf("frame sent before the failure was recorded: %s", m.Data)
	}
	if _, err := env.js.UpdateStream(ctx, listening); err != nil {
		t.Fatal(err)
	}
	if err := rp.RecordEnd(ctx); err != nil || rp.Unrecorded() {
		t.Fatalf("RecordEnd: %v, unrecorded %v", err, rp.Unrecorded())
	}
	m, err := sub.NextMsg(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if f, err := DecodeFrame(m.Data); err != nil || f.Kind != KindError || f.Error.Kind != ErrKindUnavailable {
		t.Fatalf("frame %+v, %v", f, err)
	}
	if rec, _, _ := res.Get(ctx, job.ID); rec.Status != StatusFailed || rec.Error == nil {
		t.Errorf("record %+v", rec)
	}
	if err := rp.RecordEnd(ctx); err != nil {
		t.Errorf("RecordEnd after the end was recorded: %v", err)
	}
	if m, err := sub.NextMsg(100 * time.Millisecond); err == nil {
		t.Errorf("a second frame: %s", m.Data)
	}
}

package worker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/bulkhead-ai/bulkhead/models/testkit"
	"github.com/bulkhead-ai/bulkhead/queue"
	"github.com/bulkhead-ai/bulkhead/workers/engine"
	"github.com/bulkhead-ai/bulkhead/workers/kvcache"
)

// cancelled is a deployment under a cancel test: its engines, and the one
// whose prefix cache would be looked up first if the job ran.
type cancelled struct {
	engines []*engine.Engine
	first   *engine.Engine
	split   bool
}

// deploy starts a unified worker, or a prefill and a decode worker, with the
// hook on the worker of role hookOn.
func deploy(t *testing.T, ev *env, split bool, hookOn Role, hook func(*queue.Job)) *cancelled {
	t.Helper()
	with := func(r Role) Config {
		if r == hookOn {
			return Config{beforeWatch: hook}
		}
		return Config{}
	}
	if !split {
		e := startEngine(t, engine.Config{})
		cfg := with(RoleUnified)
		cfg.Models = map[string]*engine.Engine{model: e}
		startWorker(t, ev, cfg)
		return &cancelled{engines: []*engine.Engine{e}, first: e}
	}
	s := startSplit(t, ev, engine.Config{}, engine.Config{}, with(RolePrefill), with(RoleDecode))
	return &cancelled{engines: []*engine.Engine{s.pre, s.dec}, first: s.pre, split: true}
}

// drained waits until the work-queue stream holds no message: every delivery
// was acked (or terminated).
func drained(t *testing.T, ev *env, stream string) {
	t.Helper()
	testkit.Poll(t, 10*time.Second, func() error {
		s, err := ev.js.Stream(context.Background(), stream)
		if err != nil {
			return err
		}
		if m := s.CachedInfo().State.Msgs; m != 0 {
			return fmt.Errorf("%d messages still in %s", m, stream)
		}
		return nil
	})
}

// noUsage fails if a usage event arrived on sub.
func noUsage(t *testing.T, sub *nats.Subscription) {
	t.Helper()
	if m, err := sub.NextMsg(100 * time.Millisecond); err == nil {
		t.Errorf("usage event for the cancelled job: %s", m.Data)
	}
}

// TestCancelBeforeWorker: a job cancelled while it waits in the stream, with
// no worker running, is acked by the worker that later takes it and never
// reaches an engine: no prefix-cache lookup, no hand-over, no frame, no
// usage event. A job submitted after it runs normally.
func TestCancelBeforeWorker(t *testing.T) {
	for _, tc := range []struct {
		name  string
		split bool
	}{
		{"unified", false},
		{"prefill and decode", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ev := startNATS(t)
			usage, err := ev.nc.SubscribeSync(queue.UsageSubject("tenant-a"))
			if err != nil {
				t.Fatal(err)
			}
			defer usage.Unsubscribe()
			job := jobFor(t, "Once upon a time", "tenant-a", true)
			r, err := ev.client.Submit(context.Background(), job)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			if err := ev.client.Cancel(t.Context(), job.ID); err != nil {
				t.Fatal(err)
			}

			d := deploy(t, ev, tc.split, "", nil)
			if ok := submit(t, ev, jobFor(t, "Once upon a time", "tenant-b", false)); ok.last.Kind != queue.KindFinal {
				t.Fatalf("the job after the cancelled one: last frame %+v", ok.last)
			}
			drained(t, ev, queue.JobsStream)
			if st := d.first.KV().PrefixStats(); st != (kvcache.PrefixStats{}) {
				t.Errorf("the cancelled job reached the engine: prefix cache %+v", st)
			}
			if d.split {
				if n := handovers(t, ev); n != 1 {
					t.Errorf("%d hand-overs published, want 1 (the later job's)", n)
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			if f, err := r.Next(ctx); !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("the cancelled job answered: %+v, %v", f, err)
			}
			noUsage(t, usage)
			checkBaseline(t, d.engines...)
		})
	}
}

// TestCancelBetweenClaimAndSubscribe: a cancel that lands after a worker
// claimed the job but before it listens for the signal (so the signal itself
// reaches nobody) still stops the job before any engine work: the client gets
// one aborted frame and the engine nothing.
func TestCancelBetweenClaimAndSubscribe(t *testing.T) {
	for _, tc := range []struct {
		name   string
		split  bool
		hookOn Role
	}{
		{"unified", false, RoleUnified},
		{"prefill", true, RolePrefill},
		{"decode", true, RoleDecode},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ev := startNATS(t)
			usage, err := ev.nc.SubscribeSync(queue.UsageSubject("tenant-a"))
			if err != nil {
				t.Fatal(err)
			}
			defer usage.Unsubscribe()
			job := jobFor(t, "Once upon a time", "tenant-a", true)
			hooked := make(chan error, 1)
			d := deploy(t, ev, tc.split, tc.hookOn, func(j *queue.Job) {
				if j.ID == job.ID {
					hooked <- ev.client.Cancel(t.Context(), j.ID)
				}
			})

			got := submit(t, ev, job)
			got.wantError(t, queue.ErrKindAborted, "cancelled")
			select {
			case err := <-hooked:
				if err != nil {
					t.Fatal(err)
				}
			default:
				t.Fatal("the hook never ran")
			}
			drained(t, ev, queue.JobsStream)
			if tc.split {
				drained(t, ev, queue.DecodeStream)
			}
			var wantHandovers uint64
			whole := d.engines
			if tc.hookOn == RoleDecode {
				// The prefill ran and published the prompt's pages in its
				// prefix cache; the decode side did not run.
				wantHandovers = 1
				flushPrefixesAtEnd(t, d.first)
				whole = d.engines[1:]
			} else if st := d.first.KV().PrefixStats(); st != (kvcache.PrefixStats{}) {
				t.Errorf("the cancelled job reached the engine: prefix cache %+v", st)
			}
			if tc.split {
				if n := handovers(t, ev); n != wantHandovers {
					t.Errorf("%d hand-overs published, want %d", n, wantHandovers)
				}
			}
			noUsage(t, usage)
			checkBaseline(t, whole...)
		})
	}
}

// TestAfterTokenHolds: a worker whose AfterToken hook holds a stream at
// token 3 sends exactly three token frames, then, when the job is
// cancelled, an aborted error frame; nothing of the generation the engine
// finished meanwhile goes out, and the job is billed for three tokens.
func TestAfterTokenHolds(t *testing.T) {
	ev := startNATS(t)
	e := startEngine(t, engine.Config{})
	held := make(chan string, 1)
	startWorker(t, ev, Config{Models: map[string]*engine.Engine{model: e}, AfterToken: func(ctx context.Context, job *queue.Job, n int) {
		if n == 3 {
			held <- job.ID
			<-ctx.Done()
		}
	}})
	usage, err := ev.nc.SubscribeSync(queue.UsagePrefix + ">")
	if err != nil {
		t.Fatal(err)
	}
	job := newJob(t, "Once upon a time", 200)
	r, err := ev.client.Submit(context.Background(), job)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	waitHeld(t, job, held)
	if err := ev.client.Cancel(context.Background(), job.ID); err != nil {
		t.Fatal(err)
	}
	frames, err := collect(t, r)
	if !errors.Is(err, io.EOF) || len(frames) != 4 || frames[3].Kind != queue.KindError || frames[3].Error.Kind != queue.ErrKindAborted {
		t.Fatalf("%d frames (%v), last %+v: want 3 tokens and an aborted error", len(frames), err, frames[len(frames)-1])
	}
	m, err := usage.NextMsg(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	ue, err := queue.DecodeUsage(m.Data)
	if err != nil || ue.CompletionTokens != 3 || ue.Finish != queue.OutcomeCancelled {
		t.Fatalf("usage %+v (%v): want 3 tokens, cancelled", ue, err)
	}
}

package worker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/bulkhead-ai/bulkhead/models/testkit"
	"github.com/bulkhead-ai/bulkhead/queue"
	"github.com/bulkhead-ai/bulkhead/workers/engine"
	"github.com/bulkhead-ai/bulkhead/workers/kvcache"
)

// TestCancel cancels a job after its first frame: the stream ends with an
// aborted frame and the engine frees the job's KV pages. The engine holds
// the job after a few tokens (engine.Config.HoldAt), so it is still running
// when the cancel lands, however fast the engine is.
func TestCancel(t *testing.T) {
	ev := startNATS(t)
	e := startEngine(t, engine.Config{HoldAt: 3})
	startWorker(t, ev, Config{Models: map[string]*engine.Engine{model: e}})
	total := e.KV().TotalPages()
	cancelHeld(t, ev, "Once upon a time")
	testkit.Poll(t, 5*time.Second, func() error {
		if free := e.KV().FreePages(); free != total {
			return fmt.Errorf("%d of %d KV pages free after the job", free, total)
		}
		return nil
	})
}

func TestAsync(t *testing.T) {
	ev := startNATS(t)
	e := startEngine(t, engine.Config{})
	ctx := context.Background()
	job := newJob(t, "Once upon a time", 24)
	job.Reply = ""
	if err := ev.client.SubmitAsync(ctx, job); err != nil {
		t.Fatal(err)
	}
	st, err := ev.client.AsyncStatus(ctx, job.ID)
	if err != nil || st.Status != queue.StatusQueued {
		t.Fatalf("before any worker: %+v, %v; want queued", st, err)
	}
	startWorker(t, ev, Config{Models: map[string]*engine.Engine{model: e}})
	ids := e.Model().Tokenizer.Encode(job.Prompt, true, false)
	want, err := e.Generate(ctx, engine.Request{Owner: kvcache.Owner{Namespace: "ref", Request: "r"}, Prompt: ids, MaxTokens: 24})
	if err != nil {
		t.Fatal(err)
	}
	testkit.Poll(t, 10*time.Second, func() error {
		st, err = ev.client.AsyncStatus(ctx, job.ID)
		if err != nil {
			return err
		}
		if st.Status != queue.StatusDone {
			return fmt.Errorf("status %s", st.Status)
		}
		return nil
	})
	if st.Text != want.Text || st.Finish != want.Finish || st.Usage.CompletionTokens != len(want.CompletionTokens) || st.Tenant != job.Tenant {
		t.Errorf("result %+v, want text %q finish %s", st, want.Text, want.Finish)
	}
}

// TestAsyncEndOutlivesLeaderlessBucket: an async job's record is its only
// answer. When no stream answers the results bucket's writes at the job's
// end for longer than a write's retries (queue.LeaderWait: a JetStream
// cluster electing a leader after losing a server can take longer), the
// worker keeps the job's message in progress and writes the end again once
// the bucket answers: the job ends done with its text, billed once.
func TestAsyncEndOutlivesLeaderlessBucket(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out queue.LeaderWait")
	}
	ev := startNATS(t)
	e := startEngine(t, engine.Config{})
	ctx := context.Background()
	bucket, err := ev.js.Stream(ctx, "KV_"+queue.ResultsBucket)
	if err != nil {
		t.Fatal(err)
	}
	listening := bucket.CachedInfo().Config
	deaf := listening
	deaf.Subjects = []string{"paused." + queue.ResultsBucket + ".>"}
	paused := make(chan struct{})
	var once sync.Once
	startWorker(t, ev, Config{Models: map[string]*engine.Engine{model: e},
		AfterToken: func(_ context.Context, _ *queue.Job, n int) {
			// After the claim, before the end: the bucket stops answering.
			once.Do(func() {
				if _, err := ev.js.UpdateStream(ctx, deaf); err != nil {
					t.Error(err)
				}
				close(paused)
			})
		}})
	usage := countUsage(t, ev.nc)
	job := newJob(t, "Once upon a time", 24)
	job.Reply = ""
	if err := ev.client.SubmitAsync(ctx, job); err != nil {
		t.Fatal(err)
	}
	<-paused
	time.Sleep(queue.LeaderWait + 3*time.Second) // the worker's write of the end gave up
	if _, err := ev.js.UpdateStream(ctx, listening); err != nil {
		t.Fatal(err)
	}
	ids := e.Model().Tokenizer.Encode(job.Prompt, true, false)
	want, err := e.Generate(ctx, engine.Request{Owner: kvcache.Owner{Namespace: "ref", Request: "r"}, Prompt: ids, MaxTokens: 24})
	if err != nil {
		t.Fatal(err)
	}
	var st *queue.AsyncResult
	testkit.Poll(t, 20*time.Second, func() error {
		st, err = ev.client.AsyncStatus(ctx, job.ID)
		if err != nil {
			return err
		}
		if st.Status != queue.StatusDone {
			return fmt.Errorf("status %s after the bucket answered again", st.Status)
		}
		return nil
	})
	if st.Text != want.Text || st.Attempts != 1 {
		t.Errorf("result %+v, want text %q from one attempt", st, want.Text)
	}
	if n := len(usage.get(job.ID)); n != 1 {
		t.Errorf("%d usage events, want 1", n)
	}
}

// TestShutdownDrains stops a worker while a job runs: the job still ends with
// its final frame and Run returns only after it. The worker holds the
// stream after its first token (Config.AfterToken) until the stop began, so
// the job is mid-stream then, however fast the engine is.
func TestShutdownDrains(t *testing.T) {
	ev := startNATS(t)
	e := startEngine(t, engine.Config{})
	held, release := make(chan string, 1), make(chan struct{})
	w := runWorker(t, ev, Config{Models: map[string]*engine.Engine{model: e}, AfterToken: holdFirstToken(held, release)})
	job := newJob(t, "Once upon a time", 24)
	r, err := ev.client.Submit(context.Background(), job)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	waitHeld(t, job, held)
	if err := stopHeld(t, w, release); err != nil {
		t.Fatalf("Run returned %v", err)
	}
	frames, err := collect(t, r)
	if !errors.Is(err, io.EOF) || frames[len(frames)-1].Kind != queue.KindFinal {
		t.Fatalf("after shutdown: %d frames then %v", len(frames), err)
	}
}

// TestShutdownRequeues stops a worker whose job is still waiting inside the
// engine after the grace period: the job is requeued, not failed, and the next
// worker runs it.
func TestShutdownRequeues(t *testing.T) {
	ev := startNATS(t)
	e := startEngine(t, engine.Config{MaxBatch: 1, QueueSize: 4, HoldAt: holdAt})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	load, err := e.Submit(ctx, heldRequest(e, "load"))
	if err != nil {
		t.Fatal(err)
	}
	<-load
	stop := startWorker(t, ev, Config{Models: map[string]*engine.Engine{model: e}, Grace: 100 * time.Millisecond})
	job := newJob(t, "Once upon a time", holdAt) // runs to its end once it has the slot
	r, err := ev.client.Submit(context.Background(), job)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	res, err := queue.OpenResults(context.Background(), ev.js)
	if err != nil {
		t.Fatal(err)
	}
	testkit.Poll(t, 10*time.Second, func() error { // the worker holds the job
		rec, _, err := res.Get(context.Background(), job.ID)
		if err != nil {
			return err
		}
		if rec.Status != queue.StatusRunning {
			return fmt.Errorf("status %s", rec.Status)
		}
		return nil
	})
	// The job is still waiting inside the engine when the grace period ends:
	// the worker cancels it (the engine drops cancelled waiters at its next
	// step) and requeues it.
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	cancel()
	for range load {
	}
	rec, _, err := res.Get(context.Background(), job.ID)
	if err != nil || rec.Status != queue.StatusQueued || rec.Streamed {
		t.Fatalf("record after shutdown %+v, %v; want queued, not streamed", rec, err)
	}
	startWorker(t, ev, Config{Models: map[string]*engine.Engine{model: e}})
	frames, err := collect(t, r)
	if !errors.Is(err, io.EOF) || frames[len(frames)-1].Kind != queue.KindFinal {
		t.Fatalf("requeued job: %d frames then %v", len(frames), err)
	}
	if rec, _, _ := res.Get(context.Background(), job.ID); rec.Attempts != 2 {
		t.Errorf("job ran %d times, want 2 claims", rec.Attempts)
	}
}

func TestNewRefuses(t *testing.T) {
	ev := startNATS(t)
	e := startEngine(t, engine.Config{})
	ok := map[string]*engine.Engine{model: e}
	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		{"no models", Config{}},
		{"nil engine", Config{Models: map[string]*engine.Engine{model: nil}}},
		{"empty name", Config{Models: map[string]*engine.Engine{"": e}}},
		{"negative concurrency", Config{Models: ok, Concurrency: -1}},
		{"heartbeat not below ack wait", Config{Models: ok, HeartbeatEvery: 30 * time.Second}},
		{"heartbeat beyond custom ack wait", Config{Models: ok, HeartbeatEvery: 5 * time.Second, Consumer: queue.ConsumerConfig{AckWait: 2 * time.Second}}},
		{"negative grace", Config{Models: ok, Grace: -1}},
		{"negative busy delay", Config{Models: ok, BusyDelay: -1}},
		{"negative fetch wait", Config{Models: ok, FetchWait: -1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := New(nil, ev.nc, ev.js, tc.cfg); !errors.Is(err, ErrConfig) {
				t.Errorf("New(%+v) = %v, want ErrConfig", tc.cfg, err)
			}
		})
	}
	t.Run("no connection", func(t *testing.T) {
		if _, err := New(nil, nil, ev.js, Config{Models: ok}); !errors.Is(err, ErrConfig) {
			t.Errorf("New without a connection = %v", err)
		}
	})
	t.Run("run twice", func(t *testing.T) {
		w, err := New(nil, ev.nc, ev.js, Config{Models: ok, FetchWait: 50 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- w.Run(ctx) }()
		// Running: the worker has joined the model's tenant queues, which
		// narrows the model's own consumer to the legacy subject.
		testkit.Poll(t, 5*time.Second, func() error {
			c, err := ev.js.Consumer(context.Background(), queue.JobsStream, queue.ConsumerName(model))
			if err != nil {
				return err
			}
			if f := c.CachedInfo().Config.FilterSubject; f != queue.JobSubject(model) {
				return fmt.Errorf("the worker has not joined the tenant queues yet (filter %q)", f)
			}
			return nil
		})
		if err := w.Run(ctx); !errors.Is(err, ErrRunning) {
			t.Errorf("second Run = %v, want ErrRunning", err)
		}
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v", err)
		}
	})
}

// TestSharedConsumer: two workers serving one model share its durable
// consumer, and every job is answered exactly once.
func TestSharedConsumer(t *testing.T) {
	ev := startNATS(t)
	e := startEngine(t, engine.Config{})
	usage := countUsage(t, ev.nc)
	cfg := Config{Models: map[string]*engine.Engine{model: e}, Concurrency: 2}
	startWorker(t, ev, cfg)
	startWorker(t, ev, cfg)
	var rs []*queue.Replies
	var jobs []*queue.Job
	for range 6 {
		job := newJob(t, "The sun", 12)
		r, err := ev.client.Submit(context.Background(), job)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		rs, jobs = append(rs, r), append(jobs, job)
	}
	for i, r := range rs {
		frames, err := collect(t, r)
		if !errors.Is(err, io.EOF) || frames[len(frames)-1].Kind != queue.KindFinal {
			t.Fatalf("job %d: %d frames then %v", i, len(frames), err)
		}
	}
	testkit.Poll(t, 5*time.Second, func() error {
		for _, j := range jobs {
			if n := len(usage.get(j.ID)); n != 1 {
				return fmt.Errorf("%s: %d usage events", j.ID, n)
			}
		}
		return nil
	})
	info, err := ev.js.Consumer(context.Background(), queue.JobsStream, queue.ConsumerName(model))
	if err != nil {
		t.Fatal(err)
	}
	if c := info.CachedInfo().Config; c.AckPolicy != jetstream.AckExplicitPolicy || c.MaxDeliver != 3 || !strings.HasPrefix(c.Durable, "worker-") {
		t.Errorf("consumer config %+v", c)
	}
}

// cancelHeld submits a job to a worker whose engine holds every sequence
// after a few tokens (engine.Config.HoldAt), cancels it once its first token
// arrived (it is still running then, however fast the engine is) and checks
// that its stream ends with an aborted frame.
func cancelHeld(t *testing.T, ev *env, prompt string) {
	t.Helper()
	job := newJob(t, prompt, 64)
	r, err := ev.client.Submit(context.Background(), job)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if f, err := r.Next(context.Background()); err != nil || f.Kind != queue.KindToken {
		t.Fatalf("first frame %+v, %v", f, err)
	}
	if err := ev.client.Cancel(t.Context(), job.ID); err != nil {
		t.Fatal(err)
	}
	frames, err := collect(t, r)
	if !errors.Is(err, io.EOF) {
		t.Fatalf("stream ended with %v", err)
	}
	if last := frames[len(frames)-1]; last.Kind != queue.KindError || last.Error.Kind != queue.ErrKindAborted {
		t.Fatalf("last frame %+v %+v, want aborted", last, last.Error)
	}
}

// heldJob submits a greedy job to a worker whose engine holds every
// sequence after a few tokens (engine.Config.HoldAt), so the job runs until
// its deadline, due in after, however fast the engine is; it returns the
// job and its frames.
func heldJob(t *testing.T, ev *env, after time.Duration) (*queue.Job, []*queue.Frame) {
	t.Helper()
	job := newJob(t, "Once upon a time", 64)
	job.Deadline = time.Now().Add(after)
	r, err := ev.client.Submit(context.Background(), job)
	if err != nil {
		t.Fatal(err)
	}
	frames, err := collect(t, r)
	r.Close()
	if !errors.Is(err, io.EOF) {
		t.Fatalf("stream ended with %v", err)
	}
	return job, frames
}

// TestDeadlineMidRun: a job whose deadline passes while it generates ends with
// a timeout frame, never a final one, and frees its pages.
func TestDeadlineMidRun(t *testing.T) {
	ev := startNATS(t)
	e := startEngine(t, engine.Config{HoldAt: 3})
	startWorker(t, ev, Config{Models: map[string]*engine.Engine{model: e}})
	_, frames := heldJob(t, ev, 2*time.Second)
	testkit.Poll(t, 5*time.Second, func() error {
		if free, total := e.KV().FreePages(), e.KV().TotalPages(); free != total {
			return fmt.Errorf("%d of %d pages free", free, total)
		}
		return nil
	})
	last := frames[len(frames)-1]
	if last.Kind != queue.KindError || last.Error.Kind != queue.ErrKindTimeout || len(frames) < 2 {
		t.Fatalf("%d frames, last %+v %+v; want tokens then a timeout", len(frames), last, last.Error)
	}
}

// TestHeartbeat: a job that runs longer than the consumer's AckWait is not
// redelivered while its worker keeps marking it in progress: held after a
// few tokens, it runs four AckWaits, to its deadline.
func TestHeartbeat(t *testing.T) {
	ev := startNATS(t)
	e := startEngine(t, engine.Config{HoldAt: 3})
	const ackWait = time.Second
	startWorker(t, ev, Config{
		Models:         map[string]*engine.Engine{model: e},
		HeartbeatEvery: ackWait / 6,
		Consumer:       queue.ConsumerConfig{AckWait: ackWait},
	})
	job, frames := heldJob(t, ev, 4*ackWait)
	last := frames[len(frames)-1]
	if last.Kind != queue.KindError || last.Error.Kind != queue.ErrKindTimeout || len(frames) < 2 {
		t.Fatalf("%d frames, last %+v %+v; want tokens then a timeout (a redelivery would end it as lost mid-stream)", len(frames), last, last.Error)
	}
	res, err := queue.OpenResults(context.Background(), ev.js)
	if err != nil {
		t.Fatal(err)
	}
	if rec, _, err := res.Get(context.Background(), job.ID); err != nil || rec.Attempts != 1 {
		t.Fatalf("record %+v, %v; want one claim", rec, err)
	}
}

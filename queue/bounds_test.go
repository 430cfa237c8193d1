package queue

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bulkhead-ai/bulkhead/models/testkit"
)

// oldRecordBytes is what a finished job's record took before records of
// synchronous jobs expired: 414 bytes, kept 24 h.
const oldRecordBytes = 414

// TestSyncRecordsDoNotFill runs many times the jobs a small results bucket
// held with day-long records through claim and final, at full speed: every
// write succeeds, because a synchronous job's record lives only its
// deadline plus the keep time, and the bucket stays under its limit.
func TestSyncRecordsDoNotFill(t *testing.T) {
	// 200 jobs/s whose records live about 2 s (a second of keep, plus the
	// server's expiry tick) is ~400 records of ~450 bytes: a 512 KiB bucket
	// has headroom. With day-long records it held 1266 jobs.
	const (
		bucket = 512 << 10
		rate   = 200
	)
	jobs := 2 * bucket / oldRecordBytes // twice what the old records allowed
	if testing.Short() {
		jobs = bucket / oldRecordBytes / 2
	}
	env := startEnv(t, StreamConfig{ResultsMaxBytes: bucket, Memory: true})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := OpenResults(ctx, env.js)
	if err != nil {
		t.Fatal(err)
	}
	res = res.WithSyncKeep(time.Second)
	start := time.Now()
	tick := time.NewTicker(time.Second / rate)
	defer tick.Stop()
	for i := range jobs {
		<-tick.C
		job := testJob("sync-" + itoa(i))
		job.Deadline = time.Now().Add(time.Second) // the edge's request timeout, short here
		rp, claim, err := res.Claim(ctx, env.nc, job)
		if err != nil || claim != ClaimRun {
			t.Fatalf("job %d of %d after %v: claim %v, %v", i, jobs, time.Since(start), claim, err)
		}
		if err := rp.Token(ctx, "x", nil); err != nil {
			t.Fatalf("job %d: token: %v", i, err)
		}
		if err := rp.Final(ctx, "", "stop", Usage{PromptTokens: 1, CompletionTokens: 1}); err != nil {
			t.Fatalf("job %d: final: %v", i, err)
		}
	}
	st, err := env.js.Stream(ctx, "KV_"+ResultsBucket)
	if err != nil {
		t.Fatal(err)
	}
	info := st.CachedInfo()
	t.Logf("%d jobs in %v through a %d-byte bucket (old limit %d jobs); now %d bytes, %d records",
		jobs, time.Since(start).Round(time.Millisecond), bucket, bucket/oldRecordBytes, info.State.Bytes, info.State.Msgs)
	// And the records do go: within the keep time the bucket empties.
	testkit.Poll(t, 30*time.Second, func() error {
		info, err := st.Info(ctx)
		if err != nil {
			return err
		}
		if info.State.Msgs > 0 && info.State.Bytes > 4<<10 {
			return errors.New("records still there: " + itoa(int(info.State.Msgs)))
		}
		return nil
	})
}

func itoa(i int) string {
	const digits = "0123456789"
	if i == 0 {
		return "0"
	}
	var b []byte
	for ; i > 0; i /= 10 {
		b = append([]byte{digits[i%10]}, b...)
	}
	return string(b)
}

// TestFullStoreFailsFast: with the results bucket full (of async results,
// which live their TTL), an async submit is ErrStoreFull and a synchronous
// job's client gets an ErrKindUnavailable frame at once from the worker's
// claim, never an idle timeout.
func TestFullStoreFailsFast(t *testing.T) {
	env := startEnv(t, StreamConfig{ResultsMaxBytes: 8 << 10, Memory: true})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := NewClient(env.nc, env.js)
	res, err := OpenResults(ctx, env.js)
	if err != nil {
		t.Fatal(err)
	}
	var full error
	for i := 0; i < 1000 && full == nil; i++ {
		_, full = res.Create(ctx, &AsyncResult{ID: "async-" + itoa(i), Tenant: "t", Status: StatusDone, Text: "a result"})
	}
	if !errors.Is(full, ErrStoreFull) {
		t.Fatalf("filling the bucket ended with %v, want ErrStoreFull", full)
	}
	start := time.Now()
	job := testJob("async-after")
	job.Reply = ""
	if err := c.SubmitAsync(ctx, job); !errors.Is(err, ErrStoreFull) {
		t.Fatalf("SubmitAsync into a full bucket = %v, want ErrStoreFull", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("refusing took %v", d)
	}

	job = testJob("sync-after")
	replies, err := c.Submit(ctx, job)
	if err != nil {
		t.Fatal(err)
	}
	defer replies.Close()
	msg, got := fetchJob(t, env, job.Model)
	start = time.Now()
	rp, claim, err := res.Claim(ctx, env.nc, got)
	if err != nil || claim != ClaimFinished || rp != nil {
		t.Fatalf("claim in a full bucket: %v %v, want ClaimFinished", claim, err)
	}
	_ = msg.Ack()
	f, err := replies.Next(ctx)
	if err != nil || f.Kind != KindError || f.Error.Kind != ErrKindUnavailable {
		t.Fatalf("client got %+v, %v; want an unavailable error frame", f, err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("the client waited %v", d)
	}
}

// TestAsyncLeavesRoomForSync: async submissions stop (ErrStoreFull) once the
// results bucket holds AsyncShare of its bytes, and synchronous jobs are
// still recorded and claimed afterwards.
func TestAsyncLeavesRoomForSync(t *testing.T) {
	env := startEnv(t, StreamConfig{ResultsMaxBytes: 64 << 10, Memory: true})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := NewClient(env.nc, env.js)
	var refused error
	n := 0
	for ; n < 1000 && refused == nil; n++ {
		job := testJob("flood-" + itoa(n))
		job.Reply = ""
		refused = c.SubmitAsync(ctx, job)
	}
	if !errors.Is(refused, ErrStoreFull) {
		t.Fatalf("async flood ended with %v after %d jobs, want ErrStoreFull", refused, n)
	}
	res, err := OpenResults(ctx, env.js)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 8 {
		job := testJob("sync-" + itoa(i))
		job.Model = "@cf/test/sync" // its own consumer: not behind the async flood
		replies, err := c.Submit(ctx, job)
		if err != nil {
			t.Fatal(err)
		}
		msg, got := fetchJob(t, env, job.Model)
		if got.ID != job.ID {
			t.Fatalf("fetched %s, want %s", got.ID, job.ID)
		}
		_ = msg.Ack()
		rp, claim, err := res.Claim(ctx, env.nc, got)
		if err != nil || claim != ClaimRun {
			t.Fatalf("sync job %d after the async flood: claim %v %v", i, claim, err)
		}
		if err := rp.Final(ctx, "ok", "stop", Usage{}); err != nil {
			t.Fatal(err)
		}
		replies.Close()
	}
	t.Logf("async refused after %d jobs", n)
}

// TestHeartbeats: before any frame the idle timeout applies (a job may wait
// in the stream); once a worker's heartbeat came, silence for
// HeartbeatTimeout is ErrWorkerLost; heartbeats never reach the caller.
func TestHeartbeats(t *testing.T) {
	env := startEnv(t, StreamConfig{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := NewClient(env.nc, env.js).WithIdleTimeout(20 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	job := testJob("beat-1")
	replies, err := c.Submit(ctx, job)
	if err != nil {
		t.Fatal(err)
	}
	defer replies.Close()
	_, got := fetchJob(t, env, job.Model)
	res, err := OpenResults(ctx, env.js)
	if err != nil {
		t.Fatal(err)
	}
	rp, _, err := res.Claim(ctx, env.nc, got)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := rp.Heartbeat(); err != nil {
			t.Fatal(err)
		}
	}
	if err := rp.Token(ctx, "a", nil); err != nil {
		t.Fatal(err)
	}
	f, err := replies.Next(ctx)
	if err != nil || f.Kind != KindToken || f.Seq != 1 {
		t.Fatalf("first frame %+v, %v; want token 1 (heartbeats are not returned)", f, err)
	}
	// The worker dies here: no frame, no heartbeat.
	start := time.Now()
	_, err = replies.Next(ctx)
	d := time.Since(start)
	if !errors.Is(err, ErrWorkerLost) {
		t.Fatalf("after the worker went silent: %v, want ErrWorkerLost", err)
	}
	if d < HeartbeatTimeout-100*time.Millisecond || d > HeartbeatTimeout+time.Second {
		t.Fatalf("noticed after %v, want about %v", d, HeartbeatTimeout)
	}
	t.Logf("dead worker noticed after %v", d.Round(time.Millisecond))
	// A Replier sends no heartbeat after its last frame.
	if err := rp.Final(ctx, "", "stop", Usage{}); err != nil {
		t.Fatal(err)
	}
	if err := rp.Heartbeat(); err != nil {
		t.Fatal(err)
	}
}

// TestWaitingJobLosesItsWorkers: a job waiting in the stream for its model's
// workers ends in ErrNoWorker as soon as the model has none left (the last
// one stopped between the admission check and the publish, say), not after
// the idle timeout; a job a worker holds (it sent a heartbeat) is that
// worker's to finish or lose (ErrWorkerLost).
func TestWaitingJobLosesItsWorkers(t *testing.T) {
	env := startEnv(t, StreamConfig{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const model = "@cf/test/leaving"
	live := NewLiveModels(0)
	live.Set(Fleet{Windows: map[string]int{model: 512}})
	c := NewClient(env.nc, env.js).WithLiveness(live)

	waiting := testJob("leaving-waiting")
	waiting.Model = model
	wr, err := c.Submit(ctx, waiting)
	if err != nil {
		t.Fatal(err)
	}
	defer wr.Close()
	held := testJob("leaving-held")
	held.Model = model
	hr, err := c.Submit(ctx, held)
	if err != nil {
		t.Fatal(err)
	}
	defer hr.Close()
	res, err := OpenResults(ctx, env.js)
	if err != nil {
		t.Fatal(err)
	}
	var rp *Replier
	for rp == nil {
		_, got := fetchJob(t, env, model)
		if got.ID != held.ID {
			continue // the waiting job stays unclaimed
		}
		if rp, _, err = res.Claim(ctx, env.nc, got); err != nil {
			t.Fatal(err)
		}
	}
	if err := rp.Heartbeat(); err != nil {
		t.Fatal(err)
	}
	if err := rp.Token(ctx, "a", nil); err != nil {
		t.Fatal(err)
	}
	if f, err := hr.Next(ctx); err != nil || f.Kind != KindToken {
		t.Fatalf("held job's first frame %+v, %v", f, err)
	}

	// A change that leaves the model served wakes nobody.
	lost := live.Lost(model)
	for _, f := range []Fleet{{Windows: map[string]int{model: 256, "@cf/test/other": 64}}, {Loading: map[string]bool{model: true}}} {
		live.Set(f)
		select {
		case <-lost:
			t.Fatalf("Lost fired while %+v serves the model", f)
		default:
		}
	}
	live.Set(Fleet{})
	select {
	case <-lost:
	default:
		t.Fatal("Lost did not fire once the model had no worker")
	}
	// The waiting job's 30 s idle timeout is longer than ctx: only the
	// model losing its workers ends it with ErrNoWorker.
	if _, err := wr.Next(ctx); !errors.Is(err, ErrNoWorker) {
		t.Fatalf("waiting job after its model lost its workers: %v, want ErrNoWorker", err)
	}
	if err := rp.Token(ctx, "b", nil); err != nil {
		t.Fatal(err)
	}
	if f, err := hr.Next(ctx); err != nil || f.Kind != KindToken || f.Text != "b" {
		t.Fatalf("held job after its model lost its workers: %+v, %v; want its next token", f, err)
	}

	// A job submitted once the model has gone is refused before it is
	// published; one that raced past that check ends at its first wait.
	late := testJob("leaving-late")
	late.Model = model
	if _, err := c.Submit(ctx, late); !errors.Is(err, ErrNoWorker) {
		t.Fatalf("Submit after the model lost its workers: %v, want ErrNoWorker", err)
	}
	raced := testJob("leaving-raced")
	raced.Model = model
	live.Set(Fleet{Windows: map[string]int{model: 512}})
	rr, err := c.Submit(ctx, raced)
	if err != nil {
		t.Fatal(err)
	}
	defer rr.Close()
	live.Set(Fleet{})
	if _, err := rr.Next(ctx); !errors.Is(err, ErrNoWorker) {
		t.Fatalf("a job whose model lost its workers before its first wait: %v, want ErrNoWorker", err)
	}
}

// TestSubmitFailsFast: a model without a live worker and a bus that is down
// are refused at once, not after the idle timeout.
func TestSubmitFailsFast(t *testing.T) {
	env := startEnv(t, StreamConfig{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	live := NewLiveModels(0)
	live.Set(Fleet{Windows: map[string]int{"@cf/test/model": 512}, Loading: map[string]bool{"@cf/test/loading": true}})
	c := NewClient(env.nc, env.js).WithLiveness(live)
	tests := []struct {
		name  string
		model string
		want  error
	}{
		{"live model", "@cf/test/model", nil},
		{"a worker loading it", "@cf/test/loading", nil},
		{"no live worker", "@cf/test/other", ErrNoWorker},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			job := testJob("fast-" + tc.model)
			job.Model = tc.model
			r, err := c.Submit(ctx, job)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Submit = %v, want %v", err, tc.want)
			}
			if r != nil {
				r.Close()
			}
			ajob := testJob("fast-async-" + tc.model)
			ajob.Model, ajob.Reply = tc.model, ""
			if err := c.SubmitAsync(ctx, ajob); !errors.Is(err, tc.want) {
				t.Fatalf("SubmitAsync = %v, want %v", err, tc.want)
			}
		})
	}
	t.Run("grace for a model never seen", func(t *testing.T) {
		l := NewLiveModels(time.Hour)
		if !l.Live("@cf/test/new") {
			t.Fatal("a model never seen is refused within the grace period")
		}
		gc := NewClient(env.nc, env.js).WithLiveness(l)
		// Nothing is queued for it meanwhile: async is refused at once, a
		// synchronous job waits for the first worker, then is queued.
		ajob := testJob("grace-async")
		ajob.Model, ajob.Reply = "@cf/test/new", ""
		if err := gc.SubmitAsync(ctx, ajob); !errors.Is(err, ErrNoWorker) {
			t.Fatalf("SubmitAsync within the grace = %v, want ErrNoWorker", err)
		}
		job := testJob("grace-sync")
		job.Model = "@cf/test/new"
		done := make(chan error, 1)
		go func() {
			r, err := gc.Submit(ctx, job)
			if r != nil {
				r.Close()
			}
			done <- err
		}()
		select {
		case err := <-done:
			t.Fatalf("Submit returned %v before the model had a worker", err)
		case <-time.After(200 * time.Millisecond):
		}
		l.Set(Fleet{Windows: map[string]int{"@cf/test/new": 64}})
		if err := <-done; err != nil {
			t.Fatalf("Submit once the model had a worker = %v", err)
		}
		short := NewLiveModels(300 * time.Millisecond)
		sjob := testJob("grace-over")
		sjob.Model = "@cf/test/never"
		if _, err := NewClient(env.nc, env.js).WithLiveness(short).Submit(ctx, sjob); !errors.Is(err, ErrNoWorker) {
			t.Fatalf("Submit past the grace = %v, want ErrNoWorker", err)
		}
		l.Set(Fleet{Loading: map[string]bool{"@cf/test/new": true}})
		if !l.Live("@cf/test/new") {
			t.Fatal("a model a worker is loading again is refused")
		}
		l.Set(Fleet{})
		if l.Live("@cf/test/new") {
			t.Fatal("a model whose workers left is still live")
		}
	})
	t.Run("NATS down", func(t *testing.T) {
		env.srv.Shutdown()
		testkit.Poll(t, 5*time.Second, func() error {
			if env.nc.IsConnected() {
				return errors.New("still connected")
			}
			return nil
		})
		start := time.Now()
		_, err := c.Submit(ctx, testJob("down-1"))
		if !errors.Is(err, ErrUnavailable) {
			t.Fatalf("Submit with NATS down = %v, want ErrUnavailable", err)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Fatalf("took %v", d)
		}
	})
}

// TestPublishTimeout: a connection that looks up but whose server does not
// answer (no JetStream stream for the subject: what a cluster electing a
// leader looks like too) is ErrUnavailable once LeaderWait has passed.
func TestPublishTimeout(t *testing.T) {
	env := startEnv(t, StreamConfig{})
	ctx := context.Background()
	if err := env.js.DeleteStream(ctx, JobsStream); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err := NewClient(env.nc, env.js).Submit(ctx, testJob("nostream"))
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Submit = %v, want ErrUnavailable", err)
	}
	if d := time.Since(start); d < LeaderWait || d > LeaderWait+DefaultPublishTimeout+time.Second {
		t.Fatalf("took %v, want LeaderWait (%v) and at most one publish timeout more", d, LeaderWait)
	}
}

// TestSizeFor: limits grow with the load, keep headroom over the records a
// load keeps alive, and a negative load is refused.
func TestSizeFor(t *testing.T) {
	tests := []struct {
		name     string
		load     Load
		minBytes int64 // at least the records alive at once
		minJobs  int64
	}{
		{"idle", Load{}, 1 << 20, 1000},
		{"50 sync/s", Load{SyncPerSecond: 50}, 50 * (4 * 60 * oldRecordBytes), 1000},
		{"1000 sync/s", Load{SyncPerSecond: 1000}, 1000 * (4 * 60 * oldRecordBytes), 2 * 1000 * 30},
		{"async results for a day", Load{AsyncPerSecond: 1, MaxResultBytes: 16 << 10}, 86400 * (16 << 10), 1000},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := SizeFor(tc.load)
			if err != nil {
				t.Fatal(err)
			}
			if cfg.ResultsMaxBytes < tc.minBytes || cfg.MaxJobs < tc.minJobs {
				t.Fatalf("%+v: results %d bytes, jobs %d; want at least %d and %d", tc.load, cfg.ResultsMaxBytes, cfg.MaxJobs, tc.minBytes, tc.minJobs)
			}
			if err := cfg.Validate(); err != nil {
				t.Fatalf("sized config does not validate: %v", err)
			}
		})
	}
	if _, err := SizeFor(Load{SyncPerSecond: -1}); !errors.Is(err, ErrConfig) {
		t.Fatalf("negative load: %v", err)
	}
}

// TestWatchFill: a store past 80 % of its limit is logged once, with its
// name and fill level.
func TestWatchFill(t *testing.T) {
	env := startEnv(t, StreamConfig{ResultsMaxBytes: 16 << 10, Memory: true})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := OpenResults(ctx, env.js)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		if _, err := res.Create(ctx, &AsyncResult{ID: "fill-" + itoa(i), Tenant: "t", Status: StatusQueued}); errors.Is(err, ErrStoreFull) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
	}
	var logs syncLog
	wctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		WatchFill(wctx, slog.New(slog.NewTextHandler(&logs, nil)), env.js, 20*time.Millisecond)
	}()
	testkit.Poll(t, 10*time.Second, func() error {
		if !strings.Contains(logs.String(), "store filling up") || !strings.Contains(logs.String(), "KV_"+ResultsBucket) {
			return errors.New("no fill warning yet: " + logs.String())
		}
		return nil
	})
	time.Sleep(100 * time.Millisecond) // several more checks: still one line
	stop()
	<-done
	if n := strings.Count(logs.String(), "store filling up"); n != 1 {
		t.Fatalf("%d warnings, want 1:\n%s", n, logs.String())
	}
}

type syncLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncLog) Write(p []byte) (int, error) { s.mu.Lock(); defer s.mu.Unlock(); return s.b.Write(p) }
func (s *syncLog) String() string              { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

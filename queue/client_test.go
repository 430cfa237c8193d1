package queue

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"
)

// fetchJob pulls one job for model the way a worker does.
func fetchJob(t *testing.T, env *testEnv, model string) (jetstream.Msg, *Job) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cons, err := EnsureConsumer(ctx, env.js, model, ConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	msg, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	job, err := DecodeJob(msg.Data())
	if err != nil {
		t.Fatal(err)
	}
	return msg, job
}

func readAll(t *testing.T, r *Replies) ([]*Frame, error) {
	t.Helper()
	var out []*Frame
	for {
		f, err := r.Next(context.Background())
		if err != nil {
			return out, err
		}
		out = append(out, f)
	}
}

func TestSubmitAndReplies(t *testing.T) {
	env := startEnv(t, StreamConfig{})
	ctx := context.Background()
	c := NewClient(env.nc, env.js)
	tctx, tr := tracedContext(t)
	job := testJob("req-1")
	replies, err := c.Submit(tctx, job)
	if err != nil {
		t.Fatal(err)
	}
	defer replies.Close()

	msg, got := fetchJob(t, env, job.Model)
	if id := msg.Headers().Get(jetstream.MsgIDHeader); id != job.ID {
		t.Errorf("Nats-Msg-Id %q, want %q", id, job.ID)
	}
	if gt := trace.SpanContextFromContext(ExtractTrace(ctx, msg.Headers())); !gt.Equal(tr.WithRemote(true)) {
		t.Errorf("trace on the job message %v, want %v", gt, tr)
	}
	res, err := OpenResults(ctx, env.js)
	if err != nil {
		t.Fatal(err)
	}
	rp, claim, err := res.Claim(ctx, env.nc, got)
	if err != nil || claim != ClaimRun {
		t.Fatalf("Claim = %v, %v; want run", claim, err)
	}
	for i, s := range []string{"Once", " upon", ""} {
		if err := rp.Token(ctx, s, []int32{int32(i)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := rp.Final(ctx, " a time", "length", Usage{PromptTokens: 5, CompletionTokens: 3}); err != nil {
		t.Fatal(err)
	}
	if err := msg.Ack(); err != nil {
		t.Fatal(err)
	}
	frames, err := readAll(t, replies)
	if !errors.Is(err, io.EOF) {
		t.Fatalf("stream ended with %v, want io.EOF", err)
	}
	if len(frames) != 4 {
		t.Fatalf("%d frames, want 4", len(frames))
	}
	for i, f := range frames {
		if f.Seq != uint64(i+1) {
			t.Errorf("frame %d has seq %d", i, f.Seq)
		}
	}
	last := frames[3]
	if last.Kind != KindFinal || last.Finish != "length" || last.Usage.CompletionTokens != 3 || last.Text != " a time" {
		t.Errorf("final frame %+v", last)
	}
	if _, err := replies.Next(ctx); !errors.Is(err, io.EOF) {
		t.Errorf("Next after the end = %v, want io.EOF", err)
	}
	rec, _, err := res.Get(ctx, job.ID)
	if err != nil || rec.Status != StatusDone || !rec.Streamed || rec.Text != "" {
		t.Errorf("record %+v, %v; want done, streamed, no text for a sync job", rec, err)
	}
}

func TestRepliesSequence(t *testing.T) {
	env := startEnv(t, StreamConfig{})
	tok := func(seq uint64) *Frame { return &Frame{Seq: seq, Kind: KindToken, Text: "x"} }
	for _, tc := range []struct {
		name    string
		frames  []*Frame
		wantN   int
		wantErr error
	}{
		{"in order", []*Frame{tok(1), tok(2), {Seq: 3, Kind: KindFinal, Usage: &Usage{}}}, 3, io.EOF},
		{"gap", []*Frame{tok(1), tok(3)}, 1, ErrGap},
		{"repeat", []*Frame{tok(1), tok(1)}, 1, ErrGap},
		{"starts late", []*Frame{tok(2)}, 0, ErrGap},
		{"terminal error after a gap", []*Frame{tok(1), {Seq: TerminalSeq, Kind: KindError, Error: &FrameError{Kind: ErrKindInternal}}}, 2, io.EOF},
		{"token frame after the final", []*Frame{{Seq: 1, Kind: KindFinal, Usage: &Usage{}}, tok(2)}, 1, io.EOF},
		{"bad frame", []*Frame{tok(1), {Seq: 2, Kind: "bogus"}}, 1, ErrBadMessage},
		{"stops without final", []*Frame{tok(1), tok(2)}, 2, ErrStreamTimeout},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := NewClient(env.nc, env.js).WithIdleTimeout(200 * time.Millisecond)
			if err != nil {
				t.Fatal(err)
			}
			job := testJob("seq-" + tc.name)
			job.ID = ModelToken(tc.name)
			job.Reply = ReplySubject(job.ID)
			r, err := c.Submit(context.Background(), job)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			for _, f := range tc.frames {
				b, _ := EncodeFrame(f)
				if f.Kind == "bogus" {
					b = []byte(`{"seq":2,"kind":"bogus"}`)
				}
				if err := env.nc.Publish(job.Reply, b); err != nil {
					t.Fatal(err)
				}
			}
			frames, err := readAll(t, r)
			if len(frames) != tc.wantN || !errors.Is(err, tc.wantErr) {
				t.Errorf("%d frames then %v; want %d then %v", len(frames), err, tc.wantN, tc.wantErr)
			}
		})
	}
}

func TestRepliesContext(t *testing.T) {
	env := startEnv(t, StreamConfig{})
	r, err := NewClient(env.nc, env.js).Submit(context.Background(), testJob("ctx-1"))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := r.Next(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Next on a cancelled context = %v", err)
	}
}

func TestSubmitDuplicate(t *testing.T) {
	env := startEnv(t, StreamConfig{})
	c := NewClient(env.nc, env.js)
	r, err := c.Submit(context.Background(), testJob("dup-1"))
	if err != nil {
		t.Fatal(err)
	}
	r.Close()
	if _, err := c.Submit(context.Background(), testJob("dup-1")); !errors.Is(err, ErrDuplicate) {
		t.Fatalf("second Submit = %v, want ErrDuplicate", err)
	}
	info, err := env.js.Stream(context.Background(), JobsStream)
	if err != nil {
		t.Fatal(err)
	}
	if n := info.CachedInfo().State.Msgs; n != 1 {
		t.Errorf("stream holds %d jobs, want 1", n)
	}
}

func TestStreamBound(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  StreamConfig
		jobs []string // models of the jobs submitted; the last must be refused
	}{
		{"max jobs", StreamConfig{MaxJobs: 2}, []string{"a", "b", "c"}},
		{"max bytes", StreamConfig{MaxBytes: 700}, []string{"a", "a", "a", "a", "a", "a"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := startEnv(t, tc.cfg)
			c := NewClient(env.nc, env.js)
			var err error
			for i, m := range tc.jobs {
				job := testJob(ModelToken(tc.name) + "-" + string(rune('0'+i)))
				job.Model = m
				var r *Replies
				r, err = c.Submit(context.Background(), job)
				if r != nil {
					r.Close()
				}
				if err != nil {
					if i == 0 {
						t.Fatalf("first job refused: %v", err)
					}
					break
				}
			}
			if !errors.Is(err, ErrQueueFull) {
				t.Fatalf("full stream answered %v, want ErrQueueFull", err)
			}
			if err := c.SubmitAsync(context.Background(), &Job{ID: "async-x", Tenant: "t", Model: tc.jobs[len(tc.jobs)-1], MaxTokens: 1, Deadline: time.Now().Add(time.Minute)}); !errors.Is(err, ErrQueueFull) {
				t.Fatalf("SubmitAsync on a full stream = %v, want ErrQueueFull", err)
			}
			if _, err := c.AsyncStatus(context.Background(), "async-x"); !errors.Is(err, ErrNotFound) {
				t.Errorf("refused async job left a record: %v", err)
			}
		})
	}
}

func TestAsyncStatus(t *testing.T) {
	env := startEnv(t, StreamConfig{})
	ctx := context.Background()
	c := NewClient(env.nc, env.js)
	if _, err := c.AsyncStatus(ctx, "nope"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown id: %v, want ErrNotFound", err)
	}
	job := testJob("async-1")
	job.Reply = ""
	if err := c.SubmitAsync(ctx, job); err != nil {
		t.Fatal(err)
	}
	st, err := c.AsyncStatus(ctx, job.ID)
	if err != nil || st.Status != StatusQueued || st.Tenant != job.Tenant {
		t.Fatalf("status %+v, %v; want queued for %s", st, err, job.Tenant)
	}
	if err := c.SubmitAsync(ctx, job); err != nil {
		t.Fatalf("resubmitting a queued job: %v", err)
	}
	msg, got := fetchJob(t, env, job.Model)
	if !got.Async {
		t.Error("published job is not marked async")
	}
	res, _ := OpenResults(ctx, env.js)
	rp, claim, err := res.Claim(ctx, env.nc, got)
	if err != nil || claim != ClaimRun {
		t.Fatalf("Claim = %v, %v", claim, err)
	}
	if st, _ := c.AsyncStatus(ctx, job.ID); st.Status != StatusRunning {
		t.Errorf("status %q after the claim, want running", st.Status)
	}
	rp.Token(ctx, "Once", []int32{1})
	rp.Token(ctx, " upon", []int32{2})
	if err := rp.Final(ctx, " a time", "stop", Usage{PromptTokens: 2, CompletionTokens: 2}); err != nil {
		t.Fatal(err)
	}
	msg.Ack()
	st, err = c.AsyncStatus(ctx, job.ID)
	if err != nil || st.Status != StatusDone || st.Text != "Once upon a time" || st.Finish != "stop" || st.Usage.CompletionTokens != 2 || st.Streamed {
		t.Fatalf("final status %+v, %v", st, err)
	}
	if err := c.SubmitAsync(ctx, job); err != nil {
		t.Fatal(err)
	}
	if st, _ := c.AsyncStatus(ctx, job.ID); st.Status != StatusDone {
		t.Errorf("resubmitting a done job changed its status to %q", st.Status)
	}
}

// TestAsyncStatusLost: an async job whose record still says queued or
// running LostAfter past its deadline is lost (no worker holds a job past
// its deadline): its status is failed with a timeout, not queued or running
// for the bucket's TTL. Within LostAfter it is what the record says; a job
// that ended keeps its end.
func TestAsyncStatusLost(t *testing.T) {
	env := startEnv(t, StreamConfig{})
	ctx := context.Background()
	c := NewClient(env.nc, env.js)
	res, err := OpenResults(ctx, env.js)
	if err != nil {
		t.Fatal(err)
	}
	submit := func(id string, deadline time.Time) *Job {
		t.Helper()
		job := testJob(id)
		job.Reply, job.Deadline = "", deadline
		if err := c.SubmitAsync(ctx, job); err != nil {
			t.Fatal(err)
		}
		return job
	}
	past := time.Now().Add(-LostAfter - time.Second)
	queued := submit("lost-queued", past)
	running := submit("lost-running", past)
	if _, claim, err := res.Claim(ctx, env.nc, running); err != nil || claim != ClaimRun {
		t.Fatalf("claim %v, %v", claim, err)
	}
	ended := submit("lost-ended", past)
	rp, _, err := res.Claim(ctx, env.nc, ended)
	if err != nil {
		t.Fatal(err)
	}
	if err := rp.Final(ctx, "The end", "stop", Usage{PromptTokens: 2, CompletionTokens: 2}); err != nil {
		t.Fatal(err)
	}
	within := submit("within", time.Now().Add(-LostAfter+time.Minute))
	for _, tc := range []struct {
		job  *Job
		want string
	}{{queued, StatusFailed}, {running, StatusFailed}, {ended, StatusDone}, {within, StatusQueued}} {
		st, err := c.AsyncStatus(ctx, tc.job.ID)
		if err != nil {
			t.Fatal(err)
		}
		if st.Status != tc.want || (tc.want == StatusFailed) != (st.Error != nil && st.Error.Kind == ErrKindTimeout) {
			t.Errorf("%s: status %q, error %+v; want %s", tc.job.ID, st.Status, st.Error, tc.want)
		}
		if st.Deadline.IsZero() {
			t.Errorf("%s: the record keeps no deadline", tc.job.ID)
		}
	}
}

// TestClaim checks the redelivery rule for each state a job's record can be in.
func TestClaim(t *testing.T) {
	env := startEnv(t, StreamConfig{})
	ctx := context.Background()
	res, err := OpenResults(ctx, env.js)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name      string
		rec       *AsyncResult // nil: no record
		cancelled bool         // Results.Cancel before the claim
		want      Claim
		frames    int // frames the claimant's Fail sends
	}{
		{"new", nil, false, ClaimRun, 1},
		{"queued async", &AsyncResult{Status: StatusQueued}, false, ClaimRun, 1},
		{"running, nothing sent", &AsyncResult{Status: StatusRunning, Attempts: 1}, false, ClaimRun, 1},
		{"running, streamed", &AsyncResult{Status: StatusRunning, Streamed: true}, false, ClaimLostMidStream, 1},
		{"done", &AsyncResult{Status: StatusDone}, false, ClaimFinished, 0},
		{"failed", &AsyncResult{Status: StatusFailed}, false, ClaimFinished, 0},
		{"cancelled, no record", nil, true, ClaimFinished, 0},
		{"cancelled, queued async", &AsyncResult{Status: StatusQueued}, true, ClaimFinished, 0},
		{"cancelled, running, nothing sent", &AsyncResult{Status: StatusRunning, Attempts: 1}, true, ClaimFinished, 0},
		{"cancelled, running, streamed", &AsyncResult{Status: StatusRunning, Streamed: true}, true, ClaimFinished, 0},
		{"cancelled, done", &AsyncResult{Status: StatusDone}, true, ClaimFinished, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			job := testJob(ModelToken("claim " + tc.name))
			if tc.rec != nil {
				tc.rec.ID, tc.rec.Tenant = job.ID, job.Tenant
				if _, err := res.Create(ctx, tc.rec); err != nil {
					t.Fatal(err)
				}
			}
			if tc.cancelled {
				if err := res.Cancel(ctx, job.ID); err != nil {
					t.Fatal(err)
				}
			}
			_, before, _ := res.Get(ctx, job.ID)
			sub, err := env.nc.SubscribeSync(job.Reply)
			if err != nil {
				t.Fatal(err)
			}
			defer sub.Unsubscribe()
			rp, claim, err := res.Claim(ctx, env.nc, job)
			if err != nil || claim != tc.want {
				t.Fatalf("Claim = %v, %v; want %v", claim, err, tc.want)
			}
			if rp == nil {
				if claim != ClaimFinished {
					t.Fatal("no replier for a job to run or fail")
				}
				if _, after, _ := res.Get(ctx, job.ID); after != before {
					t.Errorf("a finished claim moved the record from revision %d to %d", before, after)
				}
				if m, err := sub.NextMsg(50 * time.Millisecond); err == nil {
					t.Errorf("a finished claim sent %s", m.Data)
				}
				return
			}
			if claim == ClaimRun {
				rec, _, _ := res.Get(ctx, job.ID)
				if rec.Status != StatusRunning || rec.Attempts < 1 {
					t.Errorf("claimed record %+v", rec)
				}
			}
			if err := rp.Fail(ctx, ErrKindInternal, "worker lost mid-stream"); err != nil {
				t.Fatal(err)
			}
			m, err := sub.NextMsg(5 * time.Second)
			if err != nil {
				t.Fatal(err)
			}
			f, err := DecodeFrame(m.Data)
			if err != nil || f.Kind != KindError {
				t.Fatalf("frame %+v, %v", f, err)
			}
			wantSeq := uint64(1)
			if claim == ClaimLostMidStream {
				wantSeq = TerminalSeq
			}
			if f.Seq != wantSeq {
				t.Errorf("error frame seq %d, want %d", f.Seq, wantSeq)
			}
			if rec, _, _ := res.Get(ctx, job.ID); rec.Status != StatusFailed {
				t.Errorf("record status %q after Fail, want failed", rec.Status)
			}
		})
	}
	t.Run("stale claim loses", func(t *testing.T) {
		job := testJob("stale-1")
		first, _, err := res.Claim(ctx, env.nc, job)
		if err != nil {
			t.Fatal(err)
		}
		second, claim, err := res.Claim(ctx, env.nc, job) // a redelivery before any frame
		if err != nil || claim != ClaimRun {
			t.Fatalf("second claim %v, %v", claim, err)
		}
		if err := first.Token(ctx, "x", nil); !errors.Is(err, ErrLostClaim) {
			t.Errorf("stale claimant's first frame: %v, want ErrLostClaim", err)
		}
		if err := second.Token(ctx, "x", nil); err != nil {
			t.Errorf("current claimant: %v", err)
		}
		if err := second.Requeue(ctx); err == nil {
			t.Error("Requeue allowed after a frame went out")
		}
	})
}

func TestSetup(t *testing.T) {
	env := startEnv(t, StreamConfig{MaxJobs: 5})
	ctx := context.Background()
	if err := Setup(ctx, env.js, StreamConfig{MaxJobs: 7}); err != nil {
		t.Fatalf("second Setup: %v", err)
	}
	s, err := env.js.Stream(ctx, JobsStream)
	if err != nil {
		t.Fatal(err)
	}
	cfg := s.CachedInfo().Config
	if cfg.MaxMsgs != 7 || cfg.Retention != jetstream.WorkQueuePolicy || cfg.Discard != jetstream.DiscardNew || cfg.Duplicates == 0 {
		t.Errorf("stream config %+v", cfg)
	}
	for _, tc := range []struct {
		name string
		cfg  StreamConfig
	}{
		{"negative MaxJobs", StreamConfig{MaxJobs: -1}},
		{"negative MaxBytes", StreamConfig{MaxBytes: -1}},
		{"negative per tenant", StreamConfig{MaxJobsPerTenant: -1}},
		{"per tenant above all", StreamConfig{MaxJobs: 5, MaxJobsPerTenant: 6}},
		{"duplicates beyond age", StreamConfig{MaxAge: time.Minute, Duplicates: time.Hour}},
		{"negative TTL", StreamConfig{ResultsTTL: -1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := Setup(ctx, env.js, tc.cfg); !errors.Is(err, ErrConfig) {
				t.Errorf("Setup(%+v) = %v, want ErrConfig", tc.cfg, err)
			}
		})
	}
	for _, tc := range []struct {
		name string
		cfg  ConsumerConfig
	}{
		{"negative AckWait", ConsumerConfig{AckWait: -1}},
		{"negative MaxDeliver", ConsumerConfig{MaxDeliver: -1}},
		{"negative MaxAckPending", ConsumerConfig{MaxAckPending: -1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := EnsureConsumer(ctx, env.js, "m", tc.cfg); !errors.Is(err, ErrConfig) {
				t.Errorf("EnsureConsumer(%+v) = %v, want ErrConfig", tc.cfg, err)
			}
		})
	}
}

func TestStartServer(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  ServerConfig
	}{
		{"no store dir", ServerConfig{Port: -1}},
		{"bad port", ServerConfig{Port: 70000, StoreDir: t.TempDir()}},
		{"negative limits", ServerConfig{Port: -1, StoreDir: t.TempDir(), MaxStore: -1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if s, err := StartServer(tc.cfg); !errors.Is(err, ErrServer) {
				if s != nil {
					s.Shutdown()
				}
				t.Errorf("StartServer(%+v) = %v, want ErrServer", tc.cfg, err)
			}
		})
	}
	t.Run("shutdown is idempotent", func(t *testing.T) {
		s, err := StartServer(ServerConfig{Port: -1, StoreDir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		nc, err := nats.Connect(s.ClientURL())
		if err != nil {
			t.Fatal(err)
		}
		nc.Close()
		s.Shutdown()
		s.Shutdown()
	})
}

// TestCancelRecorded: Client.Cancel leaves a durable marker (even for an id
// with no record yet) and still publishes the signal for a running job,
// without moving the job's record, so the worker holding the claim keeps it
// and ends the stream itself; a later delivery is not run.
func TestCancelRecorded(t *testing.T) {
	env := startEnv(t, StreamConfig{})
	ctx := context.Background()
	res, err := OpenResults(ctx, env.js)
	if err != nil {
		t.Fatal(err)
	}
	c := NewClient(env.nc, env.js)
	for _, tc := range []struct {
		name  string
		claim bool // a worker claimed the job before the cancel
	}{
		{"waiting job", false},
		{"running job", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			job := testJob(ModelToken("cancel " + tc.name))
			signal, err := env.nc.SubscribeSync(CancelSubject(job.ID))
			if err != nil {
				t.Fatal(err)
			}
			defer signal.Unsubscribe()
			var rp *Replier
			if tc.claim {
				var claim Claim
				rp, claim, err = res.Claim(ctx, env.nc, job)
				if err != nil || claim != ClaimRun {
					t.Fatalf("Claim = %v, %v", claim, err)
				}
			}
			if got, err := res.Cancelled(ctx, job.ID); err != nil || got {
				t.Fatalf("Cancelled before Cancel = %v, %v", got, err)
			}
			for range 2 { // cancelling again is harmless
				if err := c.Cancel(ctx, job.ID); err != nil {
					t.Fatal(err)
				}
			}
			if got, err := res.Cancelled(ctx, job.ID); err != nil || !got {
				t.Fatalf("Cancelled after Cancel = %v, %v", got, err)
			}
			if _, err := signal.NextMsg(5 * time.Second); err != nil {
				t.Fatalf("no cancel signal: %v", err)
			}
			_, _, err = res.Get(ctx, job.ID)
			if tc.claim {
				if err != nil {
					t.Fatal(err)
				}
				if err := rp.Token(ctx, "x", nil); err != nil {
					t.Errorf("the running claim after Cancel: %v", err)
				}
				if err := rp.Fail(ctx, ErrKindAborted, "the request was cancelled"); err != nil {
					t.Errorf("ending the running claim: %v", err)
				}
			} else if !errors.Is(err, ErrNotFound) {
				t.Errorf("Cancel wrote a job record: %v", err)
			}
			if _, claim, err := res.Claim(ctx, env.nc, job); err != nil || claim != ClaimFinished {
				t.Errorf("a delivery after Cancel: Claim = %v, %v; want finished", claim, err)
			}
		})
	}
	if got, err := res.Cancelled(ctx, "never-cancelled"); err != nil || got {
		t.Errorf("Cancelled of another id = %v, %v", got, err)
	}
}

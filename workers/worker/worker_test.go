package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/bulkhead-ai/bulkhead/models/testkit"
	"github.com/bulkhead-ai/bulkhead/queue"
	"github.com/bulkhead-ai/bulkhead/workers/engine"
	"github.com/bulkhead-ai/bulkhead/workers/kvcache"
)

// usageCounter counts usage events per request id.
type usageCounter struct {
	mu     sync.Mutex
	events map[string][]queue.UsageEvent
}

func countUsage(t *testing.T, nc *nats.Conn) *usageCounter {
	u := &usageCounter{events: map[string][]queue.UsageEvent{}}
	sub, err := nc.Subscribe(queue.UsagePrefix+">", func(m *nats.Msg) {
		var ev queue.UsageEvent
		if err := json.Unmarshal(m.Data, &ev); err != nil {
			t.Errorf("bad usage event %s: %v", m.Data, err)
			return
		}
		if m.Subject != queue.UsageSubject(ev.Tenant) {
			t.Errorf("usage event on %s, want %s", m.Subject, queue.UsageSubject(ev.Tenant))
		}
		u.mu.Lock()
		u.events[ev.RequestID] = append(u.events[ev.RequestID], ev)
		u.mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sub.Unsubscribe() })
	return u
}

func (u *usageCounter) get(id string) []queue.UsageEvent {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]queue.UsageEvent(nil), u.events[id]...)
}

func TestGreedyMatchesGenerate(t *testing.T) {
	ev := startNATS(t)
	e := startEngine(t, engine.Config{})
	usage := countUsage(t, ev.nc)
	startWorker(t, ev, Config{Models: map[string]*engine.Engine{model: e}})

	for _, prompt := range []string{"Once upon a time", "Lily wanted to", "The sun"} {
		t.Run(prompt, func(t *testing.T) {
			ids := e.Model().Tokenizer.Encode(prompt, true, false)
			want, err := e.Generate(context.Background(), engine.Request{
				Owner: kvcache.Owner{Namespace: "ref", Request: prompt}, Prompt: ids, MaxTokens: 40})
			if err != nil {
				t.Fatal(err)
			}
			job := newJob(t, prompt, 40)
			r, err := ev.client.Submit(context.Background(), job)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			frames, err := collect(t, r)
			if !errors.Is(err, io.EOF) {
				t.Fatalf("stream ended with %v after %d frames", err, len(frames))
			}
			var text strings.Builder
			var toks []int32
			for i, f := range frames {
				if f.Seq != uint64(i+1) {
					t.Fatalf("frame %d has seq %d", i, f.Seq)
				}
				text.WriteString(f.Text)
				toks = append(toks, f.Tokens...)
			}
			last := frames[len(frames)-1]
			if last.Kind != queue.KindFinal {
				t.Fatalf("last frame %+v, want final", last)
			}
			if text.String() != want.Text {
				t.Errorf("text %q, engine.Generate %q", text.String(), want.Text)
			}
			if len(toks) != len(want.CompletionTokens) {
				t.Errorf("%d tokens, engine.Generate %d", len(toks), len(want.CompletionTokens))
			}
			if last.Finish != want.Finish || last.Usage.PromptTokens != len(ids) || last.Usage.CompletionTokens != len(want.CompletionTokens) {
				t.Errorf("final %+v usage %+v; want finish %s, %d prompt and %d completion tokens",
					last, last.Usage, want.Finish, len(ids), len(want.CompletionTokens))
			}
			testkit.Poll(t, 5*time.Second, func() error {
				got := usage.get(job.ID)
				if len(got) != 1 {
					return errors.New("no usage event")
				}
				u := got[0]
				if u.Tenant != job.Tenant || u.Model != model || u.PromptTokens != len(ids) || u.CompletionTokens != len(want.CompletionTokens) ||
					u.CachedTokens != 0 {
					t.Fatalf("usage event %+v", u)
				}
				return nil
			})
		})
	}
}

// TestRunsOnce: a repeated job id is refused by the stream; a redelivery of a
// job that finished is acked and not rerun; a job whose worker died after
// sending frames ends with an internal error.
func TestRunsOnce(t *testing.T) {
	ev := startNATS(t)
	e := startEngine(t, engine.Config{})
	usage := countUsage(t, ev.nc)
	startWorker(t, ev, Config{Models: map[string]*engine.Engine{model: e}})
	ctx := context.Background()

	job := newJob(t, "Once upon a time", 16)
	r, err := ev.client.Submit(ctx, job)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ev.client.Submit(ctx, job); !errors.Is(err, queue.ErrDuplicate) {
		t.Fatalf("second submit of %s: %v, want ErrDuplicate", job.ID, err)
	}
	frames, err := collect(t, r)
	r.Close()
	if !errors.Is(err, io.EOF) || frames[len(frames)-1].Kind != queue.KindFinal {
		t.Fatalf("first run ended with %v", err)
	}

	t.Run("redelivered finished job", func(t *testing.T) {
		// The final frame goes out before the record says done: wait for it.
		res, err := queue.OpenResults(ctx, ev.js)
		if err != nil {
			t.Fatal(err)
		}
		testkit.Poll(t, 5*time.Second, func() error {
			rec, _, err := res.Get(ctx, job.ID)
			if err != nil {
				return err
			}
			if rec.Status != queue.StatusDone {
				return fmt.Errorf("record status %s", rec.Status)
			}
			return nil
		})
		// A redelivery looks like the same job arriving again; publish it
		// without a message id so the stream's de-duplication does not hide it.
		sub, err := ev.nc.SubscribeSync(job.Reply)
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Unsubscribe()
		b, _ := queue.EncodeJob(job)
		if _, err := ev.js.Publish(ctx, queue.JobSubject(job.Model), b); err != nil {
			t.Fatal(err)
		}
		testkit.Poll(t, 10*time.Second, func() error {
			s, err := ev.js.Stream(ctx, queue.JobsStream)
			if err != nil {
				return err
			}
			if n := s.CachedInfo().State.Msgs; n != 0 {
				return errors.New("redelivered job still in the stream")
			}
			return nil
		})
		if m, err := sub.NextMsg(300 * time.Millisecond); err == nil {
			t.Errorf("finished job was answered again: %s", m.Data)
		}
		if n := len(usage.get(job.ID)); n != 1 {
			t.Errorf("%d usage events for %s, want 1 (it ran again)", n, job.ID)
		}
	})

	t.Run("lost mid-stream", func(t *testing.T) {
		lost := newJob(t, "Once upon a time", 16)
		res, err := queue.OpenResults(ctx, ev.js)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := res.Create(ctx, &queue.AsyncResult{ID: lost.ID, Tenant: lost.Tenant, Status: queue.StatusRunning, Streamed: true}); err != nil {
			t.Fatal(err)
		}
		r, err := ev.client.Submit(ctx, lost)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		frames, err := collect(t, r)
		if !errors.Is(err, io.EOF) || len(frames) != 1 {
			t.Fatalf("%d frames then %v", len(frames), err)
		}
		if f := frames[0]; f.Kind != queue.KindError || f.Error.Kind != queue.ErrKindInternal || !strings.Contains(f.Error.Message, "lost mid-stream") {
			t.Errorf("frame %+v (%+v)", f, f.Error)
		}
		if n := len(usage.get(lost.ID)); n != 0 {
			t.Errorf("lost job ran: %d usage events", n)
		}
	})
}

// TestRefusals: jobs the worker must refuse before generating anything.
func TestRefusals(t *testing.T) {
	ev := startNATS(t)
	e := startEngine(t, engine.Config{})
	usage := countUsage(t, ev.nc)
	startWorker(t, ev, Config{Models: map[string]*engine.Engine{model: e}})
	for _, tc := range []struct {
		name    string
		edit    func(j *queue.Job)
		kind    queue.ErrorKind
		message []string
	}{
		{"prompt too long", func(j *queue.Job) { j.MaxTokens = e.Context() - 2 }, queue.ErrKindPromptTooLong,
			[]string{"prompt of 5 tokens", "max_tokens 2046", "2051 tokens", "context window of 2048"}},
		{"empty prompt", func(j *queue.Job) { j.Prompt, j.AddBOS = "", false }, queue.ErrKindInvalidInput, []string{"empty prompt"}},
		{"bad sampling", func(j *queue.Job) { j.Sampling.Temperature = 99 }, queue.ErrKindInvalidInput, []string{"Temperature"}},
		{"deadline passed", func(j *queue.Job) { j.Deadline = time.Now().Add(-time.Second) }, queue.ErrKindTimeout, []string{"deadline"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			job := newJob(t, "Once upon a time", 8)
			tc.edit(job)
			r, err := ev.client.Submit(context.Background(), job)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			frames, err := collect(t, r)
			if !errors.Is(err, io.EOF) || len(frames) != 1 {
				t.Fatalf("%d frames then %v; want one error frame", len(frames), err)
			}
			f := frames[0]
			if f.Kind != queue.KindError || f.Error.Kind != tc.kind {
				t.Fatalf("frame %+v %+v, want error %s", f, f.Error, tc.kind)
			}
			for _, s := range tc.message {
				if !strings.Contains(f.Error.Message, s) {
					t.Errorf("message %q lacks %q", f.Error.Message, s)
				}
			}
			if n := len(usage.get(job.ID)); n != 0 {
				t.Errorf("refused job produced %d usage events", n)
			}
		})
	}
	t.Run("undecodable job", func(t *testing.T) {
		reply := queue.ReplySubject("undecodable")
		sub, err := ev.nc.SubscribeSync(reply)
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Unsubscribe()
		if _, err := ev.js.Publish(context.Background(), queue.JobSubject(model), []byte(`{"id":"","reply":"`+reply+`"}`)); err != nil {
			t.Fatal(err)
		}
		m, err := sub.NextMsg(10 * time.Second)
		if err != nil {
			t.Fatal(err)
		}
		f, err := queue.DecodeFrame(m.Data)
		if err != nil || f.Kind != queue.KindError || f.Error.Kind != queue.ErrKindInvalidInput || f.Seq != 1 {
			t.Fatalf("frame %s: %v", m.Data, err)
		}
	})
}

// holdAt is where the engines of the tests that keep a worker busy hold
// every sequence (engine.Config.HoldAt). A job that asks for no more tokens
// than this runs to its end on such an engine; a heldRequest never does.
const holdAt = 8

// heldRequest asks for more tokens than holdAt: on an engine with HoldAt
// holdAt it keeps its batch slot until it is cancelled, however fast the
// engine is.
func heldRequest(e *engine.Engine, id string) engine.Request {
	return engine.Request{
		Owner:     kvcache.Owner{Namespace: "load", Request: id},
		Prompt:    e.Model().Tokenizer.Encode("Once", true, false),
		MaxTokens: 4 * holdAt, IgnoreEOS: true,
	}
}

// saturate fills an engine with MaxBatch 1, QueueSize 1 and HoldAt holdAt:
// one held request running, one waiting. release cancels them and waits
// for their ends.
func saturate(t *testing.T, e *engine.Engine) (release func()) {
	ctx, cancel := context.WithCancel(context.Background())
	first, err := e.Submit(ctx, heldRequest(e, "one"))
	if err != nil {
		t.Fatal(err)
	}
	<-first // running
	second, err := e.Submit(ctx, heldRequest(e, "two"))
	if err != nil {
		t.Fatal(err)
	}
	return sync.OnceFunc(func() {
		cancel()
		for range first {
		}
		for range second {
		}
	})
}

func TestRejectIfBusy(t *testing.T) {
	ev := startNATS(t)
	e := startEngine(t, engine.Config{MaxBatch: 1, QueueSize: 1, HoldAt: holdAt})
	startWorker(t, ev, Config{Models: map[string]*engine.Engine{model: e}})
	release := saturate(t, e)
	defer release()

	busy := newJob(t, "Once upon a time", holdAt)
	busy.RejectIfBusy = true
	r, err := ev.client.Submit(context.Background(), busy)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	// A job that may wait is requeued meanwhile and runs once there is room:
	// it asks for no more than holdAt tokens, so it runs to its end.
	patient := newJob(t, "Once upon a time", holdAt)
	pr, err := ev.client.Submit(context.Background(), patient)
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()

	frames, err := collect(t, r)
	if !errors.Is(err, io.EOF) || len(frames) != 1 || frames[0].Kind != queue.KindError || frames[0].Error.Kind != queue.ErrKindCapacity {
		t.Fatalf("busy job: %d frames then %v: %+v", len(frames), err, frames)
	}
	release()
	frames, err = collect(t, pr)
	if !errors.Is(err, io.EOF) || frames[len(frames)-1].Kind != queue.KindFinal {
		t.Fatalf("patient job: %d frames then %v", len(frames), err)
	}
}

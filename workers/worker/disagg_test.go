package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/bulkhead-ai/bulkhead/models/refdatatest"
	"github.com/bulkhead-ai/bulkhead/models/testkit"
	"github.com/bulkhead-ai/bulkhead/queue"
	"github.com/bulkhead-ai/bulkhead/workers/engine"
	"github.com/bulkhead-ai/bulkhead/workers/handoff"
	"github.com/bulkhead-ai/bulkhead/workers/kvcache"
)

// split is a prefill worker and a decode worker, each on its own NATS
// connection and its own engine (its own KV pool), over one server.
type split struct {
	pre, dec       *engine.Engine
	preEnv, decEnv *env
	stopPre        func() error
	decWorker      *testWorker
}

// pageSize is small so that even short prompts cross several pages.
const pageSize = 4

func startSplit(t *testing.T, ev *env, pcfg, dcfg engine.Config, pw, dw Config) *split {
	t.Helper()
	pcfg.Poison, dcfg.Poison = true, true
	if pcfg.PageSize == 0 {
		pcfg.PageSize = pageSize
	}
	if dcfg.PageSize == 0 {
		dcfg.PageSize = pageSize
	}
	s := &split{pre: startEngine(t, pcfg), dec: startEngine(t, dcfg)}
	s.preEnv, s.decEnv = ev.conn(t), ev.conn(t)
	pw.Role, dw.Role = RolePrefill, RoleDecode
	pw.Models = map[string]*engine.Engine{model: s.pre}
	dw.Models = map[string]*engine.Engine{model: s.dec}
	s.decWorker = runWorker(t, s.decEnv, dw)
	s.stopPre = startWorker(t, s.preEnv, pw)
	return s
}

// checkBaseline polls until every engine's pool is whole again.
func checkBaseline(t *testing.T, engines ...*engine.Engine) {
	t.Helper()
	testkit.Poll(t, 10*time.Second, func() error {
		for i, e := range engines {
			if free, total := e.KV().FreePages(), e.KV().TotalPages(); free != total {
				return fmt.Errorf("engine %d: %d of %d KV pages free", i, free, total)
			}
		}
		return nil
	})
}

// handovers is how many hand-overs were ever published (the work-queue
// stream deletes acked ones, so count sequence numbers, not messages).
func handovers(t *testing.T, ev *env) uint64 {
	t.Helper()
	s, err := ev.js.Stream(context.Background(), queue.DecodeStream)
	if err != nil {
		t.Fatal(err)
	}
	return s.CachedInfo().State.LastSeq
}

type goldenCase struct {
	Prompt string `json:"prompt"`
}

func goldenPrompts(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(refdatatest.Path(t, "models/golden/stories260K-greedy.json"))
	if err != nil {
		t.Fatal(err)
	}
	var g struct {
		Cases []goldenCase `json:"cases"`
	}
	if err := json.Unmarshal(b, &g); err != nil {
		t.Fatal(err)
	}
	if len(g.Cases) == 0 {
		t.Fatal("golden file has no cases")
	}
	var out []string
	for _, c := range g.Cases {
		out = append(out, c.Prompt)
	}
	return out
}

// longPrompt returns a prompt of at least n tokens (with BOS) and its length.
func longPrompt(t *testing.T, e *engine.Engine, n int) (string, int) {
	t.Helper()
	words := strings.Fields("Once upon a time there was a little dog named Tim who liked to run in the park with his friend Lily and the sun was warm")
	var b strings.Builder
	for i := 0; ; i++ {
		b.WriteString(words[i%len(words)])
		b.WriteByte(' ')
		if i%8 == 7 {
			if k := len(e.Model().Tokenizer.Encode(b.String(), true, false)); k >= n {
				return b.String(), k
			}
		}
	}
}

// answer is a reply stream read to its end.
type answer struct {
	frames []*queue.Frame
	text   string
	tokens []int32
	last   *queue.Frame
}

func submit(t *testing.T, ev *env, job *queue.Job) *answer {
	t.Helper()
	r, err := ev.client.Submit(context.Background(), job)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	frames, err := collect(t, r)
	if !errors.Is(err, io.EOF) {
		t.Fatalf("job %s: stream ended with %v after %d frames", job.ID, err, len(frames))
	}
	return toAnswer(frames)
}

func toAnswer(frames []*queue.Frame) *answer {
	a := &answer{frames: frames, last: frames[len(frames)-1]}
	var text strings.Builder
	for _, f := range frames {
		text.WriteString(f.Text)
		a.tokens = append(a.tokens, f.Tokens...)
	}
	a.text = text.String()
	return a
}

// wantError checks that the answer is one error frame of kind (no token
// ever reached the client) whose message holds every part.
func (a *answer) wantError(t *testing.T, kind queue.ErrorKind, parts ...string) {
	t.Helper()
	if len(a.frames) != 1 || a.last.Kind != queue.KindError {
		t.Fatalf("%d frames, last %+v; want exactly one error frame", len(a.frames), a.last)
	}
	if a.last.Error.Kind != kind {
		t.Fatalf("error %+v, want kind %s", a.last.Error, kind)
	}
	for _, p := range parts {
		if !strings.Contains(a.last.Error.Message, p) {
			t.Errorf("message %q lacks %q", a.last.Error.Message, p)
		}
	}
}

// TestDisaggregatedMatchesUnified: every golden prompt, greedy, gives the same
// frames through a prefill worker and a decode worker (separate pools, pages
// crossing NATS) as through a unified worker; the split jobs run at once.
func TestDisaggregatedMatchesUnified(t *testing.T) {
	prompts := goldenPrompts(t)
	uni := startNATS(t)
	ue := startEngine(t, engine.Config{Poison: true, PageSize: pageSize})
	startWorker(t, uni, Config{Models: map[string]*engine.Engine{model: ue}})
	want := make([]*answer, len(prompts))
	for i, p := range prompts {
		want[i] = submit(t, uni, newJob(t, p, 128))
	}

	ev := startNATS(t)
	usage := countUsage(t, ev.nc)
	s := startSplit(t, ev, engine.Config{}, engine.Config{}, Config{}, Config{})
	got := make([]*answer, len(prompts))
	jobs := make([]*queue.Job, len(prompts))
	var wg sync.WaitGroup
	for i, p := range prompts {
		jobs[i] = newJob(t, p, 128)
		wg.Go(func() {
			r, err := ev.client.Submit(context.Background(), jobs[i])
			if err != nil {
				t.Error(err)
				return
			}
			defer r.Close()
			frames, err := collect(t, r)
			if !errors.Is(err, io.EOF) {
				t.Errorf("%q: stream ended with %v", p, err)
				return
			}
			got[i] = toAnswer(frames)
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	for i, p := range prompts {
		t.Run(p, func(t *testing.T) {
			g, w := got[i], want[i]
			if g.last.Kind != queue.KindFinal {
				t.Fatalf("last frame %+v %+v, want final", g.last, g.last.Error)
			}
			for j, f := range g.frames {
				if f.Seq != uint64(j+1) {
					t.Fatalf("frame %d has seq %d", j, f.Seq)
				}
			}
			if fmt.Sprint(g.tokens) != fmt.Sprint(w.tokens) || g.text != w.text {
				t.Fatalf("disaggregated\n %v %q\nunified\n %v %q", g.tokens, g.text, w.tokens, w.text)
			}
			if g.last.Finish != w.last.Finish || *g.last.Usage != *w.last.Usage {
				t.Errorf("final %s %+v, unified %s %+v", g.last.Finish, g.last.Usage, w.last.Finish, w.last.Usage)
			}
			testkit.Poll(t, 5*time.Second, func() error {
				if n := len(usage.get(jobs[i].ID)); n != 1 {
					return fmt.Errorf("%d usage events for %s, want 1", n, jobs[i].ID)
				}
				return nil
			})
		})
	}
	if n := handovers(t, ev); n != uint64(len(prompts)) {
		t.Errorf("%d hand-overs published for %d jobs", n, len(prompts))
	}
	checkBaseline(t, s.pre, s.dec, ue)
}

// TestIncidentInMiniature: the prefill pool (256 tokens) is smaller than the
// advertised context (2048); a 1000-token prompt reaches the prefill worker
// straight from the queue, with no edge admission in front. It must be
// refused with the numbers; no token, no placeholder, no hand-over.
func TestIncidentInMiniature(t *testing.T) {
	ev := startNATS(t)
	usage := countUsage(t, ev.nc)
	s := startSplit(t, ev,
		engine.Config{Context: 2048, KVTokens: 256, AllowSmallPool: true},
		engine.Config{Context: 2048, KVTokens: 4096}, Config{}, Config{})
	prompt, n := longPrompt(t, s.pre, 1000)
	job := newJob(t, prompt, 8)
	a := submit(t, ev, job)
	a.wantError(t, queue.ErrKindCapacity, fmt.Sprintf("%d prompt tokens", n), "256")
	if got := handovers(t, ev); got != 0 {
		t.Errorf("%d hand-overs published for a refused prompt", got)
	}
	if n := len(usage.get(job.ID)); n != 0 {
		t.Errorf("refused job produced %d usage events", n)
	}
	checkBaseline(t, s.pre, s.dec)
}

// TestPrefillRefusesOverLong: prompt + max_tokens beyond the context window,
// straight to the queue: prompt_too_long from the prefill worker alone.
func TestPrefillRefusesOverLong(t *testing.T) {
	ev := startNATS(t)
	s := startSplit(t, ev, engine.Config{Context: 512}, engine.Config{Context: 512}, Config{}, Config{})
	prompt, n := longPrompt(t, s.pre, 300)
	job := newJob(t, prompt, 300)
	submit(t, ev, job).wantError(t, queue.ErrKindPromptTooLong,
		fmt.Sprintf("prompt of %d tokens", n), "max_tokens 300", "context window of 512")
	if got := handovers(t, ev); got != 0 {
		t.Errorf("%d hand-overs published for a refused prompt", got)
	}
	checkBaseline(t, s.pre, s.dec)
}

// TestNoDecodeWorker: a prefilled request that no decode worker takes within
// the sender's StartTimeout fails with a capacity error and frees its pages;
// a decode worker that sees the stale hand-over later sends nothing.
func TestNoDecodeWorker(t *testing.T) {
	ev := startNATS(t)
	pe := startEngine(t, engine.Config{Poison: true, PageSize: pageSize})
	startWorker(t, ev.conn(t), Config{Role: RolePrefill, Models: map[string]*engine.Engine{model: pe},
		Handoff: HandoffConfig{Sender: handoff.SenderConfig{StartTimeout: 300 * time.Millisecond}}})
	job := newJob(t, "Once upon a time", 16)
	a := submit(t, ev, job)
	a.wantError(t, queue.ErrKindCapacity, "no decode worker took the request within 300ms")
	checkBaseline(t, pe)

	sub, err := ev.nc.SubscribeSync(job.Reply)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	de := startEngine(t, engine.Config{Poison: true, PageSize: pageSize})
	startWorker(t, ev.conn(t), Config{Role: RoleDecode, Models: map[string]*engine.Engine{model: de}})
	testkit.Poll(t, 10*time.Second, func() error {
		s, err := ev.js.Stream(context.Background(), queue.DecodeStream)
		if err != nil {
			return err
		}
		if m := s.CachedInfo().State.Msgs; m != 0 {
			return fmt.Errorf("%d hand-overs still waiting", m)
		}
		return nil
	})
	if m, err := sub.NextMsg(200 * time.Millisecond); err == nil {
		t.Errorf("stale hand-over answered: %s", m.Data)
	}
	checkBaseline(t, de)
}

// prefillAgain runs job through a prefill worker of its own, as a
// redelivery would, and returns, once the job's message is acked (the jobs
// stream is a work queue: the job leaves it), the frames other than
// heartbeats the job's reply subject got, and the prefill engine.
func prefillAgain(t *testing.T, ev *env, job *queue.Job) ([]string, *engine.Engine) {
	t.Helper()
	ctx := context.Background()
	pe := startEngine(t, engine.Config{Poison: true, PageSize: pageSize})
	startWorker(t, ev.conn(t), Config{Role: RolePrefill, Models: map[string]*engine.Engine{model: pe}})
	sub, err := ev.nc.SubscribeSync(job.Reply)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	r, err := ev.client.Submit(ctx, job)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	testkit.Poll(t, 20*time.Second, func() error {
		s, err := ev.js.Stream(ctx, queue.JobsStream)
		if err != nil {
			return err
		}
		if st := s.CachedInfo().State; st.LastSeq == 0 || st.Msgs != 0 {
			return fmt.Errorf("jobs stream: %d messages, last sequence %d", st.Msgs, st.LastSeq)
		}
		return nil
	})
	var frames []string
	for {
		m, err := sub.NextMsg(100 * time.Millisecond)
		if err != nil {
			return frames, pe
		}
		if f, err := queue.DecodeFrame(m.Data); err != nil || f.Kind != queue.KindHeartbeat {
			frames = append(frames, string(m.Data))
		}
	}
}

// TestPrefillRedeliveredAfterHandOver: a prefill delivery whose job was
// handed over already (an earlier delivery published the hand-over and its
// ack was lost, as when its NATS server dies) finds its hand-over a
// duplicate: it leaves the job to the decode side (no error frame, the
// record untouched), acks, and frees its pages. It used to fail the job as
// internal (3045), ending a job that was running or done.
func TestPrefillRedeliveredAfterHandOver(t *testing.T) {
	ev := startNATS(t)
	ctx := context.Background()
	job := newJob(t, "Once upon a time", 16)
	// The earlier delivery's hand-over, still on the decode stream: no
	// decode worker runs here.
	if err := queue.PublishHandover(ctx, ev.js, &queue.Handover{Job: *job, Manifest: []byte(`{"earlier":true}`)}); err != nil {
		t.Fatal(err)
	}
	frames, pe := prefillAgain(t, ev, job)
	if len(frames) != 0 {
		t.Errorf("the prefill worker answered a job the decode side holds: %q", frames)
	}
	res, err := queue.OpenResults(ctx, ev.js)
	if err != nil {
		t.Fatal(err)
	}
	if rec, _, err := res.Get(ctx, job.ID); err != nil || rec.Status != queue.StatusRunning {
		t.Errorf("record %+v, %v; want running (the decode side's)", rec, err)
	}
	if n := handovers(t, ev); n != 1 {
		t.Errorf("%d hand-overs published, want the earlier one only", n)
	}
	checkBaseline(t, pe)
}

// TestPrefillRedeliveredAfterStream: a prefill delivery of a job the decode
// side has streamed (the prefill worker's ack was lost) leaves the job
// alone: no error frame ends the client's stream, the record is untouched.
// Only decode workers stream, and the hand-over's own redelivery ends a job
// whose decode worker died.
func TestPrefillRedeliveredAfterStream(t *testing.T) {
	ev := startNATS(t)
	ctx := context.Background()
	job := newJob(t, "Once upon a time", 16)
	res, err := queue.OpenResults(ctx, ev.js)
	if err != nil {
		t.Fatal(err)
	}
	streamed := &queue.AsyncResult{ID: job.ID, Tenant: job.Tenant, Model: job.Model, Status: queue.StatusRunning, Streamed: true, Attempts: 2}
	if _, err := res.Create(ctx, streamed); err != nil {
		t.Fatal(err)
	}
	if frames, _ := prefillAgain(t, ev, job); len(frames) != 0 {
		t.Errorf("the prefill worker sent frames on a stream the decode side owns: %q", frames)
	}
	if rec, _, err := res.Get(ctx, job.ID); err != nil || rec.Status != queue.StatusRunning || rec.Attempts != 2 {
		t.Errorf("record %+v, %v; want it as the decode side left it", rec, err)
	}
}

// TestDisaggregatedCancel: a cancel reaches the decode worker mid-stream;
// the stream ends aborted and both pools return to baseline. The decode
// engine holds the request after a few tokens (engine.Config.HoldAt), so
// it is mid-stream when the cancel lands, however fast the engines are.
func TestDisaggregatedCancel(t *testing.T) {
	ev := startNATS(t)
	s := startSplit(t, ev, engine.Config{}, engine.Config{HoldAt: 3}, Config{}, Config{})
	cancelHeld(t, ev, "Once")
	checkBaseline(t, s.pre, s.dec)
}

// readFrames reads a reply subject until its last frame.
func readFrames(t *testing.T, sub *nats.Subscription) *answer {
	t.Helper()
	var frames []*queue.Frame
	for {
		m, err := sub.NextMsg(20 * time.Second)
		if err != nil {
			t.Fatalf("after %d frames: %v", len(frames), err)
		}
		f, err := queue.DecodeFrame(m.Data)
		if err != nil {
			t.Fatal(err)
		}
		if f.Kind == queue.KindHeartbeat {
			continue // the worker is alive; not part of the answer
		}
		frames = append(frames, f)
		if f.Kind != queue.KindToken {
			return toAnswer(frames)
		}
	}
}

// TestDecodeRecomputesPastTheSendersWait: a decode pool held by the job's
// own tenant (no preemption can make room) takes the hand-over into its queue
// and waits for pages. The prefill worker lets its pages go after its
// StartTimeout; when the pool frees later, the decode worker recomputes the
// prompt itself: the answer equals the one the same job gets with room at
// once, it is billed once, and both pools end at their baseline.
func TestDecodeRecomputesPastTheSendersWait(t *testing.T) {
	ev := startNATS(t)
	usage := countUsage(t, ev.nc)
	short := HandoffConfig{Sender: handoff.SenderConfig{StartTimeout: time.Second}}
	s := startSplit(t, ev, engine.Config{}, engine.Config{Context: 256, KVTokens: 256}, Config{Handoff: short}, Config{Handoff: short})
	want := submit(t, ev, newJob(t, "Once upon a time", 16))
	job := newJob(t, "Once upon a time", 16)
	held, err := s.dec.Reserve(context.Background(), engine.Request{Owner: kvcache.Owner{Namespace: job.Tenant, Request: "holder"},
		Prompt: []int32{1, 403, 407}, MaxTokens: 250})
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *answer, 1)
	go func() { got <- submitQuiet(ev, job) }()
	testkit.Poll(t, 10*time.Second, func() error {
		if w := s.dec.Stats().Waiting; w != 1 {
			return fmt.Errorf("%d requests waiting in the decode engine", w)
		}
		if free, total := s.pre.KV().FreePages(), s.pre.KV().TotalPages(); free != total {
			return fmt.Errorf("the prefill worker still holds %d pages", total-free)
		}
		return nil
	})
	time.Sleep(200 * time.Millisecond) // past the sender's wait: the job must not fail
	select {
	case a := <-got:
		t.Fatalf("the job ended while the decode pool was full: %+v", a.last)
	default:
	}
	held.Free()
	var a *answer
	select {
	case a = <-got:
	case <-time.After(20 * time.Second):
		t.Fatal("no answer 20 s after the decode pool freed")
	}
	if a == nil || a.last.Kind != queue.KindFinal {
		t.Fatalf("answer %+v, want a final frame", a)
	}
	if a.text != want.text || !slices.Equal(a.tokens, want.tokens) {
		t.Errorf("recomputed answer %q %v, with room at once %q %v", a.text, a.tokens, want.text, want.tokens)
	}
	testkit.Poll(t, 5*time.Second, func() error {
		if n := len(usage.get(job.ID)); n != 1 {
			return fmt.Errorf("%d usage events", n)
		}
		return nil
	})
	checkBaseline(t, s.pre, s.dec)
}

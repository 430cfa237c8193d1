package worker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/bulkhead-ai/bulkhead/models/testkit"
	"github.com/bulkhead-ai/bulkhead/queue"
	"github.com/bulkhead-ai/bulkhead/workers/engine"
	"github.com/bulkhead-ai/bulkhead/workers/handoff"
	"github.com/bulkhead-ai/bulkhead/workers/kvcache"
)

// source prefills prompts on an engine of the test's own and hands out their
// pages and manifests, for hand-overs built by hand.
type source struct {
	e *engine.Engine
}

// prefill runs prompt for job (as tenant) and returns its manifest source,
// its exported pages and the prompt's tokens; the KV is released.
func (s source) prefill(t *testing.T, job *queue.Job, tenant, prompt string) (handoff.Source, [][]byte) {
	t.Helper()
	ids := s.e.Model().Tokenizer.Encode(prompt, job.AddBOS, job.ParseSpecial)
	p, err := s.e.Prefill(context.Background(), engine.Request{
		Owner: kvcache.Owner{Namespace: tenant, Request: job.ID}, Prompt: ids, MaxTokens: job.MaxTokens})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Release()
	pages := make([][]byte, (len(ids)+pageSize-1)/pageSize)
	for i := range pages {
		if pages[i], err = p.Seq.ExportPage(i); err != nil {
			t.Fatal(err)
		}
	}
	return handoff.Source{
		RequestID: job.ID, Tenant: tenant, Model: job.Model, WeightsDigest: s.e.Model().Digest,
		Prompt: ids, FirstToken: p.First, Layout: handoff.Layout(s.e.KV().Layout()),
	}, pages
}

// TestDecodeRefusesAlone: hand-overs that lie or fall short, fed straight to
// a decode worker with no prefill worker in front. Each ends with one
// "KV handoff failed" error frame and no token; the decode pool returns to
// baseline; the sender learns the transfer was refused.
func TestDecodeRefusesAlone(t *testing.T) {
	ev := startNATS(t)
	usage := countUsage(t, ev.nc)
	de := startEngine(t, engine.Config{Poison: true, PageSize: pageSize})
	startWorker(t, ev.conn(t), Config{Role: RoleDecode, Models: map[string]*engine.Engine{model: de}})
	src := source{startEngine(t, engine.Config{Poison: true, PageSize: pageSize})}
	const prompt = "One day, a boy named Tim went to the park with his mom"

	for _, tc := range []struct {
		name string
		// build returns the manifest decode receives and the sender's
		// manifest and pages.
		build   func(t *testing.T, job *queue.Job) (sent, served *handoff.Manifest, pages [][]byte)
		message string
		served  error // what the sender's Serve must return
	}{
		{"placeholder for a long prompt", func(t *testing.T, job *queue.Job) (*handoff.Manifest, *handoff.Manifest, [][]byte) {
			// The incident: one BOS token's KV offered for the whole prompt.
			sc, pages := src.prefill(t, job, job.Tenant, "")
			m := manifest(t, sc, pages)
			return m, m, pages
		}, "prompt tokens 1", handoff.ErrAbandoned},
		{"token count edited", func(t *testing.T, job *queue.Job) (*handoff.Manifest, *handoff.Manifest, [][]byte) {
			sc, pages := src.prefill(t, job, job.Tenant, prompt)
			m := manifest(t, sc, pages)
			m.PromptTokens--
			return m, m, pages
		}, "prompt tokens", handoff.ErrAbandoned},
		{"another tenant's KV", func(t *testing.T, job *queue.Job) (*handoff.Manifest, *handoff.Manifest, [][]byte) {
			sc, pages := src.prefill(t, job, "tenant-b", prompt)
			m := manifest(t, sc, pages)
			return m, m, pages
		}, `tenant is "tenant-b"`, handoff.ErrAbandoned},
		{"KV computed under an adapter", func(t *testing.T, job *queue.Job) (*handoff.Manifest, *handoff.Manifest, [][]byte) {
			// The job runs without one here; KV under any adapter is wrong for it.
			sc, pages := src.prefill(t, job, job.Tenant, prompt)
			m := manifest(t, sc, pages)
			m.AdapterKey = "lora:some-adapter"
			return m, m, pages
		}, `adapter "lora:some-adapter", want ""`, handoff.ErrAbandoned},
		{"page missing", func(t *testing.T, job *queue.Job) (*handoff.Manifest, *handoff.Manifest, [][]byte) {
			sc, pages := src.prefill(t, job, job.Tenant, prompt)
			m := manifest(t, sc, pages)
			short := *m
			short.Pages = m.Pages[:len(m.Pages)-1]
			return m, &short, pages[:len(pages)-1]
		}, "short transfer", handoff.ErrAborted},
		{"corrupted page", func(t *testing.T, job *queue.Job) (*handoff.Manifest, *handoff.Manifest, [][]byte) {
			sc, pages := src.prefill(t, job, job.Tenant, prompt)
			m := manifest(t, sc, pages)
			bad := append([][]byte(nil), pages...)
			bad[1] = append([]byte(nil), pages[1]...)
			bad[1][len(bad[1])/2] ^= 0x40
			return m, m, bad
		}, "checksum mismatch", handoff.ErrAborted},
	} {
		t.Run(tc.name, func(t *testing.T) {
			job := newJob(t, prompt, 16)
			sent, served, pages := tc.build(t, job)
			snd, err := handoff.NewSender(ev.nc, served, pages, handoff.SenderConfig{StartTimeout: time.Second, IdleTimeout: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			serveErr := make(chan error, 1)
			go func() { serveErr <- snd.Serve(context.Background()) }()
			sub, err := ev.nc.SubscribeSync(job.Reply)
			if err != nil {
				t.Fatal(err)
			}
			defer sub.Unsubscribe()
			raw, err := sent.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			if err := queue.PublishHandover(context.Background(), ev.js, &queue.Handover{Job: *job, Manifest: raw}); err != nil {
				t.Fatal(err)
			}
			readFrames(t, sub).wantError(t, queue.ErrKindInternal, "KV handoff failed", tc.message)
			if err := <-serveErr; !errors.Is(err, tc.served) {
				t.Errorf("sender's Serve: %v, want %v", err, tc.served)
			}
			checkBaseline(t, de, src.e)
			if n := len(usage.get(job.ID)); n != 0 {
				t.Errorf("refused hand-over produced %d usage events", n)
			}
		})
	}
}

func manifest(t *testing.T, sc handoff.Source, pages [][]byte) *handoff.Manifest {
	t.Helper()
	m, err := handoff.NewManifest(sc, pages)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// killOnFirstRequest closes victim's connection as soon as a decode worker
// asks for the first chunk of any transfer.
func killOnFirstRequest(t *testing.T, ev *env, victim *nats.Conn) (killed <-chan struct{}) {
	t.Helper()
	ch := make(chan struct{})
	var once sync.Once
	sub, err := ev.nc.Subscribe(handoff.Subject("*"), func(*nats.Msg) {
		once.Do(func() { victim.Close(); close(ch) })
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := ev.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sub.Unsubscribe() })
	return ch
}

// slowReceiver makes a transfer take thousands of round trips.
var slowReceiver = handoff.ReceiverConfig{Window: 1, MaxChunk: 64, RequestTimeout: 500 * time.Millisecond}

// TestDecodeDiesMidTransfer: the decode worker's connection drops after its
// first chunk request. The prefill worker frees its pages and fails the
// request as retryable (unavailable: nothing was wrong with it); a request submitted meanwhile completes on a second decode worker;
// every pool returns to baseline and the stale hand-over sends nothing.
func TestDecodeDiesMidTransfer(t *testing.T) {
	ev := startNATS(t)
	s := startSplit(t, ev, engine.Config{}, engine.Config{},
		Config{Handoff: HandoffConfig{Sender: handoff.SenderConfig{StartTimeout: 10 * time.Second, IdleTimeout: 300 * time.Millisecond}}},
		Config{Handoff: HandoffConfig{Receiver: slowReceiver}, HeartbeatEvery: 200 * time.Millisecond,
			Consumer: queue.ConsumerConfig{AckWait: 3 * time.Second}})
	killed := killOnFirstRequest(t, ev, s.decEnv.nc)
	prompt, _ := longPrompt(t, s.pre, 1000)
	victim := newJob(t, prompt, 8)
	r, err := ev.client.Submit(context.Background(), victim)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	<-killed

	d2 := startEngine(t, engine.Config{Poison: true, PageSize: pageSize})
	startWorker(t, ev.conn(t), Config{Role: RoleDecode, Models: map[string]*engine.Engine{model: d2},
		HeartbeatEvery: 200 * time.Millisecond, Consumer: queue.ConsumerConfig{AckWait: 3 * time.Second}})
	other := make(chan *answer, 1)
	go func() { other <- submitQuiet(ev, newJob(t, "Once upon a time", 24)) }()

	frames, err := collect(t, r)
	if err == nil || len(frames) == 0 {
		t.Fatalf("victim: %d frames then %v", len(frames), err)
	}
	toAnswer(frames).wantError(t, queue.ErrKindUnavailable, "KV handoff failed", "decode worker could not be reached; retry")
	if a := <-other; a == nil || a.last.Kind != queue.KindFinal || len(a.tokens) == 0 {
		t.Fatalf("unrelated request: %+v", a)
	}
	checkBaseline(t, s.pre, s.dec, d2)
	// The dead worker's hand-over is redelivered to d2 after AckWait and
	// found finished: it must not answer the victim again.
	sub, err := ev.nc.SubscribeSync(victim.Reply)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	testkit.Poll(t, 15*time.Second, func() error {
		st, err := ev.js.Stream(context.Background(), queue.DecodeStream)
		if err != nil {
			return err
		}
		if m := st.CachedInfo().State.Msgs; m != 0 {
			return fmt.Errorf("%d hand-overs still in the stream", m)
		}
		return nil
	})
	if m, err := sub.NextMsg(200 * time.Millisecond); err == nil {
		t.Errorf("victim answered again: %s", m.Data)
	}
	checkBaseline(t, d2)
}

// TestPrefillDiesMidTransfer: the prefill worker's connection drops after the
// decode worker's first chunk request. The decode worker frees its sequence
// and fails the request as retryable (unavailable); a request submitted meanwhile completes through a
// second prefill worker; every pool returns to baseline.
func TestPrefillDiesMidTransfer(t *testing.T) {
	ev := startNATS(t)
	s := startSplit(t, ev, engine.Config{}, engine.Config{},
		Config{HeartbeatEvery: 200 * time.Millisecond, Consumer: queue.ConsumerConfig{AckWait: 3 * time.Second}},
		Config{Handoff: HandoffConfig{Receiver: slowReceiver}})
	killed := killOnFirstRequest(t, ev, s.preEnv.nc)
	prompt, _ := longPrompt(t, s.pre, 1000)
	victim := newJob(t, prompt, 8)
	r, err := ev.client.Submit(context.Background(), victim)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	<-killed

	p2 := startEngine(t, engine.Config{Poison: true, PageSize: pageSize})
	startWorker(t, ev.conn(t), Config{Role: RolePrefill, Models: map[string]*engine.Engine{model: p2},
		HeartbeatEvery: 200 * time.Millisecond, Consumer: queue.ConsumerConfig{AckWait: 3 * time.Second}})
	other := make(chan *answer, 1)
	go func() { other <- submitQuiet(ev, newJob(t, "Once upon a time", 24)) }()

	frames, err := collect(t, r)
	if err == nil || len(frames) == 0 {
		t.Fatalf("victim: %d frames then %v", len(frames), err)
	}
	toAnswer(frames).wantError(t, queue.ErrKindUnavailable, "KV handoff failed", "prefill worker could not be reached; retry")
	if a := <-other; a == nil || a.last.Kind != queue.KindFinal || len(a.tokens) == 0 {
		t.Fatalf("unrelated request: %+v", a)
	}
	checkBaseline(t, s.pre, s.dec, p2)
	// The dead prefill worker's job is redelivered to p2 after AckWait and
	// found failed: nothing more is sent, no second hand-over is published.
	testkit.Poll(t, 15*time.Second, func() error {
		st, err := ev.js.Stream(context.Background(), queue.JobsStream)
		if err != nil {
			return err
		}
		if m := st.CachedInfo().State.Msgs; m != 0 {
			return fmt.Errorf("%d jobs still in the stream", m)
		}
		return nil
	})
	if n := handovers(t, ev); n != 2 {
		t.Errorf("%d hand-overs published, want 2 (victim and the unrelated request)", n)
	}
	checkBaseline(t, p2)
}

// submitQuiet is submit for other goroutines: nil when the stream does not
// end cleanly.
func submitQuiet(ev *env, job *queue.Job) *answer {
	r, err := ev.client.Submit(context.Background(), job)
	if err != nil {
		return nil
	}
	defer r.Close()
	var frames []*queue.Frame
	for {
		f, err := r.Next(context.Background())
		if err != nil {
			if len(frames) == 0 {
				return nil
			}
			return toAnswer(frames)
		}
		frames = append(frames, f)
	}
}

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

	"github.com/bulkhead-ai/bulkhead/models/refdatatest"
	"github.com/bulkhead-ai/bulkhead/models/testkit"
	"github.com/bulkhead-ai/bulkhead/queue"
	"github.com/bulkhead-ai/bulkhead/workers/engine"
)

// TestBrokenEngineStopsWorker is the panic policy (docs/conventions.md) end
// to end: a broken invariant planted in an engine's loop while it runs three
// jobs ends every one of them with an error frame that says so, the worker
// reports not ready, the next job is served by another worker and never by
// this one, and the process (this test) lives on.
func TestBrokenEngineStopsWorker(t *testing.T) {
	ev := startNATS(t)
	// The loop's first step waits for the jobs to be in, then breaks.
	gate := make(chan struct{})
	release := sync.OnceFunc(func() { close(gate) })
	broken := startBreakableEngine(t, engine.Config{MaxBatch: 2, OnStep: func(int) {
		<-gate
		panic("kvcache: broken invariant: planted by the test")
	}})
	t.Cleanup(release) // before the engine's cleanup, should the test end early
	w, err := New(nil, ev.nc, ev.js, Config{Models: map[string]*engine.Engine{model: broken}, ID: "breaks",
		FetchWait: 100 * time.Millisecond, BusyDelay: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- w.Run(ctx) }()
	t.Cleanup(func() { stop(); <-ran })
	if err := w.Ready(); err != nil {
		t.Fatalf("Ready before the panic = %v", err)
	}

	var replies []*queue.Replies
	for range 3 { // in the batch and waiting
		r, err := ev.client.Submit(context.Background(), newJob(t, "Once upon a time", 400))
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		replies = append(replies, r)
	}
	testkit.Poll(t, 10*time.Second, func() error {
		if s := broken.Stats(); s.Running == 0 || s.Running+s.Waiting != 3 {
			return fmt.Errorf("engine stats %+v, want all 3 jobs in, one running at least", s)
		}
		return nil
	})
	release()

	for i, r := range replies {
		frames, err := collect(t, r)
		if !errors.Is(err, io.EOF) || len(frames) == 0 {
			t.Fatalf("job %d: stream ended with %v after %d frames", i, err, len(frames))
		}
		last := frames[len(frames)-1]
		if last.Kind != queue.KindError || last.Error.Kind != queue.ErrKindInternal ||
			!strings.Contains(last.Error.Message, "broken invariant") {
			t.Errorf("job %d ended with %+v (%+v), want an internal error naming the broken invariant", i, last, last.Error)
		}
	}
	if err := w.Ready(); !errors.Is(err, engine.ErrBroken) || !strings.Contains(err.Error(), model) {
		t.Errorf("Ready after the panic = %v, want ErrBroken naming %s", err, model)
	}
	doneBefore := w.JobsDone()

	// The next job waits for a sound worker: this one takes it no more.
	healthy := startEngine(t, engine.Config{})
	job := newJob(t, "Lily wanted to", 8)
	r, err := ev.client.Submit(context.Background(), job)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	other := startWorker(t, ev, Config{Models: map[string]*engine.Engine{model: healthy}, ID: "sound"})
	frames, err := collect(t, r)
	if !errors.Is(err, io.EOF) || len(frames) == 0 || frames[len(frames)-1].Kind != queue.KindFinal {
		t.Fatalf("the next job ended with %v after %d frames, want a final frame", err, len(frames))
	}
	if got := w.JobsDone(); got != doneBefore {
		t.Errorf("the broken worker completed %d more jobs", got-doneBefore)
	}
	if err := other(); err != nil {
		t.Errorf("sound worker Run = %v", err)
	}
	select {
	case err := <-ran:
		ran <- err // for the cleanup
		t.Fatalf("the broken worker's Run returned %v before its context ended", err)
	default:
	}
}

// startBreakableEngine runs an engine on stories260K until the test ends,
// without startEngine's check that every KV page came back: an engine whose
// invariants broke never touches its pool again.
func startBreakableEngine(t *testing.T, cfg engine.Config) *engine.Engine {
	t.Helper()
	m, err := engine.Load(refdatatest.Path(t, "models/stories260K.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	cfg.Threads = 1
	e, err := engine.New(nil, m, cfg)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- e.Run(context.Background()) }()
	t.Cleanup(func() { e.Close(); <-done })
	return e
}

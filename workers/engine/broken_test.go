package engine

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bulkhead-ai/bulkhead/models/testkit"
)

// plantedPanic stands for a kvcache invariant check that failed.
const plantedPanic = "kvcache: broken invariant: planted by the test"

// TestBrokenInvariantStopsEngine plants a broken invariant in the loop (a
// panic from the step hook, where a kvcache check would panic) with
// requests in the batch, waiting, and in a Prefill. Every one ends with
// ErrBroken naming the panic, Run returns it, the KV pool is left as it was,
// and every later request is refused: the engine serves nothing more, and
// the test's process lives on.
func TestBrokenInvariantStopsEngine(t *testing.T) {
	m := loadStories(t)
	// The loop's first step waits for the requests to be in, then breaks.
	gate := make(chan struct{})
	release := sync.OnceFunc(func() { close(gate) })
	e, err := New(nil, m, Config{Threads: 1, MaxBatch: 2, OnStep: func(int) {
		<-gate
		panic(plantedPanic)
	}})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- e.Run(context.Background()) }()
	t.Cleanup(func() { release(); e.Close(); <-done })

	var streams []<-chan Event
	for range 3 { // in the batch and waiting
		ev, err := e.Submit(context.Background(), greedy([]int32{1, 403, 407}, 400))
		if err != nil {
			t.Fatal(err)
		}
		streams = append(streams, ev)
	}
	prefilled := make(chan error, 1)
	go func() {
		p, err := e.Prefill(context.Background(), greedy([]int32{1, 403}, 10))
		if p != nil {
			p.Release()
		}
		prefilled <- err
	}()
	testkit.Poll(t, 5*time.Second, testkit.Cond("four requests admitted, some running", func() bool { s := e.Stats(); return s.Running > 0 && s.Running+s.Waiting == 4 }))
	used := e.KV().UsedPages()
	release()

	isBroken := func(err error) bool {
		return errors.Is(err, ErrBroken) && strings.Contains(err.Error(), plantedPanic)
	}
	for i, s := range streams {
		var last Event
		for ev := range s {
			last = ev
		}
		if !isBroken(last.Err) {
			t.Errorf("request %d ended with %+v, want ErrBroken naming the panic", i, last)
		}
	}
	if err := <-prefilled; !isBroken(err) {
		t.Errorf("Prefill = %v, want ErrBroken", err)
	}
	if err := <-done; !isBroken(err) {
		t.Errorf("Run = %v, want ErrBroken", err)
	}
	done <- nil // for the cleanup
	if err := e.Broken(); !isBroken(err) {
		t.Errorf("Broken() = %v, want ErrBroken", err)
	}
	if got := e.KV().UsedPages(); got != used {
		t.Errorf("the broken pool went from %d to %d used pages: it was touched after the panic", used, got)
	}
	if _, err := e.Submit(context.Background(), greedy([]int32{1, 403}, 5)); !errors.Is(err, ErrBroken) {
		t.Errorf("Submit after the panic = %v, want ErrBroken", err)
	}
	if _, err := e.Prefill(context.Background(), greedy([]int32{1, 403}, 5)); !errors.Is(err, ErrBroken) {
		t.Errorf("Prefill after the panic = %v, want ErrBroken", err)
	}
	if _, err := e.NewSequenceFor(greedy([]int32{1, 403}, 5)); !errors.Is(err, ErrBroken) {
		t.Errorf("NewSequenceFor after the panic = %v, want ErrBroken", err)
	}
}

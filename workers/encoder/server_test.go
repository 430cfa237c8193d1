package encoder

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/bulkhead-ai/bulkhead/models/gguf"
	"github.com/bulkhead-ai/bulkhead/workers/kernels"
)

// testServer is a running server and its model.
type testServer struct {
	*Server
	model *Model
}

func newServer(t *testing.T, cfg ServerConfig) testServer {
	t.Helper()
	m := load(t, synthFile(t, "bert-tiny", gguf.TypeQ8_0), kernels.Active())
	e := newEncoder(t, m)
	s, err := NewServer(e, e.Info(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { s.Run(ctx) })
	t.Cleanup(func() { cancel(); wg.Wait() })
	return testServer{s, m}
}

// texts returns n distinct inputs of m's tokenizer.
func texts(m *Model, prefix string, n int) [][]int32 {
	out := make([][]int32, n)
	for i := range out {
		out[i] = m.Tokenize(fmt.Sprintf("%s %d the cat sat on mat number %d", prefix, i, i*7))
	}
	return out
}

// TestServerSharesPasses sends two tenants' requests (64 inputs in all) at
// once: each gets its vectors in order, each bitwise equal to the vector of
// a pass of its own, and the server ran fewer passes than inputs.
func TestServerSharesPasses(t *testing.T) {
	s := newServer(t, ServerConfig{})
	m := s.model
	reqs := map[string][][]int32{"tenant-a": texts(m, "alpha", 40), "tenant-b": texts(m, "beta", 24)}
	got := map[string][][]float32{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for tenant, inputs := range reqs {
		wg.Go(func() {
			v, err := s.Embed(context.Background(), tenant, inputs)
			if err != nil {
				t.Error(err)
			}
			mu.Lock()
			got[tenant] = v
			mu.Unlock()
		})
	}
	wg.Wait()
	alone := newEncoder(t, m)
	for tenant, inputs := range reqs {
		for i, ids := range inputs {
			want, err := alone.Encode([][]int32{ids})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got[tenant][i], want[0]) {
				t.Fatalf("%s input %d: vector differs from its own pass", tenant, i)
			}
		}
	}
	if st := s.Stats(); st.Inputs != 64 || st.Passes >= 64 || st.Waiting != 0 {
		t.Fatalf("stats %+v: want 64 inputs in fewer passes, none waiting", st)
	}
}

// TestServerTakesTurns: a tenant's request of many inputs does not hold
// back another tenant's single input for more than a pass or so.
func TestServerTakesTurns(t *testing.T) {
	s := newServer(t, ServerConfig{PassTokens: 512})
	m := s.model
	long := make([][]int32, 60)
	for i := range long {
		long[i] = make([]int32, 250)
		for j := range long[i] {
			long[i][j] = int32(200 + (i+j)%500)
		}
	}
	var order []string
	var mu sync.Mutex
	var wg sync.WaitGroup
	done := func(who string) { mu.Lock(); order = append(order, who); mu.Unlock() }
	started := make(chan struct{})
	wg.Go(func() {
		close(started)
		if _, err := s.Embed(context.Background(), "flood", long); err != nil {
			t.Error(err)
		}
		done("flood")
	})
	<-started
	for s.Stats().Passes == 0 {
		time.Sleep(time.Millisecond)
	}
	if _, err := s.Embed(context.Background(), "small", texts(m, "small", 1)); err != nil {
		t.Fatal(err)
	}
	done("small")
	wg.Wait()
	if !slices.Equal(order, []string{"small", "flood"}) {
		t.Fatalf("finished in order %v: the small request waited for the flood", order)
	}
}

// TestServerRefusesAndGivesUp: bad inputs and a full queue are refused at
// once, a cancelled request returns its context's error, and the server
// serves on; after Run ends, requests get ErrClosed.
func TestServerRefusesAndGivesUp(t *testing.T) {
	s := newServer(t, ServerConfig{QueueSize: 1})
	m := s.model
	if _, err := s.Embed(context.Background(), "t", nil); !errors.Is(err, ErrNoInput) {
		t.Fatalf("no inputs: %v", err)
	}
	if _, err := s.Embed(context.Background(), "t", [][]int32{make([]int32, m.Hyper.Context+1)}); !errors.Is(err, ErrTooLong) {
		t.Fatalf("too long: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Embed(ctx, "t", texts(m, "x", 3)); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: %v", err)
	}
	if v, err := s.Embed(context.Background(), "t", texts(m, "y", 2)); err != nil || len(v) != 2 {
		t.Fatalf("after the refusals: %v", err)
	}

	m2 := load(t, synthFile(t, "bert-tiny", gguf.TypeQ8_0), kernels.Active())
	e2 := newEncoder(t, m2)
	idle, err := NewServer(e2, e2.Info(), ServerConfig{QueueSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	first := make(chan error, 1)
	go func() { _, err := idle.Embed(context.Background(), "t", texts(m2, "z", 1)); first <- err }()
	for idle.Stats().Waiting == 0 {
		time.Sleep(time.Millisecond)
	}
	if _, err := idle.Embed(context.Background(), "u", texts(m2, "z", 1)); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("a full queue: %v", err)
	}
	ctx2, stop := context.WithCancel(context.Background())
	stop()
	idle.Run(ctx2) // ends at once and closes the waiting request
	if err := <-first; !errors.Is(err, ErrClosed) {
		t.Fatalf("waiting when Run ended: %v", err)
	}
	if _, err := idle.Embed(context.Background(), "t", texts(m2, "z", 1)); !errors.Is(err, ErrClosed) {
		t.Fatalf("after Run: %v", err)
	}
}

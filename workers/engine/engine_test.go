package engine

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/bulkhead-ai/bulkhead/models/refdatatest"
	"github.com/bulkhead-ai/bulkhead/models/testkit"
	"github.com/bulkhead-ai/bulkhead/workers/kernels"
	"github.com/bulkhead-ai/bulkhead/workers/kvcache"
)

type goldenCase struct {
	Prompt           string  `json:"prompt"`
	PromptTokens     []int32 `json:"prompt_tokens"`
	CompletionTokens []int32 `json:"completion_tokens"`
	Completion       string  `json:"completion"`
	StoppedByEOS     bool    `json:"stopped_by_eos"`
}

func loadGolden(t testing.TB) []goldenCase {
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
	return g.Cases
}

func loadStories(t testing.TB) *Model {
	t.Helper()
	return loadStoriesOn(t, kernels.Active())
}

// loadStoriesOn loads stories260K with its weights laid out for ks.
func loadStoriesOn(t testing.TB, ks kernels.Set) *Model {
	t.Helper()
	m, err := LoadOn(refdatatest.Path(t, "models/stories260K.gguf"), ks)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// startEngine runs an engine until the test ends and checks that every KV page
// is back in the pool afterwards.
func startEngine(t testing.TB, m *Model, cfg Config) *Engine {
	t.Helper()
	e, err := New(nil, m, cfg)
	if err != nil {
		t.Fatal(err)
	}
	runEngine(t, e)
	return e
}

// runEngine runs e until the test ends and checks that every KV page is back
// in the pool afterwards.
func runEngine(t testing.TB, e *Engine) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	t.Cleanup(func() {
		e.Close()
		<-done
		cancel()
		if free, total := e.KV().FreePages(), e.KV().TotalPages(); free != total {
			t.Errorf("KV pages leaked: %d of %d free after the test", free, total)
		}
	})
}

// kernelSets lists the kernel sets the engine's numerics tests run, each
// as its own model and engines in this process: every set the CPU has. Under
// the race detector the portable set is left out (its Go loops instrumented
// take about 10 minutes for these tests, against 2.5 for the assembly sets);
// make test runs them again without -race, portable set included, and the
// kernels package's own tests run every set of every op under -race.
func kernelSets(t testing.TB) []kernels.Set {
	sets := kernels.Available()
	if testkit.Race && len(sets) > 1 && sets[0].Portable() {
		t.Logf("under -race: the %s kernel set is left to make test's run without it", sets[0])
		sets = sets[1:]
	}
	return sets
}

// eachKernelSet runs f as one subtest per kernel set of kernelSets, named
// for the set.
func eachKernelSet(t *testing.T, f func(t *testing.T, ks kernels.Set)) {
	t.Helper()
	for _, ks := range kernelSets(t) {
		t.Run(ks.String(), func(t *testing.T) { f(t, ks) })
	}
}

// greedyText encodes prompt with e's tokenizer, checks that its tokens are
// llama.cpp's (want), and returns e's greedy completion of n tokens.
func greedyText(t *testing.T, e *Engine, prompt string, want []int32, n int) *Result {
	t.Helper()
	ids := e.Model().Tokenizer.Encode(prompt, true, false)
	if !equal(ids, want) {
		t.Fatalf("prompt tokens %v, llama.cpp %v", ids, want)
	}
	res, err := e.Generate(context.Background(), greedy(ids, n))
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func greedy(prompt []int32, n int) Request {
	return Request{Owner: own, Prompt: prompt, MaxTokens: n}
}

func TestGoldenStories260K(t *testing.T) {
	eachKernelSet(t, testGoldenStories260K)
}

func testGoldenStories260K(t *testing.T, ks kernels.Set) {
	m := loadStoriesOn(t, ks)
	e := startEngine(t, m, Config{Threads: 1, Poison: true})
	for _, c := range loadGolden(t) {
		t.Run(c.Prompt, func(t *testing.T) {
			res := greedyText(t, e, c.Prompt, c.PromptTokens, len(c.CompletionTokens))
			if i := firstDiff(res.CompletionTokens, c.CompletionTokens); i >= 0 {
				t.Fatalf("completion differs from llama.cpp at token %d:\n got %v\nwant %v", i, res.CompletionTokens, c.CompletionTokens)
			}
			if !c.StoppedByEOS && res.Text != c.Completion {
				t.Errorf("text %q, llama.cpp %q", res.Text, c.Completion)
			}
		})
	}
}

// TestBatchInvariance decodes prompts alone on a fresh engine, then again
// inside batches with other sequences joining and leaving, on a pool whose
// pages held other data first (NaN-poisoned when freed), and requires the same
// tokens. Threads differ too.
func TestBatchInvariance(t *testing.T) {
	eachKernelSet(t, testBatchInvariance)
}

func testBatchInvariance(t *testing.T, ks kernels.Set) {
	m := loadStoriesOn(t, ks)
	cases := loadGolden(t)
	const n = 48
	ref := map[string][]int32{}
	{
		e := startEngine(t, m, Config{Threads: 1, Poison: true})
		for _, c := range cases {
			res, err := e.Generate(context.Background(), greedy(c.PromptTokens, n))
			if err != nil {
				t.Fatal(err)
			}
			ref[c.Prompt] = res.CompletionTokens
		}
	}
	for _, cfg := range []Config{
		{Threads: 2, Poison: true, KVTokens: 2048, ChunkSize: 3, MaxBatch: 5},
		{Threads: 3, Poison: true, KVTokens: 4096, ChunkSize: 64, MaxBatch: 16},
		{Threads: 2, KVTokens: 2048, ChunkSize: 7, MaxBatch: 3, Scrub: kvcache.ScrubNever},
	} {
		e := startEngine(t, m, cfg)
		// Dirty the pool: other sequences write and free pages first.
		for i := 0; i < 3; i++ {
			if _, err := e.Generate(context.Background(), greedy(cases[i].PromptTokens, 40)); err != nil {
				t.Fatal(err)
			}
		}
		var wg sync.WaitGroup
		for round := 0; round < 2; round++ {
			for i, c := range cases {
				wg.Add(1)
				go func() {
					defer wg.Done()
					time.Sleep(time.Duration(i*round) * time.Millisecond) // vary who joins when
					res, err := e.Generate(context.Background(), greedy(c.PromptTokens, n))
					if err != nil {
						t.Error(err)
						return
					}
					if j := firstDiff(res.CompletionTokens, ref[c.Prompt]); j >= 0 {
						t.Errorf("config %+v, %q: token %d differs in a batch:\n got %v\nwant %v", cfg, c.Prompt, j, res.CompletionTokens, ref[c.Prompt])
					}
				}()
			}
		}
		wg.Wait()
	}
}

var own = kvcache.Owner{Namespace: "t", Request: "r"}

func TestRequestErrors(t *testing.T) {
	m := loadStories(t)
	e := startEngine(t, m, Config{Threads: 1, Context: 64, KVTokens: 64})
	tests := []struct {
		name string
		req  Request
		want error
	}{
		{"no tenant", Request{Prompt: []int32{1}, MaxTokens: 1}, ErrInvalidRequest},
		{"empty prompt", Request{Owner: own, MaxTokens: 4}, ErrInvalidRequest},
		{"zero max tokens", Request{Owner: own, Prompt: []int32{1}, MaxTokens: 0}, ErrInvalidRequest},
		{"token out of vocabulary", Request{Owner: own, Prompt: []int32{1, 512}, MaxTokens: 1}, ErrInvalidRequest},
		{"negative token", Request{Owner: own, Prompt: []int32{1, -1}, MaxTokens: 1}, ErrInvalidRequest},
		{"prompt over context", Request{Owner: own, Prompt: make([]int32, 65), MaxTokens: 1}, ErrContextLength},
		{"prompt plus max tokens over context", Request{Owner: own, Prompt: make([]int32, 60), MaxTokens: 5}, ErrContextLength},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.Generate(context.Background(), tc.req)
			if !errors.Is(err, tc.want) {
				t.Fatalf("error %v, want %v", err, tc.want)
			}
		})
	}
	var le *LengthError
	_, err := e.Generate(context.Background(), Request{Owner: own, Prompt: make([]int32, 70), MaxTokens: 1})
	if !errors.As(err, &le) || le.PromptTokens != 70 || le.Limit != 64 {
		t.Fatalf("error %v, want a LengthError naming 70 prompt tokens and the 64-token window", err)
	}
}

func TestSmallPoolRefusedAtStart(t *testing.T) {
	m := loadStories(t)
	_, err := New(nil, m, Config{Context: 2048, KVTokens: 1024})
	if !errors.Is(err, ErrConfig) {
		t.Fatalf("a 1024-token pool for a 2048-token context: error %v, want ErrConfig", err)
	}
	// With the check off, a request larger than the pool is still refused, by name.
	e := startEngine(t, m, Config{Threads: 1, Context: 2048, KVTokens: 256, AllowSmallPool: true})
	_, err = e.Generate(context.Background(), Request{Owner: own, Prompt: make([]int32, 300), MaxTokens: 1})
	if !errors.Is(err, ErrExceedsPool) {
		t.Fatalf("300-token prompt on a 256-token pool: error %v, want ErrExceedsPool", err)
	}
}

func TestCancelFreesPages(t *testing.T) {
	m := loadStories(t)
	e := startEngine(t, m, Config{Threads: 1, Poison: true})
	ctx, cancel := context.WithCancel(context.Background())
	events, err := e.Submit(ctx, greedy([]int32{1, 403, 407}, 1000))
	if err != nil {
		t.Fatal(err)
	}
	<-events // first token
	cancel()
	var last Event
	for ev := range events {
		last = ev
	}
	if !errors.Is(last.Err, context.Canceled) {
		t.Fatalf("final event %+v, want context.Canceled", last)
	}
	testkit.Poll(t, time.Second, testkit.Cond("every KV page back in the pool", func() bool { return e.KV().FreePages() == e.KV().TotalPages() }))
}

func TestQueueFull(t *testing.T) {
	m := loadStories(t)
	e := startEngine(t, m, Config{Threads: 1, MaxBatch: 1, QueueSize: 1})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var full bool
	var streams []<-chan Event
	for i := 0; i < 8 && !full; i++ {
		ev, err := e.Submit(ctx, greedy([]int32{1, 403}, 500))
		switch {
		case errors.Is(err, ErrQueueFull):
			full = true
		case err != nil:
			t.Fatal(err)
		default:
			streams = append(streams, ev)
		}
	}
	if !full {
		t.Fatal("8 submissions to a 1-slot queue never returned ErrQueueFull")
	}
	cancel()
	for _, s := range streams {
		for range s {
		}
	}
}

// TestHoldAt: with HoldAt 2 a sequence sends exactly two tokens and then
// keeps its batch slot, however long it asked for, so a one-slot engine with
// a one-request queue refuses a third request (ErrQueueFull) every time;
// cancelling the held sequence ends it and lets the waiting one run (and be
// held in turn); a request for no more than two tokens is never held.
func TestHoldAt(t *testing.T) {
	m := loadStories(t)
	e := startEngine(t, m, Config{Threads: 1, MaxBatch: 1, QueueSize: 1, HoldAt: 2})
	ctx1, cancel1 := context.WithCancel(context.Background())
	defer cancel1()
	first, err := e.Submit(ctx1, greedy([]int32{1, 403}, 500))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if ev := <-first; ev.Err != nil || ev.Done {
			t.Fatalf("event %d: %+v, want a token", i, ev)
		}
	}
	select {
	case ev := <-first:
		t.Fatalf("an event past the hold: %+v", ev)
	case <-time.After(50 * time.Millisecond):
	}
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	second, err := e.Submit(ctx2, greedy([]int32{1, 403}, 500))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Submit(context.Background(), greedy([]int32{1, 403}, 500)); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("a third request to a held one-slot engine: %v, want ErrQueueFull", err)
	}
	cancel1()
	if ev := <-first; !errors.Is(ev.Err, context.Canceled) {
		t.Fatalf("the held request's final event %+v, want context.Canceled", ev)
	}
	for i := range 2 {
		if ev := <-second; ev.Err != nil || ev.Done {
			t.Fatalf("second request, event %d: %+v, want a token", i, ev)
		}
	}
	cancel2()
	if ev := <-second; !errors.Is(ev.Err, context.Canceled) {
		t.Fatalf("the second request's final event %+v, want context.Canceled", ev)
	}
	// A request for no more tokens than the hold runs to its end: tests keep
	// an engine busy with held requests and still see short jobs finish.
	short, err := e.Submit(context.Background(), greedy([]int32{1, 403}, 2))
	if err != nil {
		t.Fatal(err)
	}
	var last Event
	for done := false; !done; {
		select {
		case ev, ok := <-short:
			done = !ok
			if ok {
				last = ev
			}
		case <-time.After(30 * time.Second):
			t.Fatal("a two-token request on an engine holding at 2 never ended: it was held")
		}
	}
	if last.Err != nil || !last.Done {
		t.Fatalf("a two-token request on an engine holding at 2 ended with %+v, want done", last)
	}
}

func equal(a, b []int32) bool { return firstDiff(a, b) < 0 && len(a) == len(b) }

// firstDiff returns the first index where a and b differ, or -1.
func firstDiff(a, b []int32) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	if len(a) != len(b) {
		return min(len(a), len(b))
	}
	return -1
}

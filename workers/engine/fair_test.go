package engine

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bulkhead-ai/bulkhead/models/testkit"
	"github.com/bulkhead-ai/bulkhead/workers/kvcache"
	"github.com/bulkhead-ai/bulkhead/workers/sample"
)

// fakeSeq is a sequence as the fair scheduler sees it: a tenant, a weight,
// and how many tokens it generated.
func fakeSeq(tenant string, weight float64) *sequence {
	return &sequence{
		unwatch: func() bool { return false },
		req:     Request{Owner: kvcache.Owner{Namespace: tenant, Request: "r"}, Prompt: []int32{1, 2, 3, 4}, MaxTokens: 8, Weight: weight},
	}
}

func counters(f *fairness) map[string]float64 {
	out := map[string]float64{}
	for n, t := range f.tenants {
		out[n] = t.Counter
	}
	return out
}

// TestFairCounterRules checks the counter rules one round at a time: a
// returning tenant is lifted to the least counter present (or, with nobody
// present, to the greatest of those that left), never lowered; service is
// divided by the weight; admission takes the least counter, then the tenant
// running fewer sequences, then arrival order.
func TestFairCounterRules(t *testing.T) {
	type round struct {
		at              time.Duration // since the first round
		active, waiting []*sequence
		decode          map[*sequence]int // tokens generated after the round
	}
	a1, a2, b1, c1 := fakeSeq("a", 0), fakeSeq("a", 0), fakeSeq("b", 0), fakeSeq("c", 0)
	heavy := fakeSeq("h", 2)
	for _, tc := range []struct {
		name   string
		rounds []round
		want   map[string]float64 // counters after the last round's observe
		pick   string             // tenant picked in the last round ("" to skip)
	}{
		{
			name: "lift on re-arrival to the least present",
			rounds: []round{
				{active: []*sequence{a1}, waiting: []*sequence{c1}, decode: map[*sequence]int{a1: 100}},
				{active: []*sequence{a1, c1}, decode: map[*sequence]int{c1: 40}},
				{active: []*sequence{a1, c1}, waiting: []*sequence{b1}},
			},
			want: map[string]float64{"a": 100, "c": 40, "b": 40},
			pick: "b",
		},
		{
			name: "a tenant back within the linger keeps what it is owed",
			rounds: []round{
				{active: []*sequence{a1, b1}, decode: map[*sequence]int{a1: 10, b1: 90}},
				{active: []*sequence{b1}}, // a's request ended
				{at: presenceLinger / 2, active: []*sequence{b1}, waiting: []*sequence{a2}},
			},
			want: map[string]float64{"a": 10, "b": 90},
			pick: "a",
		},
		{
			name: "a tenant back after the linger is lifted",
			rounds: []round{
				{active: []*sequence{a1, b1}, decode: map[*sequence]int{a1: 10, b1: 90}},
				{active: []*sequence{b1}},
				{at: presenceLinger / 2, active: []*sequence{b1}},
				{at: 2 * presenceLinger, active: []*sequence{b1}, waiting: []*sequence{a2}},
			},
			want: map[string]float64{"a": 90, "b": 90},
			pick: "a",
		},
		{
			name: "no credit for idle time when nobody is present",
			rounds: []round{
				{active: []*sequence{a1}, decode: map[*sequence]int{a1: 500}},
				{at: time.Millisecond}, // a left
				{at: 2 * presenceLinger, waiting: []*sequence{b1}},
			},
			want: map[string]float64{"a": 500, "b": 500},
			pick: "b",
		},
		{
			name: "a returning tenant is never lowered",
			rounds: []round{
				{active: []*sequence{a1, b1}, decode: map[*sequence]int{a1: 300, b1: 10}},
				{active: []*sequence{b1}},
				{at: 2 * presenceLinger, active: []*sequence{b1}, waiting: []*sequence{a2}},
			},
			want: map[string]float64{"a": 300, "b": 10},
			pick: "a",
		},
		{
			name: "weights divide service",
			rounds: []round{
				{active: []*sequence{a1, heavy}, decode: map[*sequence]int{a1: 100, heavy: 100}},
				{active: []*sequence{a1, heavy}, waiting: []*sequence{a2, fakeSeq("h", 2)}},
			},
			want: map[string]float64{"a": 100, "h": 50},
			pick: "h",
		},
		{
			name: "equal counters: the tenant running fewer",
			rounds: []round{
				{active: []*sequence{a1}, waiting: []*sequence{a2, b1}},
			},
			want: map[string]float64{"a": 0, "b": 0},
			pick: "b",
		},
		{
			name: "equal counters and holdings: arrival order",
			rounds: []round{
				{waiting: []*sequence{c1, a1, b1}},
			},
			want: map[string]float64{"a": 0, "b": 0, "c": 0},
			pick: "c",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFairness(Config{PrefillCost: 1, DecodeCost: 1})
			t0 := time.Now()
			for _, r := range tc.rounds {
				f.observe(t0.Add(r.at), r.active, r.waiting)
				for s, n := range r.decode {
					f.decoded(s, n)
				}
			}
			if got := counters(f); !mapsEqual(got, tc.want) {
				t.Errorf("counters %v, want %v", got, tc.want)
			}
			last := tc.rounds[len(tc.rounds)-1]
			if tc.pick != "" {
				if got := last.waiting[f.pick(last.waiting)].req.Owner.Namespace; got != tc.pick {
					t.Errorf("picked tenant %q, want %q", got, tc.pick)
				}
			}
		})
	}
}

func mapsEqual(a, b map[string]float64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || math.Abs(v-w) > 1e-9 {
			return false
		}
	}
	return true
}

// TestFairChargesAdmission: admitting a sequence charges the prompt
// positions it computes (not those attached from the cache), weighted; a
// sequence admitted again after a preemption is not charged twice.
func TestFairChargesAdmission(t *testing.T) {
	f := newFairness(Config{PrefillCost: 3, DecodeCost: 1})
	s := fakeSeq("a", 2)
	s.prefilled = 1 // one position attached from the prefix cache
	f.observe(time.Now(), nil, []*sequence{s})
	f.admitted(s)
	if got := f.tenants["a"].Counter; got != 3*3/2.0 {
		t.Errorf("counter %v after a 4-token prompt with 1 cached, cost 3, weight 2; want 4.5", got)
	}
	s.sched.preempts = 1
	f.admitted(s)
	if got := f.tenants["a"].PrefillTokens; got != 3 {
		t.Errorf("PrefillTokens %d after a re-admission, want 3", got)
	}
}

// TestFairVictims checks who may preempt whom: a tenant under its fair share
// takes from the one furthest over its own, never from one that received
// less service, never a sequence still protected after its own preemption,
// and a tenant at or over its share takes nothing.
func TestFairVictims(t *testing.T) {
	const maxBatch, pages = 4, 100
	mk := func(tenant string, n int) []*sequence {
		out := make([]*sequence, n)
		for i := range out {
			out[i] = fakeSeq(tenant, 0)
			out[i].kv = &kvcache.Sequence{} // holds no pages: the batch slot counts
		}
		return out
	}
	for _, tc := range []struct {
		name    string
		active  func() []*sequence
		cand    *sequence
		counter map[string]float64
		want    int // victims
	}{
		{"under share takes a slot from the one over", func() []*sequence { return mk("a", 4) }, fakeSeq("b", 0), nil, 1},
		{"not from a tenant with less service", func() []*sequence { return mk("a", 4) }, fakeSeq("b", 0), map[string]float64{"a": 5, "b": 9}, 0},
		{"not when the candidate would pass its share", func() []*sequence { return append(mk("a", 2), mk("b", 2)...) }, fakeSeq("b", 0), nil, 0},
		{"not when the candidate holds half its share", func() []*sequence { return append(append(mk("a", 2), mk("b", 1)...), mk("c", 1)...) }, fakeSeq("b", 0), nil, 0},
		{"not a protected sequence", func() []*sequence {
			s := mk("a", 4)
			for _, x := range s {
				x.sched.protectUntil = 1
			}
			return s
		}, fakeSeq("b", 0), nil, 0},
		{"weights move the share", func() []*sequence {
			s := append(mk("a", 3), mk("h", 1)...)
			for _, x := range s[3:] {
				x.req.Weight = 4 // share 0.8: 1 of 4 slots is less than half
			}
			return s
		}, fakeSeq("h", 4), nil, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFairness(Config{PrefillCost: 1, DecodeCost: 1})
			active := tc.active()
			f.observe(time.Now(), active, []*sequence{tc.cand})
			for n, c := range tc.counter {
				f.tenants[n].Counter = c
			}
			v := f.victims(tc.cand, active, room{slots: 1}, maxBatch, pages)
			if len(v) != tc.want {
				t.Fatalf("%d victims, want %d", len(v), tc.want)
			}
			for _, s := range v {
				if s.req.Owner.Namespace == tc.cand.req.Owner.Namespace {
					t.Errorf("the candidate's own tenant was preempted")
				}
			}
		})
	}
}

// TestWeightRefused: a weight that is negative or not finite is refused.
func TestWeightRefused(t *testing.T) {
	m := loadStories(t)
	e := startEngine(t, m, Config{Threads: 1})
	for _, w := range []float64{-1, math.NaN(), math.Inf(1)} {
		req := greedy([]int32{1, 403}, 4)
		req.Weight = w
		if _, err := e.Submit(context.Background(), req); !errors.Is(err, ErrInvalidRequest) {
			t.Errorf("weight %v: error %v, want ErrInvalidRequest", w, err)
		}
	}
}

// TestLoneTenantGetsWholeEngine: with one tenant, the scheduler holds
// nothing back (work-conserving): every batch slot fills. The engine holds
// each sequence after 4 tokens (HoldAt), so the batch stays full until the
// test cancels it, however fast the engine is.
func TestLoneTenantGetsWholeEngine(t *testing.T) {
	m := loadStories(t)
	const batch = 6
	e := startEngine(t, m, Config{Threads: 1, KVTokens: 4096, MaxBatch: batch, HoldAt: 4})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var streams []<-chan Event
	for range batch + 2 {
		req := Request{Owner: own, Prompt: []int32{1, 403, 407}, MaxTokens: 64, IgnoreEOS: true}
		ev, err := e.Submit(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		streams = append(streams, ev)
	}
	testkit.Poll(t, 10*time.Second, testkit.Cond("the whole batch running", func() bool { return e.Stats().Running == batch }))
	cancel()
	for _, s := range streams {
		for range s {
		}
	}
}

// chat is a request standing for an OpenAI chat call without max_tokens
// before the edge bounded it: the rest of the context window.
func chat(e *Engine, tenant string, i int) Request {
	prompt := []int32{1, 403, 407, 292, 411, 300 + int32(i)}
	return Request{Owner: kvcache.Owner{Namespace: tenant, Request: fmt.Sprint(i)}, Prompt: prompt,
		MaxTokens: e.Context() - len(prompt), IgnoreEOS: true}
}

// timed runs req and returns how long it took and its tokens.
func timed(t *testing.T, e *Engine, req Request) (time.Duration, []int32) {
	t.Helper()
	start := time.Now()
	res, err := e.Generate(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	return time.Since(start), res.CompletionTokens
}

// TestFairHeadOfLine is the head-of-line case: tenant A sends 16 chat calls
// whose reservations each take the rest of the context window (the pool
// holds one window, the default), then tenant B sends an 8-token request. B
// is served within twice the engine steps it takes on the idle engine (best
// of 5 each; the step in flight when it arrives, and any steps the engine
// runs before the test reads B's last event, count too), because B, under
// its fair share, preempts A's running call; B's
// tokens are the same as alone, and so are A's so far when the test
// cancels them. Without fairness B would wait for A's calls, hundreds of
// steps each. Steps, not wall time, decide: the test runs under the race
// detector on machines of any speed; the wall times are logged.
func TestFairHeadOfLine(t *testing.T) {
	m := loadStories(t)
	var steps atomic.Int64
	e := startEngine(t, m, Config{Threads: 2, Poison: true, Context: 512, OnStep: func(int) { steps.Add(1) }})
	timedSteps := func(req Request) (time.Duration, int64, []int32) {
		before := steps.Load()
		d, toks := timed(t, e, req)
		return d, steps.Load() - before, toks
	}
	// The baseline runs as another tenant, so that B arrives with no
	// service yet (a tenant served in the last presenceLinger waits until
	// A catches up: that is the counter's rule, not head-of-line blocking).
	small := func(tenant string) Request {
		return Request{Owner: kvcache.Owner{Namespace: tenant, Request: "r"}, Prompt: []int32{1, 403, 407}, MaxTokens: 8, IgnoreEOS: true}
	}
	unloaded, unloadedSteps := time.Duration(math.MaxInt64), int64(math.MaxInt64)
	var want []int32
	for range 5 {
		d, n, toks := timedSteps(small("solo"))
		unloaded, unloadedSteps, want = min(unloaded, d), min(unloadedSteps, n), toks
	}
	// A's reference: one call alone, cut short (greedy: a prefix of the whole).
	ref := chat(e, "a", 0)
	ref.MaxTokens = 64
	_, refToks := timed(t, e, ref)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	started := make(chan struct{}, 16)
	for i := range 16 {
		req := chat(e, "a", 0)
		req.Owner.Request = fmt.Sprint(i)
		events, err := e.Submit(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			var got []int32
			var last Event
			for ev := range events {
				if !ev.Done && ev.Err == nil {
					if len(got) == 0 {
						started <- struct{}{}
					}
					got = append(got, ev.Token)
				}
				last = ev
			}
			mu.Lock()
			defer mu.Unlock()
			k := min(len(got), len(refToks))
			// A fast engine may finish a call (its whole window) before the
			// test cancels the rest.
			finished := last.Done && last.Err == nil && last.Finish == "length" && len(got) == req.MaxTokens
			switch {
			case !errors.Is(last.Err, context.Canceled) && !finished:
				errs = append(errs, fmt.Errorf("A's call %d ended with %+v, want the test's cancel or its whole window", i, last))
			case !slices.Equal(got[:k], refToks[:k]):
				errs = append(errs, fmt.Errorf("A's call %d: output differs from alone", i))
			}
		})
	}
	<-started // A holds the pool and decodes
	// Best of 5, as the baseline: each time a new tenant B, once A's call
	// back in the pool has run past its protection after a preemption.
	loaded, loadedSteps := time.Duration(math.MaxInt64), int64(math.MaxInt64)
	for i := range 5 {
		decoded := e.Service()["a"].DecodeTokens
		testkit.Poll(t, time.Minute, testkit.Cond("64 more of a's tokens decoded", func() bool { return e.Service()["a"].DecodeTokens >= decoded+64 }))
		d, n, got := timedSteps(small(fmt.Sprint("b", i)))
		loaded, loadedSteps = min(loaded, d), min(loadedSteps, n)
		if !slices.Equal(got, want) {
			t.Errorf("B's tokens under load %v, alone %v", got, want)
		}
	}
	t.Logf("B's 8-token request: %v and %d engine steps alone, %v and %d steps behind 16 whole-window calls (%.1fx the time), best of 5 each",
		unloaded, unloadedSteps, loaded, loadedSteps, float64(loaded)/float64(unloaded))
	if loadedSteps > 2*unloadedSteps {
		t.Errorf("B took %d engine steps under load, more than twice the %d it takes alone", loadedSteps, unloadedSteps)
	}
	if n := e.Service()["a"].Preempted; n < 5 {
		t.Errorf("A preempted %d times, want 5 (once for each B)", n)
	}
	cancel()
	wg.Wait()
	for _, err := range errs {
		t.Error(err)
	}
}

// TestPreemptionKeepsOutput: sequences preempted and recomputed, greedy and
// sampled, on a poisoned pool, give the tokens they give alone, and so do
// the requests of the tenant that preempts them (a canary's check: no
// response differs from its quiet reference).
func TestPreemptionKeepsOutput(t *testing.T) {
	m := loadStories(t)
	cases := loadGolden(t)
	const n = 120
	sampled := sample.Params{Temperature: 0.9, TopK: 40, Seed: 7}
	reqs := func(ns string) []Request {
		var out []Request
		for i, c := range cases[:4] {
			r := Request{Owner: kvcache.Owner{Namespace: ns, Request: fmt.Sprint(i)}, Prompt: c.PromptTokens, MaxTokens: n, IgnoreEOS: true}
			if i%2 == 1 {
				r.Sampling = sampled
			}
			out = append(out, r)
		}
		return out
	}
	small := Request{Owner: kvcache.Owner{Namespace: "b", Request: "b"}, Prompt: []int32{1, 403, 407}, MaxTokens: 4, IgnoreEOS: true}
	ref := map[string][]int32{}
	var smallRef []int32
	{
		e := startEngine(t, m, Config{Threads: 1, Poison: true})
		for _, r := range reqs("a") {
			_, toks := timed(t, e, r)
			ref[r.Owner.Request] = toks
		}
		_, smallRef = timed(t, e, small)
	}
	// The pool holds two of A's sequences; B's stream of short requests
	// takes a slot each time, preempting A.
	e := startEngine(t, m, Config{Threads: 2, Poison: true, Context: 512, KVTokens: 2 * 256, MaxBatch: 2, ChunkSize: 16})
	var wg sync.WaitGroup
	for _, r := range reqs("a") {
		wg.Go(func() {
			res, err := e.Generate(context.Background(), r)
			if err != nil {
				t.Error(err)
				return
			}
			if i := firstDiff(res.CompletionTokens, ref[r.Owner.Request]); i >= 0 {
				t.Errorf("request %s: token %d differs after preemption", r.Owner.Request, i)
			}
		})
	}
	testkit.Poll(t, 10*time.Second, testkit.Cond("both sequences running", func() bool { return e.Stats().Running == 2 }))
	for i := 0; e.Stats().Running+e.Stats().Waiting > 0 && i < 40; i++ {
		if _, toks := timed(t, e, small); !slices.Equal(toks, smallRef) {
			t.Errorf("B's request %d: tokens %v under the flood, %v quiet", i, toks, smallRef)
		}
	}
	wg.Wait()
	if got := e.Service()["a"].Preempted; got < 2 {
		t.Errorf("A preempted %d times, want several", got)
	}
	t.Logf("service: %+v", e.Service())
}

// TestFairWeights: two tenants saturate an engine, at weights 1:1 and 2:1
// (two engines side by side); the tokens served in a steady window split
// within 10% of the weights. The window is 6,000 tokens and at least a second
// (seconds under -race); BULKHEAD_FAIR_MINUTE=1 makes it a minute of wall time
// instead.
func TestFairWeights(t *testing.T) {
	m := loadStories(t)
	for _, tc := range []struct {
		name string
		wa   float64
	}{{"1:1", 1}, {"2:1", 2}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := startEngine(t, m, Config{Threads: 1, Context: 512, KVTokens: 1024, MaxBatch: 8})
			ctx, cancel := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			for _, tn := range []struct {
				ns string
				w  float64
			}{{"a", tc.wa}, {"b", 1}} {
				// Far more than the batch, each tenant, so that one always
				// waits; requests long enough that a client's turn-around
				// between two of them (CPU it may have to wait for) is small
				// against their time in the batch.
				for i := range 24 {
					wg.Go(func() {
						for ctx.Err() == nil {
							req := Request{Owner: kvcache.Owner{Namespace: tn.ns, Request: fmt.Sprint(i)},
								Prompt: []int32{1, 403, 407, int32(300 + i)}, MaxTokens: 96, IgnoreEOS: true, Weight: tn.w}
							if _, err := e.Generate(ctx, req); err != nil && ctx.Err() == nil {
								t.Error(err)
								return
							}
						}
					})
				}
			}
			served := func() (a, b int64) {
				s := e.Service()
				return s["a"].PrefillTokens + s["a"].DecodeTokens, s["b"].PrefillTokens + s["b"].DecodeTokens
			}
			testkit.Poll(t, 10*time.Second, testkit.Cond("both tenants served", func() bool { a, b := served(); return a > 500 && b > 250 }))
			a0, b0 := served()
			start := time.Now()
			if os.Getenv("BULKHEAD_FAIR_MINUTE") != "" {
				testkit.Poll(t, 2*time.Minute, testkit.Cond("a minute to pass", func() bool { return time.Since(start) >= time.Minute }))
			} else {
				// At least a second too: without -race 6,000 tokens take a
				// tenth of one, too few scheduling rounds for a steady share.
				const window = 6000
				testkit.Poll(t, 2*time.Minute, testkit.Cond("a window of tokens served", func() bool {
					a, b := served()
					return a-a0+b-b0 >= window && time.Since(start) >= time.Second
				}))
			}
			a1, b1 := served()
			cancel()
			wg.Wait()
			a, b := float64(a1-a0), float64(b1-b0)
			want := tc.wa / (tc.wa + 1)
			got := a / (a + b)
			t.Logf("weights %s: %0.f and %0.f tokens in %v: share %.3f, want %.3f (preempted %d, %d) %+v", tc.name, a, b,
				time.Since(start).Round(time.Millisecond), got, want, e.Service()["a"].Preempted, e.Service()["b"].Preempted, e.Service())
			if math.Abs(got-want) > 0.1*want {
				t.Errorf("tenant a's share %.3f, want %.3f within 10%%", got, want)
			}
		})
	}
}

// TestFairCostsRefused: counter costs that are negative or not finite stop
// the engine at start, by name.
func TestFairCostsRefused(t *testing.T) {
	m := loadStories(t)
	for _, cfg := range []Config{{PrefillCost: -1}, {DecodeCost: math.Inf(1)}, {DecodeCost: math.NaN()}} {
		if _, err := New(nil, m, cfg); !errors.Is(err, ErrConfig) {
			t.Errorf("config %+v: error %v, want ErrConfig", cfg, err)
		}
	}
}

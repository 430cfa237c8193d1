package engine

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/bulkhead-ai/bulkhead/workers/kvcache"
)

// longPrompt repeats tokens until the prompt has n of them.
func longPrompt(tokens []int32, n int) []int32 {
	out := make([]int32, 0, n)
	for len(out) < n {
		out = append(out, tokens[:min(len(tokens), n-len(out))]...)
	}
	return out
}

func tenantReq(ns string, prompt []int32, n int, cache bool) Request {
	return Request{Owner: kvcache.Owner{Namespace: ns, Request: "r"}, Prompt: prompt, MaxTokens: n, CachePrefix: cache}
}

// flushCache empties the prefix cache before startEngine's leak check runs
// (cleanups run last registered first), and fails if any cached page is still
// referenced once every request has ended.
func flushCache(t *testing.T, e *Engine) {
	t.Cleanup(func() {
		st := e.KV().PrefixStats()
		if st.Idle != st.Cached {
			t.Errorf("%d cached pages still referenced after the test", st.Cached-st.Idle)
		}
		if n := e.KV().FlushPrefixes(); n != st.Cached {
			t.Errorf("flushed %d of %d cached pages", n, st.Cached)
		}
	})
}

// cachedFor is how many positions a hit can attach for a prompt of n tokens:
// its full pages, less the one holding the last token.
func cachedFor(n, pageSize int) int { return (n - 1) / pageSize * pageSize }

func generate(t *testing.T, e *Engine, req Request) *Result {
	t.Helper()
	res, err := e.Generate(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// TestPrefixCacheGreedyEqual: for every golden prompt made long, greedy output
// with a prefix cache hit equals output without the cache, on pools that
// poison, scrub, or keep freed pages, with several page and chunk sizes. A
// longer prompt that extends a cached one hits the shared part.
func TestPrefixCacheGreedyEqual(t *testing.T) {
	m := loadStories(t)
	cases := loadGolden(t)
	const n = 32
	// 64 ends on a page boundary for every page size below: the page of the
	// last prompt token is full and cached, yet must not be attached.
	lengths := []int{70, 64}
	ref := startEngine(t, m, Config{Threads: 1, Poison: true})
	want := map[string][]int32{}
	for _, c := range cases {
		for _, l := range lengths {
			for _, extra := range []int{0, 13} {
				p := longPrompt(c.PromptTokens, l+extra)
				want[fmt.Sprint(p)] = generate(t, ref, greedy(p, n)).CompletionTokens
			}
		}
	}
	for _, cfg := range []Config{
		{Threads: 1, Poison: true},
		{Threads: 2, PageSize: 4, ChunkSize: 7, KVTokens: 4096},
		{Threads: 1, PageSize: 8, Scrub: kvcache.ScrubNever, KVTokens: 4096},
	} {
		e := startEngine(t, m, cfg)
		flushCache(t, e)
		ps := e.KV().PageSize()
		for _, c := range cases {
			for _, l := range lengths {
				t.Run(fmt.Sprintf("page %d/%d tokens/%s", ps, l, c.Prompt), func(t *testing.T) {
					ns := fmt.Sprint("tenant-", l, c.Prompt)
					p := longPrompt(c.PromptTokens, l)
					for run, cached := range []int{0, cachedFor(l, ps)} {
						res := generate(t, e, tenantReq(ns, p, n, true))
						if res.Usage.CachedTokens != cached {
							t.Fatalf("run %d: %d cached tokens, want %d", run, res.Usage.CachedTokens, cached)
						}
						if j := firstDiff(res.CompletionTokens, want[fmt.Sprint(p)]); j >= 0 {
							t.Fatalf("run %d (%d cached): token %d differs from the uncached output:\n got %v\nwant %v", run, cached, j, res.CompletionTokens, want[fmt.Sprint(p)])
						}
					}
					longer := longPrompt(c.PromptTokens, l+13)
					res := generate(t, e, tenantReq(ns, longer, n, true))
					if res.Usage.CachedTokens != l/ps*ps {
						t.Fatalf("extended prompt: %d cached tokens, want the %d published", res.Usage.CachedTokens, l/ps*ps)
					}
					if j := firstDiff(res.CompletionTokens, want[fmt.Sprint(longer)]); j >= 0 {
						t.Fatalf("extended prompt: token %d differs:\n got %v\nwant %v", j, res.CompletionTokens, want[fmt.Sprint(longer)])
					}
				})
			}
		}
	}
}

// prefillPages runs a Prefill and returns the pages its sequence holds as
// shared prefix pages and those it holds as its own, releasing it.
func prefillPages(t *testing.T, e *Engine, req Request) (shared, own []int, cached int) {
	t.Helper()
	p, err := e.Prefill(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Release()
	for i, id := range p.Seq.Pages() {
		if p.Seq.Shared(i) {
			shared = append(shared, id)
		} else {
			own = append(own, id)
		}
	}
	return shared, own, p.CachedTokens
}

// TestPrefixCacheTenantIsolation: tenant B sends the exact prompt tenant A
// cached. B's lookup misses (the hit counter does not move, B computes every
// prompt token, none of A's pages is in B's sequence), B's output is still
// right, and A's entries are untouched: A keeps hitting its own pages.
func TestPrefixCacheTenantIsolation(t *testing.T) {
	m := loadStories(t)
	e := startEngine(t, m, Config{Threads: 1, Poison: true})
	flushCache(t, e)
	kv := e.KV()
	ps := kv.PageSize()
	prompt := longPrompt(loadGolden(t)[3].PromptTokens, 100)
	want := generate(t, e, greedy(prompt, 24))

	generate(t, e, tenantReq("alice", prompt, 24, true)) // publishes
	aShared, _, aCached := prefillPages(t, e, tenantReq("alice", prompt, 24, true))
	if aCached != cachedFor(len(prompt), ps) || len(aShared) != aCached/ps {
		t.Fatalf("alice's second prompt: %d cached tokens on %d shared pages", aCached, len(aShared))
	}
	for _, id := range aShared {
		if o, _ := kv.PageOwner(id); o != (kvcache.Owner{Namespace: "alice", Request: kvcache.PrefixRequest}) {
			t.Fatalf("cached page %d owned by %+v", id, o)
		}
	}
	before := kv.PrefixStats()

	bShared, bOwn, bCached := prefillPages(t, e, tenantReq("bob", prompt, 24, true))
	after := kv.PrefixStats()
	if bCached != 0 {
		t.Fatalf("bob attached %d cached tokens", bCached)
	}
	for _, id := range append(bShared, bOwn...) {
		if slices.Contains(aShared, id) {
			t.Fatalf("bob's sequence holds alice's cached page %d", id)
		}
	}
	for _, id := range bShared { // what bob's prefill published is bob's
		if o, _ := kv.PageOwner(id); o != (kvcache.Owner{Namespace: "bob", Request: kvcache.PrefixRequest}) {
			t.Fatalf("page %d bob published is owned by %+v", id, o)
		}
	}
	if after.Hits != before.Hits || after.HitPages != before.HitPages || after.Misses != before.Misses+1 {
		t.Fatalf("bob's lookup moved the counters from %+v to %+v", before, after)
	}
	res := generate(t, e, tenantReq("bob", prompt, 24, true)) // bob now hits his own copy
	if !equal(res.CompletionTokens, want.CompletionTokens) || res.Usage.CachedTokens != aCached {
		t.Fatalf("bob's cached run: %d cached, tokens %v, want %v", res.Usage.CachedTokens, res.CompletionTokens, want.CompletionTokens)
	}

	// Alice's entries are untouched: same pages, same owner, still hit.
	aShared2, _, aCached2 := prefillPages(t, e, tenantReq("alice", prompt, 24, true))
	if !slices.Equal(aShared2, aShared) || aCached2 != aCached {
		t.Fatalf("alice's cache changed: pages %v then %v", aShared, aShared2)
	}
	for _, id := range aShared {
		if o, _ := kv.PageOwner(id); o.Namespace != "alice" {
			t.Fatalf("alice's cached page %d now owned by %+v", id, o)
		}
	}
	// Accounting: every request ended; a flush empties the pool completely.
	st := kv.PrefixStats()
	if n := kv.FlushPrefixes(); n != st.Cached || kv.FreePages() != kv.TotalPages() {
		t.Fatalf("flushed %d of %d cached pages; %d of %d pages free", n, st.Cached, kv.FreePages(), kv.TotalPages())
	}
}

// TestPrefixCacheOptOut: a request without CachePrefix neither reads nor
// publishes: every counter stays put, and what it computed is not cached.
func TestPrefixCacheOptOut(t *testing.T) {
	m := loadStories(t)
	e := startEngine(t, m, Config{Threads: 1, Poison: true})
	flushCache(t, e)
	kv := e.KV()
	cases := loadGolden(t)
	cachedPrompt := longPrompt(cases[0].PromptTokens, 80)
	generate(t, e, tenantReq("alice", cachedPrompt, 8, true))
	before := kv.PrefixStats()
	if before.Cached == 0 {
		t.Fatal("the opted-in request published nothing; the test would prove nothing")
	}
	fresh := longPrompt(cases[4].PromptTokens, 80)
	for _, p := range [][]int32{cachedPrompt, fresh} {
		res := generate(t, e, tenantReq("alice", p, 8, false))
		if res.Usage.CachedTokens != 0 {
			t.Fatalf("opted-out request used %d cached tokens", res.Usage.CachedTokens)
		}
		if _, _, c := prefillPages(t, e, tenantReq("alice", p, 8, false)); c != 0 {
			t.Fatalf("opted-out Prefill used %d cached tokens", c)
		}
	}
	if after := kv.PrefixStats(); after != before {
		t.Fatalf("opted-out requests moved the cache from %+v to %+v", before, after)
	}
	if res := generate(t, e, tenantReq("alice", fresh, 8, true)); res.Usage.CachedTokens != 0 {
		t.Fatalf("a prompt only opted-out requests ran was cached (%d tokens)", res.Usage.CachedTokens)
	}
}

// TestPrefixCacheEviction: a pool filled with cached pages still serves a
// request that needs all of it, by evicting idle cached pages (poisoned on
// the way: a read of one would turn the output to NaN), and ends with every
// page free.
func TestPrefixCacheEviction(t *testing.T) {
	m := loadStories(t)
	const pool = 128
	e := startEngine(t, m, Config{Threads: 1, Poison: true, Context: pool, KVTokens: pool})
	ref := startEngine(t, m, Config{Threads: 1, Poison: true})
	kv := e.KV()
	cases := loadGolden(t)
	for i := range 4 { // each publishes 2 pages; the last ones evict the first
		generate(t, e, tenantReq("alice", longPrompt(cases[i].PromptTokens, 33), 8, true))
	}
	st := kv.PrefixStats()
	if st.Cached < kv.TotalPages()-3 || st.Evicted == 0 {
		t.Fatalf("cache did not fill the pool: %+v, %d pages", st, kv.TotalPages())
	}
	big := longPrompt(cases[5].PromptTokens, 100)
	want := generate(t, ref, greedy(big, pool-100))
	got := generate(t, e, tenantReq("bob", big, pool-100, false))
	if !equal(got.CompletionTokens, want.CompletionTokens) {
		t.Fatalf("after evicting the cache: tokens %v, want %v", got.CompletionTokens, want.CompletionTokens)
	}
	if st := kv.PrefixStats(); st.Cached != 0 || kv.FreePages() != kv.TotalPages() {
		t.Fatalf("a request needing the whole pool left %+v, %d of %d free", st, kv.FreePages(), kv.TotalPages())
	}
}

// TestPrefixCacheHandoff: a Prefill that starts from cached pages exports
// them like its own; the decode side's output equals a unified run.
func TestPrefixCacheHandoff(t *testing.T) {
	m := loadStories(t)
	a := startEngine(t, m, Config{Threads: 1, Poison: true, PageSize: 8})
	flushCache(t, a)
	b := startEngine(t, m, Config{Threads: 1, Poison: true, PageSize: 8})
	prompt := longPrompt(loadGolden(t)[6].PromptTokens, 50)
	req := tenantReq("alice", prompt, 40, true)
	want := generate(t, a, req) // also publishes
	p, err := a.Prefill(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if p.CachedTokens != cachedFor(len(prompt), 8) {
		t.Fatalf("prefill attached %d tokens", p.CachedTokens)
	}
	seq := transfer(t, p, b, req)
	events, err := b.Resume(context.Background(), req, seq, p.First)
	if err != nil {
		seq.Free()
		t.Fatal(err)
	}
	if got := collect(t, events, prompt); !equal(got.CompletionTokens, want.CompletionTokens) {
		t.Fatalf("handoff from cached pages: %v, want %v", got.CompletionTokens, want.CompletionTokens)
	}
}

// TestPrefixCacheConcurrent: two tenants submit overlapping long prompts at
// once, opted in or not, into a small poisoning pool, so attach, publish,
// eviction and free interleave across the batch. Every output equals the
// uncached reference. Under -race it proves the engine's side of the locking.
func TestPrefixCacheConcurrent(t *testing.T) {
	m := loadStories(t)
	cases := loadGolden(t)[:4]
	const n = 16
	ref := startEngine(t, m, Config{Threads: 1, Poison: true})
	e := startEngine(t, m, Config{Threads: 2, Poison: true, PageSize: 4, Context: 512, KVTokens: 512, ChunkSize: 24, MaxBatch: 6})
	flushCache(t, e)
	want := map[string][]int32{}
	var prompts [][]int32
	for _, c := range cases {
		for _, l := range []int{41, 60} {
			p := longPrompt(c.PromptTokens, l)
			prompts = append(prompts, p)
			want[fmt.Sprint(p)] = generate(t, ref, greedy(p, n)).CompletionTokens
		}
	}
	var wg sync.WaitGroup
	for w := range 6 {
		wg.Go(func() {
			for r := range 6 {
				p := prompts[(w+r)%len(prompts)]
				req := tenantReq(fmt.Sprint("tenant-", w%2), p, n, (w+r)%3 != 0)
				res, err := e.Generate(context.Background(), req)
				if err != nil {
					t.Error(err)
					return
				}
				if j := firstDiff(res.CompletionTokens, want[fmt.Sprint(p)]); j >= 0 {
					t.Errorf("worker %d round %d (%d cached): token %d differs", w, r, res.Usage.CachedTokens, j)
				}
			}
		})
	}
	wg.Wait()
	st := e.KV().PrefixStats()
	if st.Hits == 0 {
		t.Errorf("no hits: %+v", st)
	}
	t.Logf("%+v", st)
}

// BenchmarkTTFT512 measures time to first token for a 512-token prompt on
// stories260K: computed in full (opted out), and with all but its last page
// attached from the tenant's prefix cache.
func BenchmarkTTFT512(b *testing.B) {
	m := loadStories(b)
	e := startEngine(b, m, Config{Threads: 1, Context: 1024, KVTokens: 2048})
	prompt := longPrompt(loadGolden(b)[3].PromptTokens, 512)
	for _, bc := range []struct {
		name  string
		cache bool
	}{{"no-cache", false}, {"prefix-hit", true}} {
		b.Run(bc.name, func(b *testing.B) {
			req := tenantReq("alice", prompt, 1, bc.cache)
			if _, err := e.Generate(context.Background(), req); err != nil { // publishes
				b.Fatal(err)
			}
			var cached int
			for b.Loop() {
				res, err := e.Generate(context.Background(), req)
				if err != nil {
					b.Fatal(err)
				}
				cached = res.Usage.CachedTokens
			}
			b.ReportMetric(float64(cached), "cached-tokens")
		})
	}
	e.KV().FlushPrefixes()
}

package worker

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/bulkhead-ai/bulkhead/billing/price"
	"github.com/bulkhead-ai/bulkhead/models/testkit"
	"github.com/bulkhead-ai/bulkhead/queue"
	"github.com/bulkhead-ai/bulkhead/workers/engine"
	"github.com/bulkhead-ai/bulkhead/workers/handoff"
	"github.com/bulkhead-ai/bulkhead/workers/kvcache"
)

// flushPrefixesAtEnd empties the engines' prefix caches when the test ends,
// before startEngine's check that every page is back: cached pages are held
// by the cache, not leaked. It polls, as a request's pages go back to the
// pool a moment after its final frame.
func flushPrefixesAtEnd(t *testing.T, engines ...*engine.Engine) {
	t.Helper()
	t.Cleanup(func() {
		testkit.Poll(t, 10*time.Second, func() error {
			for i, e := range engines {
				e.KV().FlushPrefixes()
				if free, total := e.KV().FreePages(), e.KV().TotalPages(); free != total {
					return fmt.Errorf("engine %d: %d of %d KV pages free after flushing the prefix cache", i, free, total)
				}
			}
			return nil
		})
	})
}

// cachedRun is one request of a prefix cache scenario, run in order.
type cachedRun struct {
	name        string
	tenant      string
	cachePrefix bool
	hit         bool // the final frame reports the prompt's cacheable tokens as cached
}

// TestPrefixCacheUnified: a unified worker passes the job's cache_prefix to
// the engine and reports the cached prompt tokens in the final frame, with
// the same greedy text as an uncached run; the cache is the job tenant's
// alone, and a job without cache_prefix neither reads nor publishes.
func TestPrefixCacheUnified(t *testing.T) {
	ev := startNATS(t)
	e := startEngine(t, engine.Config{Poison: true}) // 16-token pages
	usage := countUsage(t, ev.nc)
	startWorker(t, ev, Config{Models: map[string]*engine.Engine{model: e}})
	flushPrefixesAtEnd(t, e)

	prompt, n := longPrompt(t, e, 40)
	ps := e.KV().PageSize()
	// The engine attaches whole pages and never the last prompt token's.
	cacheable := (n - 1) / ps * ps
	if cacheable < 2*ps {
		t.Fatalf("prompt of %d tokens covers %d full pages before its last token; want at least 2", n, cacheable/ps)
	}
	ref := submit(t, ev, jobFor(t, prompt, "tenant-a", false))
	if ref.last.Kind != queue.KindFinal || ref.last.Usage.CachedTokens != 0 || ref.last.Usage.CompletionTokens == 0 {
		t.Fatalf("reference run: %+v", ref.last)
	}
	if st := e.KV().PrefixStats(); st.Published != 0 || st.Hits+st.Misses != 0 {
		t.Fatalf("a job without cache_prefix used the prefix cache: %+v", st)
	}

	runs := []cachedRun{
		{"A opted out again", "tenant-a", false, false},
		{"A first opt-in is cold", "tenant-a", true, false},
		{"A second opt-in hits", "tenant-a", true, true},
		{"B same prompt misses A's cache", "tenant-b", true, false},
		{"A opted out reads nothing", "tenant-a", false, false},
		{"B second opt-in hits its own", "tenant-b", true, true},
		{"A third opt-in hits", "tenant-a", true, true},
	}
	for _, r := range runs {
		t.Run(r.name, func(t *testing.T) {
			before := e.KV().PrefixStats()
			job := jobFor(t, prompt, r.tenant, r.cachePrefix)
			got := submit(t, ev, job)
			if got.last.Kind != queue.KindFinal {
				t.Fatalf("last frame %+v", got.last)
			}
			want := 0
			if r.hit {
				want = cacheable
			}
			u := got.last.Usage
			if u.CachedTokens != want || u.PromptTokens != n {
				t.Errorf("usage %+v: %d cached of %d prompt tokens, want %d of %d", u, u.CachedTokens, u.PromptTokens, want, n)
			}
			wantUsageEvent(t, usage, job, n, want)
			if got.text != ref.text || got.last.Finish != ref.last.Finish || u.CompletionTokens != ref.last.Usage.CompletionTokens {
				t.Errorf("answer %q (%s, %d tokens), uncached %q (%s, %d tokens)",
					got.text, got.last.Finish, u.CompletionTokens, ref.text, ref.last.Finish, ref.last.Usage.CompletionTokens)
			}
			after := e.KV().PrefixStats()
			if looked := after.Hits + after.Misses - before.Hits - before.Misses; r.cachePrefix != (looked == 1) {
				t.Errorf("cache_prefix %v, but the engine looked up the cache %d times", r.cachePrefix, looked)
			}
			if !r.cachePrefix && after.Published != before.Published {
				t.Errorf("a job without cache_prefix published %d pages", after.Published-before.Published)
			}
		})
	}
}

// TestPrefixCachePrefill: a prefill worker passes cache_prefix to its
// engine, which hits the tenant's cache on the second run; the hand-over
// carries the prefill side's cached count, and the decode worker streams the
// same text and reports that count in its final frame and usage event.
func TestPrefixCachePrefill(t *testing.T) {
	ev := startNATS(t)
	usage := countUsage(t, ev.nc)
	s := startSplit(t, ev, engine.Config{}, engine.Config{}, Config{}, Config{})
	flushPrefixesAtEnd(t, s.pre, s.dec)
	prompt, n := longPrompt(t, s.pre, 40)
	ps := s.pre.KV().PageSize()
	cacheable := (n - 1) / ps * ps // whole pages before the last prompt token
	if cacheable == 0 {
		t.Fatalf("prompt of %d tokens covers no full page of %d before its last token", n, ps)
	}

	ref := submit(t, ev, jobFor(t, prompt, "tenant-a", false))
	if ref.last.Kind != queue.KindFinal || ref.last.Usage.CompletionTokens == 0 {
		t.Fatalf("reference run: %+v", ref.last)
	}
	runs := []struct {
		name        string
		tenant      string
		cachePrefix bool
		hitPages    bool // the prefill engine attached cached pages, and decode reports them
	}{
		{"A opted out", "tenant-a", false, false},
		{"A first opt-in is cold", "tenant-a", true, false},
		{"A second opt-in hits", "tenant-a", true, true},
		{"B misses A's cache", "tenant-b", true, false},
	}
	for _, r := range runs {
		t.Run(r.name, func(t *testing.T) {
			before := s.pre.KV().PrefixStats()
			job := jobFor(t, prompt, r.tenant, r.cachePrefix)
			got := submit(t, ev, job)
			if got.last.Kind != queue.KindFinal {
				t.Fatalf("last frame %+v", got.last)
			}
			if got.text != ref.text || got.last.Usage.PromptTokens != n {
				t.Errorf("answer %q with %d prompt tokens, uncached %q with %d", got.text, got.last.Usage.PromptTokens, ref.text, n)
			}
			want := 0
			if r.hitPages {
				want = cacheable
			}
			if got.last.Usage.CachedTokens != want {
				t.Errorf("decode reported %d cached tokens, want %d", got.last.Usage.CachedTokens, want)
			}
			wantUsageEvent(t, usage, job, n, want)
			after := s.pre.KV().PrefixStats()
			if looked := after.Hits + after.Misses - before.Hits - before.Misses; r.cachePrefix != (looked == 1) {
				t.Errorf("cache_prefix %v, but the prefill engine looked up the cache %d times", r.cachePrefix, looked)
			}
			if hit := after.HitPages > before.HitPages; hit != r.hitPages {
				t.Errorf("prefill engine attached %d cached pages, want hit=%v", after.HitPages-before.HitPages, r.hitPages)
			}
			if st := s.dec.KV().PrefixStats(); st != (kvcache.PrefixStats{}) {
				t.Errorf("the decode engine used its prefix cache: %+v", st)
			}
		})
	}
}

// TestDecodeBoundsHandedCachedTokens: the cached count in a hand-over comes
// from another node; a decode worker reports it bounded to [0, prompt tokens]
// in the final frame and the usage event.
func TestDecodeBoundsHandedCachedTokens(t *testing.T) {
	ev := startNATS(t)
	usage := countUsage(t, ev.nc)
	de := startEngine(t, engine.Config{Poison: true, PageSize: pageSize})
	startWorker(t, ev.conn(t), Config{Role: RoleDecode, Models: map[string]*engine.Engine{model: de}})
	src := source{startEngine(t, engine.Config{Poison: true, PageSize: pageSize})}
	const prompt = "One day, a boy named Tim went to the park with his mom"
	n := len(de.Model().Tokenizer.Encode(prompt, true, false))

	for _, tc := range []struct {
		name         string
		handed, want int
	}{
		{"none", 0, 0},
		{"within the prompt", 8, 8},
		{"whole prompt", n, n},
		{"negative", -5, 0},
		{"beyond the prompt", n + 100, n},
	} {
		t.Run(tc.name, func(t *testing.T) {
			job := newJob(t, prompt, 8)
			sc, pages := src.prefill(t, job, job.Tenant, prompt)
			if len(sc.Prompt) != n {
				t.Fatalf("the job's prompt has %d tokens, want %d", len(sc.Prompt), n)
			}
			m := manifest(t, sc, pages)
			snd, err := handoff.NewSender(ev.nc, m, pages, handoff.SenderConfig{StartTimeout: 5 * time.Second, IdleTimeout: 5 * time.Second})
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
			raw, err := m.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			h := &queue.Handover{Job: *job, Manifest: raw, CachedTokens: tc.handed}
			if err := queue.PublishHandover(context.Background(), ev.js, h); err != nil {
				t.Fatal(err)
			}
			got := readFrames(t, sub)
			if err := <-serveErr; err != nil {
				t.Errorf("sender's Serve: %v", err)
			}
			if got.last.Kind != queue.KindFinal {
				t.Fatalf("last frame %+v, want final", got.last)
			}
			if u := got.last.Usage; u.PromptTokens != n || u.CachedTokens != tc.want {
				t.Errorf("usage %+v for %d handed cached tokens; want %d cached of %d prompt tokens", u, tc.handed, tc.want, n)
			}
			wantUsageEvent(t, usage, job, n, tc.want)
			checkBaseline(t, de, src.e)
		})
	}
}

// wantUsageEvent waits for job's one usage event and checks its prompt and
// cached token counts, and its price: the cached tokens at the job's cached
// rate (price.Default's without job rates), the rest at the prompt rate.
func wantUsageEvent(t *testing.T, usage *usageCounter, job *queue.Job, prompt, cached int) {
	t.Helper()
	testkit.Poll(t, 5*time.Second, func() error {
		got := usage.get(job.ID)
		if len(got) != 1 {
			return fmt.Errorf("%d usage events for %s, want 1", len(got), job.ID)
		}
		u := got[0]
		if u.PromptTokens != prompt || u.CachedTokens != cached {
			t.Errorf("usage event %+v: %d cached of %d prompt tokens, want %d of %d", u, u.CachedTokens, u.PromptTokens, cached, prompt)
		}
		rates := price.Default() // the worker's rates for a job without its own
		if job.Rates != nil {
			rates = *job.Rates
		}
		want := price.Micro(rates, price.Usage{PromptTokens: prompt, CachedTokens: cached, CompletionTokens: u.CompletionTokens})
		if u.MicroNeurons != want {
			t.Errorf("usage event costs %d micro-neurons, want %d (%d cached tokens at the cached rate)", u.MicroNeurons, want, cached)
		}
		return nil
	})
}

// cacheRates price a cached prompt token at a tenth of an uncached one, so a
// usage event billed without its cached share costs visibly more.
var cacheRates = queue.Rates{Prompt: 1000, CachedPrompt: 100, Completion: 10000}

// jobFor is newJob for tenant, greedy, 24 tokens, at cacheRates, with the
// prefix cache on or off.
func jobFor(t *testing.T, prompt, tenant string, cachePrefix bool) *queue.Job {
	j := newJob(t, prompt, 24)
	j.Tenant, j.CachePrefix = tenant, cachePrefix
	r := cacheRates
	j.Rates = &r
	return j
}

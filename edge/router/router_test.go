package router

import (
	"encoding/json"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bulkhead-ai/bulkhead/models/testkit"
	"github.com/bulkhead-ai/bulkhead/models/testkit/promtest"
	"github.com/bulkhead-ai/bulkhead/queue"
	"github.com/bulkhead-ai/bulkhead/queue/queuetest"
)

// TestMain fails the run if goroutines outlive the tests.
func TestMain(m *testing.M) { testkit.Main(m) }

const model = "@cf/test/m"

// fleet is a Router on a fake clock, fed announcements directly.
type fleet struct {
	t   *testing.T
	r   *Router
	now time.Time
}

func newFleet(t *testing.T) *fleet {
	f := &fleet{t: t, r: newRouter(Config{}), now: time.Unix(1_000_000, 0)}
	f.r.now = func() time.Time { return f.now }
	return f
}

func (f *fleet) status(st queue.WorkerStatus) {
	f.t.Helper()
	if st.MaxBatch == 0 {
		st.MaxBatch, st.Pages, st.FreePages, st.PageSize = 16, 100, 100, 16
	}
	b, err := json.Marshal(st)
	if err != nil {
		f.t.Fatal(err)
	}
	f.r.status(queue.ModelToken(model), b)
}

func (f *fleet) prefix(worker, tenant, prompt string) {
	f.t.Helper()
	b, err := json.Marshal(queue.PrefixNotice{Worker: worker, Tenant: queue.TenantToken(tenant), Keys: queue.PrefixKeys(tenant, prompt)})
	if err != nil {
		f.t.Fatal(err)
	}
	f.r.prefix(queue.ModelToken(model), b)
}

func (f *fleet) live(ids ...string) {
	for _, id := range ids {
		f.status(queue.WorkerStatus{Worker: id})
	}
}

// conversation is a prompt of n blocks, distinct per name.
func conversation(name string, n int) string {
	return strings.Repeat(name+strings.Repeat(".", queue.PrefixBlock-len(name)), n)
}

// TestRoute: each rule of Route, in the order it applies.
func TestRoute(t *testing.T) {
	conv := conversation("alpha", 8)
	for _, tc := range []struct {
		name    string
		setup   func(f *fleet)
		tenant  string
		session string
		prompt  string
		want    Decision
	}{
		{"no worker announced", func(f *fleet) {}, "a", "", conv, Decision{Kind: KindFallback}},
		{"one live worker: the shared queue", func(f *fleet) { f.live("w1"); f.prefix("w1", "a", conv) }, "a", "", conv, Decision{Kind: KindLoad}},
		{"the longest prefix", func(f *fleet) {
			f.live("w1", "w2", "w3")
			f.prefix("w1", "a", conv[:4*queue.PrefixBlock])
			f.prefix("w2", "a", conv[:6*queue.PrefixBlock])
		}, "a", "", conv, Decision{"w2", KindPrefix}},
		{"a prefix under half the prompt", func(f *fleet) {
			f.live("w1", "w2")
			f.prefix("w1", "a", conv[:3*queue.PrefixBlock])
		}, "a", "", conv, Decision{Kind: KindLoad}},
		{"a prefix of half the prompt", func(f *fleet) {
			f.live("w1", "w2")
			f.prefix("w1", "a", conv[:4*queue.PrefixBlock])
		}, "a", "", conv, Decision{"w1", KindPrefix}},
		{"a prefix shorter than MinPrefixKeys", func(f *fleet) {
			f.live("w1", "w2")
			f.prefix("w1", "a", conv[:queue.PrefixBlock])
		}, "a", "", conv, Decision{Kind: KindLoad}},
		{"another tenant's prefix never matches", func(f *fleet) {
			f.live("w1", "w2")
			f.prefix("w1", "b", conv)
		}, "a", "", conv, Decision{Kind: KindLoad}},
		{"the prefix's worker overloaded: the next longest", func(f *fleet) {
			f.live("w1", "w3")
			f.status(queue.WorkerStatus{Worker: "w2", Running: 16, Waiting: 8})
			f.prefix("w1", "a", conv[:5*queue.PrefixBlock])
			f.prefix("w2", "a", conv)
		}, "a", "", conv, Decision{"w1", KindPrefix}},
		{"the prefix's worker draining", func(f *fleet) {
			f.live("w1")
			f.status(queue.WorkerStatus{Worker: "w2", Draining: true})
			f.status(queue.WorkerStatus{Worker: "w3"})
			f.prefix("w2", "a", conv)
		}, "a", "", conv, Decision{Kind: KindLoad}},
		{"the prefix's worker silent past PeerTimeout", func(f *fleet) {
			f.live("w2")
			f.prefix("w2", "a", conv)
			f.now = f.now.Add(queue.PeerTimeout + time.Millisecond)
			f.live("w1", "w3")
		}, "a", "", conv, Decision{Kind: KindLoad}},
		{"a new session: the least loaded", func(f *fleet) {
			f.status(queue.WorkerStatus{Worker: "w1", Running: 4})
			f.status(queue.WorkerStatus{Worker: "w2", Running: 1})
			f.status(queue.WorkerStatus{Worker: "w3", Running: 2})
		}, "a", "s1", conv, Decision{"w2", KindLoad}},
		{"a session's worker, over the prefix", func(f *fleet) {
			f.live("w1", "w2")
			f.r.Route(model, "a", "s1", "") // both idle: w1, the smaller id
			f.prefix("w2", "a", conv)
		}, "a", "s1", conv, Decision{"w1", KindAffinity}},
		{"another tenant's session id", func(f *fleet) {
			f.live("w1", "w2")
			f.status(queue.WorkerStatus{Worker: "w1", Running: 3})
			f.r.Route(model, "a", "s1", "")                        // a's s1 -> w2, the least loaded
			f.status(queue.WorkerStatus{Worker: "w2", Running: 5}) // now w1 is
		}, "b", "s1", "", Decision{"w1", KindLoad}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFleet(t)
			tc.setup(f)
			if got := f.r.Route(model, tc.tenant, tc.session, tc.prompt); got != tc.want {
				t.Errorf("Route = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestSessionMovesOn: a session whose worker dies goes to another worker
// within PeerTimeout, and stays there.
func TestSessionMovesOn(t *testing.T) {
	f := newFleet(t)
	f.live("w1", "w2", "w3")
	first := f.r.Route(model, "a", "chat-1", "")
	if first.Worker == "" {
		t.Fatalf("a session's first job went to %+v, want a worker", first)
	}
	for range 3 {
		if d := f.r.Route(model, "a", "chat-1", ""); d != (Decision{first.Worker, KindAffinity}) {
			t.Fatalf("the session's next job went to %+v, want %s by affinity", d, first.Worker)
		}
	}
	// first stops announcing; the others go on.
	for step := time.Duration(0); step <= queue.PeerTimeout; step += queue.StatusEvery {
		f.now = f.now.Add(queue.StatusEvery)
		for _, id := range []string{"w1", "w2", "w3"} {
			if id != first.Worker {
				f.live(id)
			}
		}
	}
	moved := f.r.Route(model, "a", "chat-1", "")
	if moved.Worker == "" || moved.Worker == first.Worker {
		t.Fatalf("after %s went silent for %v the session went to %+v", first.Worker, queue.PeerTimeout+queue.StatusEvery, moved)
	}
	if d := f.r.Route(model, "a", "chat-1", ""); d != (Decision{moved.Worker, KindAffinity}) {
		t.Fatalf("the moved session's next job went to %+v, want %s", d, moved.Worker)
	}
}

// TestRoutedCountsUntilAnnounced: jobs routed to a worker count as its load
// until its next announcement, so a burst of new sessions spreads.
func TestRoutedCountsUntilAnnounced(t *testing.T) {
	f := newFleet(t)
	f.live("w1", "w2", "w3", "w4")
	seen := map[string]int{}
	for i := range 8 {
		seen[f.r.Route(model, "a", "s"+string(rune('a'+i)), "").Worker]++
	}
	if len(seen) != 4 || seen["w1"] != 2 {
		t.Errorf("8 new sessions on 4 idle workers went %v, want 2 each", seen)
	}
}

// TestLRU: the bound holds and recently used entries survive.
func TestLRU(t *testing.T) {
	l := newLRU[int, int](10)
	for i := range 100 {
		l.put(i, i)
		if _, ok := l.get(0); !ok {
			t.Fatalf("entry 0, used at every step, forgotten after %d puts", i)
		}
	}
	if n := len(l.cur) + len(l.old); n > 10 {
		t.Errorf("%d entries kept, bound 10", n)
	}
	if _, ok := l.get(50); ok {
		t.Errorf("entry 50, unused since, still kept after 49 more puts")
	}
}

// TestRouterListens: a Router on a real NATS server learns workers and
// prefixes from their announcements, and ignores malformed ones.
func TestRouterListens(t *testing.T) {
	srv := queuetest.Server(t)
	nc := queuetest.Conn(t, srv.ClientURL())
	r, err := New(nc, Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	conv := conversation("beta", 4)
	pub := func(subject string, v any) {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if err := nc.Publish(subject, b); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Publish(queue.StatusSubject(model), []byte("{not json")); err != nil {
		t.Fatal(err)
	}
	pub(queue.StatusSubject(model), queue.WorkerStatus{Worker: "w1", Running: -1})
	for _, id := range []string{"w1", "w2"} {
		pub(queue.StatusSubject(model), queue.WorkerStatus{Worker: id, MaxBatch: 16, Pages: 10, FreePages: 10, PageSize: 16})
	}
	testkit.Poll(t, 5*time.Second, testkit.Cond("two workers announced", func() bool { return len(r.Workers(model)) == 2 }))
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(r.Collector([]string{model, "other"}))
	got := map[string]float64{}
	for _, series := range promtest.Gather(t, reg) {
		got[series.Name+" "+series.Labels["model"]] = series.Value
	}
	if want := map[string]float64{"bulkhead_edge_routing_workers " + model: 2, "bulkhead_edge_routing_workers other": 0}; !maps.Equal(got, want) {
		t.Errorf("gathered %v, want %v", got, want)
	}
	pub(queue.PrefixSubject(model), queue.PrefixNotice{Worker: "w2", Tenant: queue.TenantToken("a"), Keys: queue.PrefixKeys("a", conv)})
	testkit.Poll(t, 5*time.Second, testkit.Cond("routed by w2's prefix", func() bool {
		return r.Route(model, "a", "", conv) == Decision{"w2", KindPrefix}
	}))
}

// BenchmarkRoute is the router's share of a request's latency: a 4 KiB
// prompt of a tenant with 1,000 conversations announced over 4 workers.
func BenchmarkRoute(b *testing.B) {
	r := newRouter(Config{})
	for i := range 4 {
		st, _ := json.Marshal(queue.WorkerStatus{Worker: fmt.Sprint("w", i), MaxBatch: 16, Pages: 100, FreePages: 100, PageSize: 16})
		r.status(queue.ModelToken(model), st)
	}
	prompts := make([]string, 1000)
	for i := range prompts {
		prompts[i] = conversation(fmt.Sprint("conversation ", i), 64)
		n, _ := json.Marshal(queue.PrefixNotice{Worker: fmt.Sprint("w", i%4), Tenant: queue.TenantToken("a"), Keys: queue.PrefixKeys("a", prompts[i][:48*queue.PrefixBlock])})
		r.prefix(queue.ModelToken(model), n)
	}
	i := 0
	for b.Loop() {
		if i%16 == 0 { // the workers announce themselves again
			for w := range 4 {
				st, _ := json.Marshal(queue.WorkerStatus{Worker: fmt.Sprint("w", w), MaxBatch: 16, Pages: 100, FreePages: 100, PageSize: 16})
				r.status(queue.ModelToken(model), st)
			}
		}
		if d := r.Route(model, "a", "", prompts[i%len(prompts)]); d.Kind != KindPrefix {
			b.Fatalf("decision %+v", d)
		}
		i++
	}
}

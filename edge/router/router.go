package router

import (
	"crypto/sha256"
	"math"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/bulkhead-ai/bulkhead/queue"
)

// Decision kinds, the label of bulkhead_edge_routing_decisions_total.
const (
	KindAffinity = "affinity" // the session's worker (x-session-affinity)
	KindPrefix   = "prefix"   // the worker that announced the longest shared prefix
	KindLoad     = "load"     // no worker holds the prefix: the least loaded, or any (the shared queue)
	KindFallback = "fallback" // no worker of the model announced itself: the shared queue
)

// Decision is where a job goes: Worker is the id of the worker whose queue
// it is published on, or "" for the tenant's shared queue (any worker).
type Decision struct {
	Worker string
	Kind   string
}

// Config bounds what a Router remembers. Zero values take the defaults.
type Config struct {
	// MinPrefixKeys is the fewest leading blocks (queue.PrefixBlock bytes
	// each) a job must share with what a worker announced to be routed
	// there by prefix; default 2.
	MinPrefixKeys int
	// MinPrefixShare is the least share of the prompt's keys the shared
	// prefix must cover (SGLang's cache threshold): a new conversation
	// that shares only a system prompt with others is balanced by load,
	// not piled onto the worker holding that prompt; default 0.5.
	MinPrefixShare float64
	// Sessions bounds the remembered session affinities, per model; default
	// 100,000.
	Sessions int
	// Keys bounds the remembered prefix keys, per model; default 250,000
	// (16 MB of prompt text's leading blocks, about 40 MB of table).
	Keys int
}

func (c *Config) fill() {
	if c.MinPrefixKeys <= 0 {
		c.MinPrefixKeys = 2
	}
	if c.MinPrefixShare <= 0 {
		c.MinPrefixShare = 0.5
	}
	if c.Sessions <= 0 {
		c.Sessions = 100_000
	}
	if c.Keys <= 0 {
		c.Keys = 250_000
	}
}

// Router is the edge's routing table, fed by the workers' announcements.
// Its methods are safe for concurrent use.
type Router struct {
	cfg  Config
	subs []*nats.Subscription
	now  func() time.Time

	mu     sync.Mutex        // guards models
	models map[string]*table // by model token
}

// table is what a Router knows of one model.
type table struct {
	workers  map[string]*worker       // by worker id
	prefix   *lru[prefixKey, holders] // a tenant's prefix key -> the last workers to announce it
	sessions *lru[sessionKey, string] // a tenant's session -> its worker
}

// holders are the last workers to announce a prefix key, the latest first.
type holders [4]string

// with returns h with id first.
func (h holders) with(id string) holders {
	out := holders{id}
	n := 1
	for _, o := range h {
		if o != "" && o != id && n < len(out) {
			out[n] = o
			n++
		}
	}
	return out
}

type prefixKey struct {
	tenant string // tenant token
	key    uint64
}

type sessionKey struct {
	tenant string
	id     [sha256.Size]byte // a hash of the session id: any length costs the same
}

// worker is one worker's latest announcement, and the jobs routed to it
// since (the announcement does not count them yet).
type worker struct {
	st     queue.WorkerStatus
	seen   time.Time
	routed int
}

// New returns a Router that listens to the workers' announcements on nc
// until Close.
func New(nc *nats.Conn, cfg Config) (*Router, error) {
	r := newRouter(cfg)
	for subj, h := range map[string]nats.MsgHandler{
		queue.StatusPrefix + "*": func(m *nats.Msg) { r.status(m.Subject[len(queue.StatusPrefix):], m.Data) },
		queue.PrefixPrefix + "*": func(m *nats.Msg) { r.prefix(m.Subject[len(queue.PrefixPrefix):], m.Data) },
	} {
		sub, err := nc.Subscribe(subj, h)
		if err != nil {
			r.Close()
			return nil, err
		}
		r.subs = append(r.subs, sub)
	}
	return r, nil
}

func newRouter(cfg Config) *Router {
	cfg.fill()
	return &Router{cfg: cfg, now: time.Now, models: map[string]*table{}}
}

// Close stops listening.
func (r *Router) Close() {
	for _, s := range r.subs {
		s.Unsubscribe()
	}
}

// maxModels and maxWorkers bound the tables a Router keeps: announcements
// for more are dropped.
const (
	maxModels  = 1024
	maxWorkers = 4096
)

// tableOf returns model token tok's table, made on first use; r.mu is held.
func (r *Router) tableOf(tok string, create bool) *table {
	t := r.models[tok]
	if t == nil && create && len(r.models) < maxModels {
		t = &table{workers: map[string]*worker{}, prefix: newLRU[prefixKey, holders](r.cfg.Keys),
			sessions: newLRU[sessionKey, string](r.cfg.Sessions)}
		r.models[tok] = t
	}
	return t
}

func (r *Router) status(modelTok string, b []byte) {
	st, err := queue.DecodeStatus(b)
	if err != nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	t := r.tableOf(modelTok, true)
	if t == nil {
		return
	}
	now := r.now()
	if w := t.workers[st.Worker]; w != nil {
		w.st, w.seen, w.routed = *st, now, 0
		return
	}
	for id, w := range t.workers { // a new worker: forget those long gone
		if now.Sub(w.seen) > 10*queue.PeerTimeout {
			delete(t.workers, id)
		}
	}
	if len(t.workers) < maxWorkers {
		t.workers[st.Worker] = &worker{st: *st, seen: now}
	}
}

func (r *Router) prefix(modelTok string, b []byte) {
	n, err := queue.DecodePrefixNotice(b)
	if err != nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	t := r.tableOf(modelTok, true)
	if t == nil {
		return
	}
	for _, k := range n.Keys {
		pk := prefixKey{n.Tenant, k}
		h, _ := t.prefix.get(pk)
		t.prefix.put(pk, h.with(n.Worker))
	}
}

// Route chooses the queue of tenant's job for model: the worker of its
// session when given (session is the x-session-affinity header; scoped to
// the tenant), else the worker that announced the longest prefix of prompt
// for this tenant (at least MinPrefixKeys blocks and MinPrefixShare of the
// prompt), unless that worker is overloaded or gone; else, with a
// session, the least loaded worker (the session then sticks to it), and
// without one the tenant's shared queue, which the first worker with room
// takes. With fewer than two live workers every job takes the shared queue.
func (r *Router) Route(model, tenant, session, prompt string) Decision {
	keys := queue.PrefixKeys(tenant, prompt)
	tenantTok := queue.TenantToken(tenant)
	r.mu.Lock()
	defer r.mu.Unlock()
	t := r.tableOf(queue.ModelToken(model), false)
	if t == nil {
		return Decision{Kind: KindFallback}
	}
	live := t.live(r.now())
	switch {
	case len(live) == 0:
		return Decision{Kind: KindFallback}
	case len(live) == 1:
		return Decision{Kind: KindLoad}
	}
	var sk sessionKey
	if session != "" {
		sk = sessionKey{tenantTok, sha256.Sum256([]byte(session))}
		if id, ok := t.sessions.get(sk); ok && live[id] != nil && !live[id].overloaded() {
			return t.send(live[id], KindAffinity)
		}
	}
	d := Decision{Kind: KindLoad}
	least := max(r.cfg.MinPrefixKeys, int(math.Ceil(r.cfg.MinPrefixShare*float64(len(keys)))))
	if w := t.longest(live, tenantTok, keys, least); w != nil {
		d = t.send(w, KindPrefix)
	} else if session != "" {
		d = t.send(leastLoaded(live), KindLoad)
	}
	if session != "" {
		t.sessions.put(sk, d.Worker)
	}
	return d
}

// live are the workers heard within queue.PeerTimeout and not draining.
func (t *table) live(now time.Time) map[string]*worker {
	out := map[string]*worker{}
	for id, w := range t.workers {
		if !w.st.Draining && now.Sub(w.seen) <= queue.PeerTimeout {
			out[id] = w
		}
	}
	return out
}

// send counts a job routed to w and returns the decision.
func (t *table) send(w *worker, kind string) Decision {
	w.routed++
	return Decision{Worker: w.st.Worker, Kind: kind}
}

// longest is the live, not overloaded worker that announced the deepest of
// keys (at least least of them shared), or nil.
func (t *table) longest(live map[string]*worker, tenantTok string, keys []uint64, least int) *worker {
	var best *worker
	for i, k := range keys {
		h, ok := t.prefix.get(prefixKey{tenantTok, k})
		if !ok {
			break // keys chain: no worker holds a longer prefix either
		}
		if i+1 < least {
			continue
		}
		for _, id := range h {
			if w := live[id]; w != nil && !w.overloaded() {
				best = w
				break
			}
		}
	}
	return best
}

// overloaded reports a worker with half a batch or more waiting, counting
// the jobs routed to it since its announcement that its free batch slots
// could not start.
func (w *worker) overloaded() bool {
	waiting := w.st.Waiting + max(0, w.st.Running+w.routed-w.st.MaxBatch)
	return waiting >= max(1, w.st.MaxBatch/2)
}

// load is the worker's sequences, running, waiting and routed, per batch
// slot.
func (w *worker) load() float64 {
	return float64(w.st.Running+w.st.Waiting+w.routed) / float64(max(1, w.st.MaxBatch))
}

// leastLoaded is the live worker with the least load, then the most free KV
// pages, then the smallest id (so that equal workers are chosen alike).
func leastLoaded(live map[string]*worker) *worker {
	var best *worker
	for _, w := range live {
		if best == nil || w.load() < best.load() ||
			w.load() == best.load() && (w.st.FreePages > best.st.FreePages ||
				w.st.FreePages == best.st.FreePages && w.st.Worker < best.st.Worker) {
			best = w
		}
	}
	return best
}

// Workers is a snapshot of the live workers of model, for status pages.
func (r *Router) Workers(model string) []queue.WorkerStatus {
	r.mu.Lock()
	defer r.mu.Unlock()
	t := r.tableOf(queue.ModelToken(model), false)
	if t == nil {
		return nil
	}
	var out []queue.WorkerStatus
	for _, w := range t.live(r.now()) {
		out = append(out, w.st)
	}
	return out
}

// Collector is the router's Prometheus series for models:
// bulkhead_edge_routing_workers{model}, the live workers it may route to,
// read at scrape.
func (r *Router) Collector(models []string) prometheus.Collector {
	return collector{r: r, models: models, desc: prometheus.NewDesc("bulkhead_edge_routing_workers",
		"Workers of a model the edge's router heard from within the last 2 s and not draining: what it may route to.", []string{"model"}, nil)}
}

type collector struct {
	r      *Router
	models []string
	desc   *prometheus.Desc
}

func (c collector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c collector) Collect(ch chan<- prometheus.Metric) {
	for _, m := range c.models {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(len(c.r.Workers(m))), m)
	}
}

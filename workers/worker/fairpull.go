package worker

import (
	"cmp"
	"context"
	"errors"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/bulkhead-ai/bulkhead/queue"
	"github.com/bulkhead-ai/bulkhead/workers/engine"
)

// fairPull chooses, for one model, which tenant's queue the worker takes its
// next job from (queue.TenantQueues): the tenant with the smallest virtual
// token counter in the engine (a tenant the engine does not know ties with
// the smallest, as the engine lifts a returning tenant), then the one with
// fewer jobs on this worker, then the one pulled from longest ago. So a
// tenant's backlog in the stream never stands in front of another tenant's
// job: the other's queue is simply read first (docs/fairness.md).
//
// The Lookahead gate still bounds what waits in the engine, and the jobs of
// tenants already on the worker leave a reserve of its slots free, with one
// exception: a tenant with fewer jobs on this worker than the tenant with
// the most (none, say) may have one pulled past the gate and into the
// reserve, so that the engine's fair admission (and its preemption for a
// tenant under its share) sees it at once instead of after the jobs that
// filled the window end. Only the tenant holding the most waits for the
// gate: a light tenant's second job does not wait for its first to end
// while a flood holds the window (on a prefill worker, a job holds its slot
// until a decode worker took its hand-over; on a decode worker, until its
// stream ends).
type fairPull struct {
	w   *Worker
	q   *queue.TenantQueues
	eng *engine.Engine

	mu     sync.Mutex        // guards the fields below
	here   map[string]int    // tenant token -> jobs pulled here and not ended
	last   map[string]uint64 // tenant token -> sequence number of its latest pull
	seq    uint64
	tokens map[string]string // tenant id -> queue.TenantToken, memoized
}

func newFairPull(w *Worker, q *queue.TenantQueues, eng *engine.Engine) *fairPull {
	return &fairPull{w: w, q: q, eng: eng, here: map[string]int{}, last: map[string]uint64{}, tokens: map[string]string{}}
}

// run pulls jobs while a slot is free, until ctx ends; start runs each job
// and calls done when it has ended. Once the engine is broken it pulls no
// more and waits for ctx.
func (p *fairPull) run(ctx context.Context, slots chan struct{}, g gate, start func(msg jetstream.Msg, done func())) {
	poll := time.NewTicker(pullPoll)
	defer poll.Stop()
	var refreshing sync.WaitGroup
	defer refreshing.Wait()
	refreshing.Go(func() { p.refresh(ctx) })
	for {
		if err := g.broken(); err != nil {
			p.w.log.Error("engine broken; taking no more jobs for its model", "err", err)
			<-ctx.Done()
			return
		}
		msg, tok := p.next(ctx, slots, g, poll)
		if msg == nil {
			return
		}
		select {
		case slots <- struct{}{}: // free a moment ago; another model's loop may have taken it since
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			// Fetched as ctx ended: hand it back at once for another worker.
			if err := msg.Nak(); err != nil {
				p.w.log.Warn("handing a job back at shutdown", "err", err)
			}
			p.ended(tok)
			return
		}
		start(msg, func() { p.ended(tok) })
	}
}

// reserve is the share of the worker's slots (Concurrency) kept for tenants
// with no job on the worker: the jobs of tenants already there stop at the
// rest, so a flood that fills the Lookahead window does not also take every
// slot and leave a new tenant's job in the stream.
func reserve(slots chan struct{}) int { return max(1, cap(slots)/4) }

// next returns the next job and its tenant token, waiting for one; nil when
// ctx ends first.
func (p *fairPull) next(ctx context.Context, slots chan struct{}, g gate, poll *time.Ticker) (jetstream.Msg, string) {
	for ctx.Err() == nil {
		free := cap(slots) - len(slots)
		open := free > reserve(slots) && g.ready()
		failed := false
		if free > 0 {
			for _, tok := range p.order(p.q.Pending(), open) {
				msg, err := p.q.Fetch(ctx, tok)
				if err != nil {
					failed = true
					switch {
					case ctx.Err() != nil:
					case errors.Is(err, nats.ErrNoResponders):
						// A consumer just created on a replicated stream, or
						// one whose leader moves: usual, and brief.
						p.w.log.Debug("a tenant queue has no reachable leader yet; looking again after a back-off", "queue", tok)
					default:
						p.w.log.Warn("fetching jobs; looking again after a back-off", "queue", tok, "err", err)
					}
					continue
				}
				if msg != nil {
					p.pulled(tenantOf(tok))
					return msg, tenantOf(tok)
				}
			}
		}
		switch {
		case failed:
			// Do not spin on a broken connection: a queue whose fetch failed
			// rings the bell again after its back-off (TenantQueues.Fetch),
			// the others on their doorbells.
			select {
			case <-time.After(p.w.cfg.FetchWait):
			case <-p.q.Bell():
			case <-ctx.Done():
			}
		case open: // nothing queued for this model: wait for a doorbell
			if err := p.q.Wait(ctx); err != nil && ctx.Err() == nil {
				p.w.log.Warn("reading the tenant queues", "err", err)
			}
		default: // the window is full: wait for room, or a new tenant's bell
			select {
			case <-g.entered:
			case <-poll.C:
			case <-p.q.Bell():
			case <-ctx.Done():
			}
		}
	}
	return nil, ""
}

// refresh reads the stream's per-subject counts every busyRefresh (sooner
// when a peer said it drains), until ctx ends, beside the pull loop: a read
// of the stream takes a round trip to its leader, which a job whose doorbell
// rang meanwhile should not wait for.
func (p *fairPull) refresh(ctx context.Context) {
	t := time.NewTicker(busyRefresh / 10)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := p.q.RefreshIfOlder(ctx, busyRefresh); err != nil && ctx.Err() == nil {
			p.w.log.Warn("reading the tenant queues", "err", err)
		}
	}
}

// busyRefresh is how often a worker that does not wait for doorbells (it
// always has jobs to fetch) reads the stream's counts anyway, so that the
// routed queues of a worker that died are read within about
// queue.PeerTimeout plus this.
const busyRefresh = time.Second

// order sorts the pending queue keys (a tenant's shared queue, or its queue
// routed here or to a worker gone: queue.SplitRoute) in the order to try
// them, by their tenant; when the gate is closed (open false) only the
// queues of tenants with fewer jobs here than the tenant with the most (or
// none) are listed.
func (p *fairPull) order(pending []string, open bool) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !open {
		most := 0
		for _, n := range p.here {
			most = max(most, n)
		}
		pending = slices.DeleteFunc(pending, func(key string) bool {
			n := p.here[tenantOf(key)]
			return n > 0 && n >= most
		})
	}
	if len(pending) < 2 {
		return pending
	}
	counter := map[string]float64{}
	low := math.Inf(1)
	if p.eng != nil { // an encoder's server takes turns itself
		for tenant, s := range p.eng.Service() {
			tok := p.token(tenant)
			counter[tok] = s.Counter
			low = min(low, s.Counter)
		}
	}
	of := func(tok string) float64 {
		if c, ok := counter[tok]; ok {
			return c
		}
		return low // unknown to the engine: lifted to the smallest, as it would be
	}
	// Within a tenant, its routed queues come before its shared one: any
	// worker may take a shared job, a routed one was sent here.
	slices.SortFunc(pending, func(ka, kb string) int {
		a, b := tenantOf(ka), tenantOf(kb)
		return cmp.Or(cmp.Compare(of(a), of(b)), cmp.Compare(p.here[a], p.here[b]), cmp.Compare(p.last[a], p.last[b]),
			cmp.Compare(len(kb), len(ka)))
	})
	return pending
}

// tenantOf is the tenant token of a queue key.
func tenantOf(key string) string {
	t, _ := queue.SplitRoute(key)
	return t
}

// token is tenant's subject token; p.mu is held.
func (p *fairPull) token(tenant string) string {
	tok, ok := p.tokens[tenant]
	if !ok {
		if len(p.tokens) >= 4096 {
			clear(p.tokens)
		}
		tok = queue.TenantToken(tenant)
		p.tokens[tenant] = tok
	}
	return tok
}

func (p *fairPull) pulled(tok string) {
	p.mu.Lock()
	p.here[tok]++
	p.seq++
	p.last[tok] = p.seq
	p.mu.Unlock()
}

func (p *fairPull) ended(tok string) {
	p.mu.Lock()
	if p.here[tok]--; p.here[tok] <= 0 {
		delete(p.here, tok)
		delete(p.last, tok)
	}
	p.mu.Unlock()
}

package engine

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/bulkhead-ai/bulkhead/workers/kvcache"
)

// Fair scheduling across tenants, by virtual token counter (Sheng et al.,
// "Fairness in Serving Large Language Models", OSDI 2024).
//
// Each tenant has a counter of the service it received: PrefillCost per
// prompt token computed (charged when its sequence is admitted) plus
// DecodeCost per token generated (charged at the step), divided by the
// tenant's weight. Admission takes the waiting sequence of the tenant with
// the smallest counter (its earliest one). A tenant that becomes present
// (a sequence waiting or running) after being absent has its counter lifted
// to the smallest counter of the tenants already present, or, when none is,
// to the largest of those that just left: idle time earns no credit. A
// tenant counts as absent only once it has had nothing in the engine for
// presenceLinger, so the moment between one request ending and the next
// arriving does not erase what a saturating tenant is owed. A lone tenant is
// never held back (work-conserving).
//
// When the chosen sequence does not fit (no batch slot or too few free
// pages) and its tenant holds less than half its fair share of the engine,
// sequences of tenants over theirs are preempted to make room (see
// victims): their pages are freed, scrubbed like any freed page, and they
// wait again to recompute their prompt and output so far before decoding on.

// A preempted sequence, once admitted again, generates at least
// max(preemptQuantum, history/preemptAmortize) tokens before it can be
// preempted again: every time slice makes progress, and recomputing costs
// at most preemptAmortize prompt positions per token generated after it.
const (
	preemptQuantum  = 16
	preemptAmortize = 8
)

// presenceLinger is how long a tenant with nothing in the engine still
// counts as present: it is not lifted when it returns within it.
const presenceLinger = 100 * time.Millisecond

// maxIdleTenants bounds the counters kept for tenants with nothing in the
// engine; past it they are dropped (a returning tenant is lifted anyway).
const maxIdleTenants = 4096

// TenantService is the service one tenant received from an engine.
type TenantService struct {
	// PrefillTokens counts prompt tokens computed for the tenant (not those
	// attached from its prefix cache, nor those recomputed after a
	// preemption), charged when their sequence is admitted.
	PrefillTokens int64
	// DecodeTokens counts tokens generated for the tenant.
	DecodeTokens int64
	// Preempted counts the tenant's sequences preempted to make room.
	Preempted int64
	// Counter is the virtual token counter admission compares: weighted
	// service divided by the tenant's weight, lifted on each return.
	Counter float64
	// Weight is the weight of the tenant's latest request (default 1).
	Weight float64
}

// tenantState is one tenant's counter and the figures of the current
// admission round.
type tenantState struct {
	name string
	TenantService
	present bool      // in the engine at the last admission round, or lingering
	seen    uint64    // the last round it had a sequence waiting or running
	gone    time.Time // the first round it was seen with nothing in the engine; zero while it has something
	// Holdings in the current round, for the preemption rule.
	slots, pages int
}

// fairness is the engine's fair scheduler state. The Run goroutine changes it
// (admit, step); Service reads it from anywhere.
type fairness struct {
	prefillCost, decodeCost float64

	mu      sync.Mutex // guards tenants, present, floor, round; taken after Engine.mu
	tenants map[string]*tenantState
	present []*tenantState // tenants present (or lingering) at the last round
	floor   float64        // the counter a returning tenant is lifted to when no one is present
	round   uint64
}

func newFairness(cfg Config) *fairness {
	return &fairness{prefillCost: cfg.PrefillCost, decodeCost: cfg.DecodeCost, tenants: map[string]*tenantState{}}
}

// schedState is a sequence's part in the fair scheduler.
type schedState struct {
	tenant   *tenantState // set by observe
	preempts int          // times preempted
	// refill, after a preemption, is the number of positions (the whole
	// history then) to recompute before decoding resumes.
	refill int
	// protectUntil: generated tokens below this, it cannot be preempted.
	protectUntil int
	requeued     bool // in Engine.waiting after a preemption (not counted against QueueSize)
	published    bool // the prompt's pages went to the prefix cache
}

// target is the number of positions whose KV must be written before the
// sequence decodes: the prompt, or after a preemption its whole history.
func (s *sequence) target() int { return max(len(s.req.Prompt), s.sched.refill) }

// weight is the request's fair-share weight (0 means 1).
func (r *Request) weight() float64 {
	if r.Weight == 0 {
		return 1
	}
	return r.Weight
}

// checkWeight refuses a weight the scheduler cannot divide by.
func checkWeight(w float64) error {
	if w < 0 || math.IsNaN(w) || math.IsInf(w, 0) {
		return fmt.Errorf("%w: weight %v (want a finite number >= 0; 0 means 1)", ErrInvalidRequest, w)
	}
	return nil
}

// observe starts an admission round at now: it marks the tenants present (a
// sequence running or waiting), lifts the counters of those that just became
// present, and records each tenant's weight (its latest request's) and
// holdings.
func (f *fairness) observe(now time.Time, active, waiting []*sequence) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.round++
	var fresh, here []*tenantState
	see := func(s *sequence, running bool) {
		t := f.tenants[s.req.Owner.Namespace]
		if t == nil {
			t = &tenantState{name: s.req.Owner.Namespace}
			f.tenants[t.name] = t
		}
		if t.seen != f.round {
			t.seen, t.slots, t.pages = f.round, 0, 0
			here = append(here, t)
			if !t.present {
				fresh = append(fresh, t)
			}
		}
		t.Weight = s.req.weight()
		if running {
			t.slots++
			t.pages += ownPages(s.kv)
		}
		s.sched.tenant = t
	}
	for _, s := range active {
		see(s, true)
	}
	for _, s := range waiting {
		see(s, false)
	}
	fresh, lingering := f.settle(now, fresh)
	for _, t := range fresh {
		t.Counter = max(t.Counter, f.floor)
		t.present = true
	}
	f.present = append(here, lingering...)
	if len(f.tenants)-len(f.present) > maxIdleTenants {
		for name, t := range f.tenants {
			if !t.present {
				delete(f.tenants, name)
			}
		}
	}
}

// settle sorts the tenants present at the last round into those that stay,
// those that linger (nothing in the engine for less than presenceLinger)
// and those that left, adding to fresh the lingering ones back too late, and
// raises the floor: to the least counter among tenants that stay, or, if all
// left, to the greatest among those that left. Lingering tenants count for
// neither. It returns fresh and the lingering tenants. f.mu is held.
func (f *fairness) settle(now time.Time, fresh []*tenantState) ([]*tenantState, []*tenantState) {
	stay, left := math.Inf(1), math.Inf(-1)
	var lingering []*tenantState
	for _, t := range f.present {
		back := t.seen == f.round
		switch {
		case back && t.gone.IsZero():
			stay = min(stay, t.Counter)
		case back: // returns from lingering
			if now.Sub(t.gone) >= presenceLinger {
				t.present = false
				fresh = append(fresh, t)
			}
			t.gone = time.Time{}
		case t.gone.IsZero():
			t.gone = now
			lingering = append(lingering, t)
		case now.Sub(t.gone) < presenceLinger:
			lingering = append(lingering, t)
		default:
			left = max(left, t.Counter)
			t.present, t.gone = false, time.Time{}
		}
	}
	switch {
	case !math.IsInf(stay, 1):
		f.floor = max(f.floor, stay)
	case !math.IsInf(left, -1):
		f.floor = max(f.floor, left)
	}
	return fresh, lingering
}

// ownPages is the number of pages a sequence would free: those it holds
// that are not shared prefix-cache pages.
func ownPages(kv *kvcache.Sequence) int {
	if kv == nil {
		return 0
	}
	n := 0
	for i := range len(kv.Pages()) {
		if !kv.Shared(i) {
			n++
		}
	}
	return n
}

// pick returns the index in waiting of the next sequence to admit: the
// earliest one of the tenant with the smallest counter; between equal
// counters, the tenant running fewer sequences. observe must have run.
func (f *fairness) pick(waiting []*sequence) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	best := -1
	var bt *tenantState
	for i, s := range waiting {
		t := s.sched.tenant
		if bt == nil || t.Counter < bt.Counter || (t.Counter == bt.Counter && t.slots < bt.slots) {
			best, bt = i, t
		}
	}
	return best
}

// admitted charges a newly admitted sequence's prompt (the positions it will
// compute) to its tenant and counts its holdings in the round. A sequence
// admitted again after a preemption is not charged again.
func (f *fairness) admitted(s *sequence) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := s.sched.tenant
	t.slots++
	t.pages += ownPages(s.kv)
	if s.sched.preempts > 0 {
		return
	}
	n := max(0, len(s.req.Prompt)-s.prefilled)
	t.PrefillTokens += int64(n)
	t.Counter += f.prefillCost * float64(n) / t.Weight
}

// decoded charges n generated tokens to s's tenant.
func (f *fairness) decoded(s *sequence, n int) {
	if n == 0 || s.sched.tenant == nil {
		return
	}
	f.mu.Lock()
	t := s.sched.tenant
	t.DecodeTokens += int64(n)
	t.Counter += f.decodeCost * float64(n) / t.Weight
	f.mu.Unlock()
}

// room is what a candidate needs beyond what is free.
type room struct {
	slots, pages int // still to free
	needPages    int // pages the candidate reserves
}

// victims chooses the running sequences to preempt so that cand can be
// admitted, or returns nil when cand must wait. Preemption is allowed only
// when cand's tenant holds less than half its fair share of the engine now
// and no more than its fair share once cand is admitted (a share is the
// tenant's weight over the present tenants' total weight, measured on the
// dominant resource: batch slots or KV pages). Smaller imbalances are left
// to admission order, which corrects them as sequences end without the
// waste of recomputing. Each victim is the latest
// admitted preemptable sequence of the tenant furthest over its own fair
// share that has received at least as much service as cand's tenant
// (counter); a sequence preempted before that has not yet generated its
// quantum since (protectUntil) is never taken. A sequence resumed from
// imported KV is taken like any other: it recomputes its history here.
func (f *fairness) victims(cand *sequence, active []*sequence, need room, maxBatch, totalPages int) []*sequence {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := cand.sched.tenant
	var weights float64
	for _, t := range f.present {
		if t.seen == f.round {
			weights += t.Weight
		}
	}
	share := func(t *tenantState, slots, pages int) float64 {
		return max(float64(slots)/float64(maxBatch), float64(pages)/float64(totalPages))
	}
	const eps = 1e-9
	fc := c.Weight / weights
	if share(c, c.slots, c.pages) > fc/2+eps || share(c, c.slots+1, c.pages+need.needPages) > fc+eps {
		return nil
	}
	slots, pages := map[*tenantState]int{}, map[*tenantState]int{}
	taken := map[*sequence]bool{}
	var out []*sequence
	for need.slots > 0 || need.pages > 0 {
		var v *sequence
		over := eps
		for i := len(active) - 1; i >= 0; i-- {
			s := active[i]
			t := s.sched.tenant
			if t == c || taken[s] || !s.preemptable() || t.Counter < c.Counter {
				continue
			}
			o := share(t, t.slots-slots[t], t.pages-pages[t]) - t.Weight/weights
			if o > over {
				v, over = s, o
			}
		}
		if v == nil {
			return nil
		}
		t, own := v.sched.tenant, ownPages(v.kv)
		taken[v] = true
		slots[t]++
		pages[t] += own
		need.slots--
		need.pages -= own
		out = append(out, v)
	}
	return out
}

// preemptable reports whether s may be preempted now.
func (s *sequence) preemptable() bool {
	return !s.ended && s.kv != nil && s.finished == "" && s.failed == nil &&
		s.generated >= s.sched.protectUntil && s.cancelErr() == nil
}

// preempt frees s's KV (scrubbed per the pool's policy, like any freed page)
// and resets it to recompute its whole history when admitted again.
func (f *fairness) preempt(s *sequence) {
	own := ownPages(s.kv)
	s.kv.Free()
	s.kv = nil
	s.prefilled = 0
	s.sched.preempts++
	s.sched.refill = len(s.history)
	s.sched.protectUntil = s.generated + max(preemptQuantum, len(s.history)/preemptAmortize)
	f.mu.Lock()
	t := s.sched.tenant
	t.Preempted++
	t.slots--
	t.pages -= own
	f.mu.Unlock()
}

// Service returns a snapshot of the service each tenant received, by
// namespace: the tenants present now and those seen before (up to a bound on
// idle ones). Metrics aggregate it; billing reads it per tenant.
func (e *Engine) Service() map[string]TenantService {
	f := e.fair
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[string]TenantService, len(f.tenants))
	for name, t := range f.tenants {
		out[name] = t.TenantService
	}
	return out
}

// admit moves waiting requests into the batch, fairly across tenants (see
// the top of this file), while there is room in the batch and in the KV pool,
// preempting sequences of tenants over their fair share when that makes room
// for one under it. The chosen sequence that neither fits nor can make room
// blocks the others, so large requests are not starved.
func (e *Engine) admit(active []*sequence) []*sequence {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.dropCancelled()
	if len(e.waiting) == 0 {
		return active
	}
	e.fair.observe(time.Now(), active, e.waiting)
	for len(e.waiting) > 0 {
		var ok bool
		if active, ok = e.admitNext(active); !ok {
			break
		}
	}
	return e.admitHolders(active)
}

// admitHolders admits, while the batch has room, the waiting sequences that
// hold their KV already (imported for a Resume) and need only a batch slot.
// They never wait behind a blocked head: the pages it waits for may be
// theirs, which they give back only by running to their end. e.mu is held.
func (e *Engine) admitHolders(active []*sequence) []*sequence {
	for i := 0; i < len(e.waiting) && len(active) < e.cfg.MaxBatch; {
		s := e.waiting[i]
		if s.kv == nil || s.reservation {
			i++
			continue
		}
		e.unwait(i)
		e.fair.admitted(s)
		active = append(active, s)
	}
	return active
}

// admitNext admits the waiting sequence fairness picks, preempting for it
// if it may; it reports false when that sequence must wait (then so do the
// others). e.mu is held.
func (e *Engine) admitNext(active []*sequence) ([]*sequence, bool) {
	i := e.fair.pick(e.waiting)
	s := e.waiting[i]
	for {
		fits, err := e.place(s, active)
		if err != nil {
			e.unwait(i)
			s.finish(Event{Err: fmt.Errorf("engine: reserving KV: %w", err)})
			return active, true
		}
		if fits && s.reservation {
			e.unwait(i)
			s.finish(Event{Done: true, Finish: finishReserved}) // the KV goes to Reserve's caller
			return active, true
		}
		if fits {
			e.unwait(i)
			e.fair.admitted(s)
			return append(active, s), true
		}
		need := room{slots: len(active) + 1 - e.cfg.MaxBatch}
		if s.reservation {
			need.slots = 0 // it takes no batch slot
		}
		if s.kv == nil {
			need.needPages = kvcache.PagesForTokens(s.reserve(), e.kv.PageSize())
			need.pages = need.needPages - e.kv.FreePages()
		}
		victims := e.fair.victims(s, active, need, e.cfg.MaxBatch, e.kv.TotalPages())
		if victims == nil {
			return active, false
		}
		// The victims go to the head of the queue: s moves back by as many.
		active = e.preempt(active, victims)
		i += len(victims)
	}
}

// place reserves s's KV if it has none yet (a resumed sequence arrives with
// its KV) and reports whether s can join the batch now. An error ends s: its
// reservation failed for a reason waiting cannot fix.
func (e *Engine) place(s *sequence, active []*sequence) (bool, error) {
	if len(active) >= e.cfg.MaxBatch && !s.reservation {
		return false, nil
	}
	if s.kv != nil {
		return true, nil
	}
	kv, err := e.reserve(s)
	if err != nil {
		// The request fits an empty pool (check made sure), so while anyone
		// holds pages, waiting will get it in: running sequences, and
		// prefilled or imported ones held by callers.
		if errors.Is(err, kvcache.ErrPoolExhausted) && (len(active) > 0 || e.kv.UsedPages() > 0) {
			return false, nil
		}
		return false, err
	}
	s.kv = kv
	return true, nil
}

// preempt takes victims out of the batch and puts them at the head of the
// wait queue, in their admission order. e.mu is held.
func (e *Engine) preempt(active []*sequence, victims []*sequence) []*sequence {
	out := make([]*sequence, 0, len(victims)+len(e.waiting))
	kept := active[:0]
	for _, s := range active {
		if !contains(victims, s) {
			kept = append(kept, s)
			continue
		}
		e.fair.preempt(s)
		s.sched.requeued = true
		e.requeued++
		out = append(out, s)
	}
	clear(active[len(kept):])
	e.waiting = append(out, e.waiting...)
	return kept
}

func contains(list []*sequence, s *sequence) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// unwait removes e.waiting[i], keeping the order. e.mu is held.
func (e *Engine) unwait(i int) {
	s := e.waiting[i]
	if s.sched.requeued {
		s.sched.requeued = false
		e.requeued--
	}
	copy(e.waiting[i:], e.waiting[i+1:])
	e.waiting[len(e.waiting)-1] = nil
	e.waiting = e.waiting[:len(e.waiting)-1]
}

// dropCancelled ends the waiting requests whose context is done, wherever
// they are in line. e.mu is held.
func (e *Engine) dropCancelled() {
	for i := 0; i < len(e.waiting); {
		s := e.waiting[i]
		if err := s.cancelErr(); err != nil {
			e.unwait(i)
			s.finish(Event{Err: err})
			continue
		}
		i++
	}
}

package queue

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// LiveModels is the set of models that have at least one live worker, or a
// worker loading them, as the capacity bucket says (WatchCapacity): the edge
// refuses a job for any other model at once instead of letting it wait in
// the shared stream for a worker that is not there. A model being loaded is
// served: its worker takes the queued jobs once it has loaded it. A model
// never seen counts as pending for a grace period after the set is made, so
// that an edge starting beside its workers, before they have published
// their records, can wait for them; once a model has been seen, or the
// grace period is over, only its live and loading workers count.
type LiveModels struct {
	mu      sync.RWMutex             // guards models, loading, seen, changed and lost
	models  map[string]int           // name → smallest live window
	loading map[string]bool          // models a worker is loading
	seen    map[string]bool          // models that have had a live or loading worker since start
	changed chan struct{}            // closed (and replaced) by each Set
	lost    map[string]chan struct{} // Lost's channels, closed by the Set that leaves their model unserved
	since   time.Time                // when it was made; read-only
	grace   time.Duration            // read-only
}

var _ Liveness = (*LiveModels)(nil)

// NewLiveModels returns an empty set whose grace period starts now.
func NewLiveModels(grace time.Duration) *LiveModels {
	return &LiveModels{models: map[string]int{}, loading: map[string]bool{}, seen: map[string]bool{},
		changed: make(chan struct{}), lost: map[string]chan struct{}{}, since: time.Now(), grace: grace}
}

// Set replaces the set with f (WatchCapacity's apply argument).
func (l *LiveModels) Set(f Fleet) {
	m := make(map[string]int, len(f.Windows))
	for k, v := range f.Windows {
		m[k] = v
	}
	loading := make(map[string]bool, len(f.Loading))
	for k, v := range f.Loading {
		loading[k] = v
	}
	l.mu.Lock()
	l.models, l.loading = m, loading
	for k := range m {
		l.seen[k] = true
	}
	for k := range loading {
		l.seen[k] = true
	}
	for k, ch := range l.lost {
		if _, ok := m[k]; !ok && !loading[k] {
			close(ch)
			delete(l.lost, k)
		}
	}
	close(l.changed)
	l.changed = make(chan struct{})
	l.mu.Unlock()
}

// Lost returns a channel that is closed once model has no live or loading
// worker: at once if it has none now (a model never seen, within the grace
// period, counts as served). A job waiting in the stream for the model ends
// then (Replies.Next), since no worker is left to take it.
func (l *LiveModels) Lost(model string) <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.models[model]; !ok && !l.loading[model] && (l.seen[model] || time.Since(l.since) >= l.grace) {
		ch := make(chan struct{})
		close(ch)
		return ch
	}
	ch, ok := l.lost[model]
	if !ok {
		ch = make(chan struct{})
		l.lost[model] = ch
	}
	return ch
}

// Live reports whether model has a live or loading worker, or has never had
// one and the grace period is not over.
func (l *LiveModels) Live(model string) bool {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if _, ok := l.models[model]; ok || l.loading[model] {
		return true
	}
	return !l.seen[model] && time.Since(l.since) < l.grace
}

// Await returns nil once model has a live worker or one loading it. A model
// that may still get its first one (never seen, within the grace period) is
// waited for when wait is set, until it has one, the grace period ends or
// ctx ends (ctx's cause); without wait it is ErrNoWorker at once, as is a
// model past the grace period that no worker serves or loads. Nothing is
// queued meanwhile: a job for a model nobody serves never takes a place in
// the shared stream.
func (l *LiveModels) Await(ctx context.Context, model string, wait bool) error {
	for {
		l.mu.RLock()
		_, live := l.models[model]
		live = live || l.loading[model]
		left := l.grace - time.Since(l.since)
		pending := !live && !l.seen[model] && left > 0
		changed := l.changed
		l.mu.RUnlock()
		switch {
		case live:
			return nil
		case !pending:
			return fmt.Errorf("%w: %s", ErrNoWorker, model)
		case !wait:
			return fmt.Errorf("%w: %s: no worker has announced it yet (workers may still be starting; retry in %v)",
				ErrNoWorker, model, left.Round(time.Second))
		}
		t := time.NewTimer(left)
		select {
		case <-changed:
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return context.Cause(ctx)
		}
		t.Stop()
	}
}

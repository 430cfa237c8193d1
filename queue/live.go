package queue

import (
	"sync"
	"time"
)

// LiveModels is the set of models that have at least one live worker, as the
// capacity bucket says (WatchCapacity): the edge refuses a job for any other
// model at once instead of letting it wait for a worker that is not there.
// A model never seen live counts as live for a grace period after the set
// is made, so that an edge starting beside its workers (still loading their
// models) queues their first jobs rather than refusing them; once a model
// has been seen, or the grace period is over, only its live workers count.
type LiveModels struct {
	mu     sync.RWMutex    // guards models and seen
	models map[string]int  // name → smallest live window
	seen   map[string]bool // models that have had a live worker since start
	since  time.Time       // when it was made; read-only
	grace  time.Duration   // read-only
}

var _ Liveness = (*LiveModels)(nil)

// NewLiveModels returns an empty set whose grace period starts now.
func NewLiveModels(grace time.Duration) *LiveModels {
	return &LiveModels{models: map[string]int{}, seen: map[string]bool{}, since: time.Now(), grace: grace}
}

// Set replaces the set with the models in minWindows (WatchCapacity's apply
// argument).
func (l *LiveModels) Set(minWindows map[string]int) {
	m := make(map[string]int, len(minWindows))
	for k, v := range minWindows {
		m[k] = v
	}
	l.mu.Lock()
	l.models = m
	for k := range m {
		l.seen[k] = true
	}
	l.mu.Unlock()
}

// Live reports whether model has a live worker, or has never had one and
// the grace period is not over.
func (l *LiveModels) Live(model string) bool {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if _, ok := l.models[model]; ok {
		return true
	}
	return !l.seen[model] && time.Since(l.since) < l.grace
}

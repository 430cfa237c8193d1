package edge

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/bulkhead-ai/bulkhead/models/catalog"
	"github.com/bulkhead-ai/bulkhead/queue"
)

// LiveGrace is how long after start an edge waits, for a synchronous
// request, for a model no worker has announced yet (workers starting beside
// it publish a record as soon as they reach NATS, loading or not; they
// republish every third of the bucket's TTL, so this covers them); after
// that, or once a worker announced it, a model that no worker serves or
// loads is refused at once (503 no_worker).
const LiveGrace = queue.DefaultCapacityTTL / 3

// FollowCapacity is the capacity-following policy: an edge advertises and
// admits by no more than its live workers can hold. It limits every catalog
// model's advertised window to the smallest window its live workers publish
// in the capacity bucket, from the current records (read before it returns)
// and on every change until ctx ends, and returns the set of models that
// have a live worker or one loading them (give it to
// queue.Client.WithLiveness; LiveGrace applies). A window that moves is logged. wait returns once the watch has
// stopped.
func FollowCapacity(ctx context.Context, log *slog.Logger, js jetstream.JetStream, cat *catalog.Catalog) (live *queue.LiveModels, wait func(), err error) {
	live = queue.NewLiveModels(LiveGrace)
	w, err := queue.WatchCapacity(ctx, js, func(f queue.Fleet) {
		live.Set(f)
		limitWindows(log, cat, f.Windows)
	})
	if err != nil {
		return nil, nil, fmt.Errorf("watching worker capacity: %w", err)
	}
	return live, w.Wait, nil
}

// limitWindows applies the live workers' smallest windows to cat.
func limitWindows(log *slog.Logger, cat *catalog.Catalog, minimums map[string]int) {
	for _, m := range cat.Models() {
		before := m.ContextWindow
		if err := cat.LimitContext(m.Name, minimums[m.Name]); err != nil {
			log.Error("limiting the context window", "model", m.Name, "err", err)
			continue
		}
		switch now, _ := cat.EffectiveContext(m.Name); {
		case now < before:
			log.Warn("advertised context window lowered to the smallest live worker's", "model", m.Name, "was", before, "now", now)
		case now > before:
			log.Info("advertised context window raised: the smaller workers are gone", "model", m.Name, "was", before, "now", now)
		}
	}
}

package worker

import (
	"context"
	"encoding/json"
	"time"

	"github.com/bulkhead-ai/bulkhead/queue"
	"github.com/bulkhead-ai/bulkhead/workers/engine"
)

// The worker's side of routing (docs/routing.md): it announces, per model,
// its load and KV pool every queue.StatusEvery, and the prefix keys of each
// job it takes with the prefix cache on, so that edges send a tenant's next
// job with the same prefix here. When it stops it says it drains, so edges
// route elsewhere at once and the other workers read its routed queues.

// status is the worker's announcement for one model.
func (w *Worker) status(eng *engine.Engine, draining bool) queue.WorkerStatus {
	st := eng.Stats()
	kv := eng.KV()
	return queue.WorkerStatus{
		Worker: w.cfg.ID, Draining: draining,
		Running: st.Running, Waiting: st.Waiting, MaxBatch: eng.MaxBatch(),
		// Two reads under two locks: a page freed and cached between them
		// could count twice.
		FreePages: min(kv.FreePages()+kv.PrefixStats().Idle, kv.TotalPages()), Pages: kv.TotalPages(), PageSize: kv.PageSize(),
	}
}

// announce publishes the status of every model in engines each
// queue.StatusEvery until ctx ends, then once more as draining.
func (w *Worker) announce(ctx context.Context, engines map[string]*engine.Engine) {
	tick := time.NewTicker(queue.StatusEvery)
	defer tick.Stop()
	for {
		draining := ctx.Err() != nil
		for model, eng := range engines {
			w.publish(queue.StatusSubject(model), w.status(eng, draining))
		}
		if draining {
			return
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
		}
	}
}

// announcePrefix tells the edges that this worker now holds (or is about to)
// the prefix of job's prompt in its tenant's cache.
func (w *Worker) announcePrefix(job *queue.Job) {
	if !job.CachePrefix || job.LoRA != nil {
		return // a prefix computed under an adapter is no hint for any other job's (docs/lora.md)
	}
	keys := queue.PrefixKeys(job.Tenant, job.Prompt)
	if len(keys) == 0 {
		return
	}
	w.publish(queue.PrefixSubject(job.Model), queue.PrefixNotice{Worker: w.cfg.ID, Tenant: queue.TenantToken(job.Tenant), Keys: keys})
}

// publish sends one announcement; a lost one costs at most a routing
// miss, so errors are only logged.
func (w *Worker) publish(subject string, v any) {
	b, err := json.Marshal(v)
	if err == nil {
		err = w.nc.Publish(subject, b)
	}
	if err != nil {
		w.log.Debug("routing announcement not sent", "subject", subject, "err", err)
	}
}

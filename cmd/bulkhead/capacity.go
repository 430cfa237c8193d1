package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/bulkhead-ai/bulkhead/models/catalog"
	"github.com/bulkhead-ai/bulkhead/queue"
	"github.com/bulkhead-ai/bulkhead/workers/engine"
	"github.com/bulkhead-ai/bulkhead/workers/kvcache"
)

// liveGrace is how long after start an edge queues jobs for a model no
// worker has announced yet (workers may still be loading it); after that, or
// once a worker announced it, a model without a live worker is refused at
// once.
const liveGrace = queue.DefaultCapacityTTL

// pageSize is the KV page size, in tokens, every engine the nodes build uses.
const pageSize = kvcache.DefaultPageSize

// errPoolTooSmall marks a KV pool that cannot hold one request at its model's
// advertised context window, on a node started without --clamp-context.
var errPoolTooSmall = errors.New("KV pool cannot hold one request at the advertised context window")

// poolError names the numbers behind errPoolTooSmall.
type poolError struct {
	Model    string
	Pages    int // whole pages the pool holds
	PageSize int // tokens per page
	Context  int // the advertised context window, in tokens
}

func (e *poolError) Error() string {
	return fmt.Sprintf("model %s: %v: the pool holds %d tokens (%d pages of %d) but the context window is %d tokens; "+
		"enlarge --kv-pool-tokens, lower --context, or pass --clamp-context to advertise %d",
		e.Model, errPoolTooSmall, e.Pages*e.PageSize, e.Pages, e.PageSize, e.Context, e.Pages*e.PageSize)
}

func (e *poolError) Unwrap() error { return errPoolTooSmall }

// poolPages returns the whole pages a model's KV pool holds: kvTokens rounded
// up to pages, else kvBytes split into pages of the model's shape (K and V,
// every layer, f16), else one full context window.
func poolPages(h engine.Hyper, kvTokens int, kvBytes int64, window int) (int, error) {
	switch {
	case kvTokens > 0:
		return kvcache.PagesForTokens(kvTokens, pageSize), nil
	case kvBytes > 0:
		per, err := kvcache.Config{Layers: h.Layers, KVHeads: h.KVHeads, HeadDim: h.HeadDim, PageSize: pageSize}.BytesPerPage()
		if err != nil {
			return 0, err
		}
		return int(kvBytes / per), nil
	}
	return kvcache.PagesForTokens(window, pageSize), nil
}

// fitContext checks that model cm's KV pool holds one request at the
// catalog's advertised window and returns the window its engine serves. A
// pool too small is a *poolError, unless e.clamp is set: then the catalog's
// window for the model is clamped to the pool (everything built on cat
// advertises the smaller window) and the clamp is logged at WARN.
func (e *engineFlags) fitContext(log *slog.Logger, cat *catalog.Catalog, cm *catalog.Model, h engine.Hyper) (int, error) {
	kvTokens, kvBytes := cm.KVPoolTokens, cm.KVPoolBytes
	if e.kvTokens > 0 {
		kvTokens, kvBytes = e.kvTokens, 0
	}
	pages, err := poolPages(h, kvTokens, kvBytes, cm.ContextWindow)
	if err != nil {
		return 0, fmt.Errorf("model %s: %w", cm.Name, err)
	}
	capacity := pages * pageSize
	if capacity >= cm.ContextWindow {
		return cm.ContextWindow, nil
	}
	if !e.clamp || capacity == 0 {
		return 0, &poolError{Model: cm.Name, Pages: pages, PageSize: pageSize, Context: cm.ContextWindow}
	}
	if err := cat.Clamp(cm.Name, capacity); err != nil {
		return 0, err
	}
	log.Warn("KV pool smaller than the context window: advertising the pool's size (--clamp-context)",
		"model", cm.Name, "kv_pool_tokens", capacity, "pages", pages, "page_size", pageSize,
		"context_was", cm.ContextWindow, "context", capacity)
	return capacity, nil
}

// workerID names this worker process in the capacity bucket: host, process
// and a random suffix, so restarts and neighbours never share a record.
func workerID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "worker"
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}

// publishCapacity keeps each engine's context window published under id in
// the capacity bucket until ctx ends, then withdraws it. wait returns once the
// records are withdrawn.
func publishCapacity(ctx context.Context, log *slog.Logger, js jetstream.JetStream, id string, engines map[string]*engine.Engine) (wait func()) {
	windows := make(map[string]int, len(engines))
	for name, en := range engines {
		windows[name] = en.Context()
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		err := queue.KeepCapacity(ctx, js, id, windows, func(err error) { log.Warn("capacity record", "err", err) })
		if err != nil {
			log.Error("publishing context windows failed; edges will not see this worker's windows", "err", err)
		}
	})
	log.Info("publishing context windows", "worker", id, "windows", windows)
	return wg.Wait
}

// followCapacity limits every catalog model's advertised window to the
// smallest window its live workers publish, from the current records (read
// before it returns) and on every change until ctx ends, and keeps live (if
// not nil) to the models that have a live worker. wait returns once the
// watch has stopped.
func followCapacity(ctx context.Context, log *slog.Logger, js jetstream.JetStream, cat *catalog.Catalog, live *queue.LiveModels) (wait func(), err error) {
	w, err := queue.WatchCapacity(ctx, js, func(minimums map[string]int) {
		if live != nil {
			live.Set(minimums)
		}
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
	})
	if err != nil {
		return nil, fmt.Errorf("watching worker capacity: %w", err)
	}
	return w.Wait, nil
}

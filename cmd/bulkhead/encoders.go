package main

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"

	"github.com/bulkhead-ai/bulkhead/models/catalog"
	"github.com/bulkhead-ai/bulkhead/queue"
	"github.com/bulkhead-ai/bulkhead/workers/encoder"
	"github.com/bulkhead-ai/bulkhead/workers/kernels"
)

// encoders loads every encoder model of the catalog (the text-embeddings
// and text-classification tasks) and runs a server for each until stop. An
// encoder keeps no KV pool: it takes no share of the KV budget. Its window
// is its trained one (position embeddings); a model wider than a frame can
// carry is refused.
func (e *engineFlags) encoders(log *slog.Logger, cat *catalog.Catalog) (map[string]*encoder.Server, func(), error) {
	out := map[string]*encoder.Server{}
	var stops []func()
	stop := func() {
		for _, s := range slices.Backward(stops) {
			s()
		}
	}
	for _, cm := range cat.Models() {
		if !catalog.Encoder(cm.Task) {
			continue
		}
		m, err := encoder.Load(cm.Path)
		if err != nil {
			stop()
			return nil, nil, fmt.Errorf("model %s: %w", cm.Name, err)
		}
		stops = append(stops, func() { m.Close() })
		if m.Hyper.Embd > queue.MaxEmbedDims {
			stop()
			return nil, nil, fmt.Errorf("model %s: vectors of %d dimensions; at most %d are served", cm.Name, m.Hyper.Embd, queue.MaxEmbedDims)
		}
		pool := kernels.NewPool(e.threads)
		stops = append(stops, pool.Close)
		srv, err := encoder.NewServer(encoder.New(m, pool), encoder.ServerConfig{})
		if err != nil {
			stop()
			return nil, nil, fmt.Errorf("model %s: %w", cm.Name, err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		wg.Go(func() { srv.Run(ctx) })
		stops = append(stops, func() { cancel(); wg.Wait() })
		out[cm.Name] = srv
		log.Info("model ready", "model", cm.Name, "path", cm.Path, "task", cm.Task, "context", m.Hyper.Context,
			"dims", m.Hyper.Embd, "pooling", m.Hyper.Pooling.String())
	}
	return out, stop, nil
}

// generators counts the catalog's models that run on an engine.
func generators(cat *catalog.Catalog) int {
	n := 0
	for _, m := range cat.Models() {
		if !catalog.Encoder(m.Task) {
			n++
		}
	}
	return n
}

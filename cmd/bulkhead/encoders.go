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
	"github.com/bulkhead-ai/bulkhead/workers/engine"
	"github.com/bulkhead-ai/bulkhead/workers/kernels"
)

// encoders loads every model of the catalog's encoder tasks
// (text-embeddings, text-classification: bert files, and causal models with
// a pooling type) and runs a server for each until stop. They take no
// share of the KV budget (a causal one's pool holds one pass of
// passTokens); a model whose window is below the catalog's clamps it there;
// a model wider than a frame can carry is refused.
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
		pool := kernels.NewPool(e.threads)
		stops = append(stops, pool.Close)
		passer, info, closeModel, err := openPasser(cm, pool)
		if err != nil {
			stop()
			return nil, nil, fmt.Errorf("model %s: %w", cm.Name, err)
		}
		stops = append(stops, closeModel)
		if info.Dims > queue.MaxEmbedDims {
			stop()
			return nil, nil, fmt.Errorf("model %s: vectors of %d dimensions; at most %d are served", cm.Name, info.Dims, queue.MaxEmbedDims)
		}
		if info.Window < cm.ContextWindow {
			if err := cat.Clamp(cm.Name, info.Window); err != nil {
				stop()
				return nil, nil, err
			}
		}
		srv, err := encoder.NewServer(passer, info, encoder.ServerConfig{PassTokens: passTokens})
		if err != nil {
			stop()
			return nil, nil, fmt.Errorf("model %s: %w", cm.Name, err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		wg.Go(func() { srv.Run(ctx) })
		stops = append(stops, func() { cancel(); wg.Wait() })
		out[cm.Name] = srv
		log.Info("model ready", "model", cm.Name, "path", cm.Path, "task", cm.Task, "context", info.Window,
			"dims", info.Dims, "pooling", info.Pooling.String())
	}
	return out, stop, nil
}

// passTokens bounds an encoder model's passes: the inputs of several
// requests run together up to this many tokens. A causal embedding model's
// KV pool holds one pass, and its longest input is this or its context,
// the smaller.
const passTokens = 8192

// openPasser loads catalog model cm for its passes on pool: an encoder
// (bert), or a causal model with a pooling type (Qwen3-Embedding) on an
// engine.Embedder. closeModel releases the model's mapping.
func openPasser(cm *catalog.Model, pool *kernels.Pool) (p encoder.Passer, info encoder.Info, closeModel func(), err error) {
	if encoder.IsEncoder(cm.Arch) {
		m, err := encoder.Load(cm.Path)
		if err != nil {
			return nil, encoder.Info{}, nil, err
		}
		e := encoder.New(m, pool)
		return e, e.Info(), func() { m.Close() }, nil
	}
	m, err := engine.Load(cm.Path)
	if err != nil {
		return nil, encoder.Info{}, nil, err
	}
	e, err := engine.NewEmbedder(m, pool, 0, passTokens)
	if err != nil {
		m.Close()
		return nil, encoder.Info{}, nil, err
	}
	h := m.Hyper
	info = encoder.Info{Tokenizer: m.Tokenizer, Window: e.Window(), Vocab: h.Vocab, Dims: h.Embd, Pooling: encoder.Pooling(h.Pooling)}
	return e, info, func() { m.Close() }, nil
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

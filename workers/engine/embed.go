package engine

import (
	"errors"
	"fmt"
	"sync"

	"github.com/bulkhead-ai/bulkhead/workers/kernels"
	"github.com/bulkhead-ai/bulkhead/workers/kvcache"
)

// Pooling types of a causal embedding model, numbered as llama.cpp's
// <arch>.pooling_type.
const (
	PoolMean = 1
	PoolLast = 3
)

// Errors of an embedding pass.
var (
	ErrNoPooling   = errors.New("engine: the model names no pooling type for embeddings")
	ErrEmbedInput  = errors.New("engine: bad embedding input")
	ErrPassTooLong = errors.New("engine: inputs over the embedder's pass")
)

// Embedder computes embeddings with a causal model, as llama.cpp pools a
// decoder's hidden states for its embedding models (Qwen3-Embedding: last
// token): each input runs through the model on its own positions from 0
// with causal attention, the final norm is applied, and the last token's
// row (pooling last) or the mean of the rows (pooling mean) is the input's
// vector, not normalised. Its KV pool holds one pass and is scrubbed as
// each pass frees it; it has no prefix cache. Encode is safe for concurrent
// use; passes run one at a time.
type Embedder struct {
	m       *Model
	pool    *kernels.Pool
	kv      *kvcache.Pool
	pooling int
	window  int

	mu sync.Mutex
	fw *forward
}

// NewEmbedder builds an embedder of m computing on pool, pooling as the
// model's file says (Hyper.Pooling: PoolMean or PoolLast) unless pooling is
// not 0. Its passes hold at most passTokens tokens, which bounds the
// longest input too (the window: passTokens or the model's context, the
// smaller).
func NewEmbedder(m *Model, pool *kernels.Pool, pooling, passTokens int) (*Embedder, error) {
	if pooling == 0 {
		pooling = m.Hyper.Pooling
	}
	if pooling != PoolMean && pooling != PoolLast {
		return nil, fmt.Errorf("%w (pooling %d; want mean or last)", ErrNoPooling, pooling)
	}
	h := m.Hyper
	passTokens = max(passTokens, 1)
	window := min(h.Context, passTokens)
	kv, err := kvcache.New(kvcache.Config{
		Layers: h.Layers, KVHeads: h.KVHeads, HeadDim: h.HeadDim, Pages: (passTokens + kvcache.DefaultPageSize - 1) / kvcache.DefaultPageSize,
		Scrub: kvcache.ScrubOnFree, Kernels: m.kernels,
	})
	if err != nil {
		return nil, err
	}
	return &Embedder{m: m, pool: pool, kv: kv, pooling: pooling, window: window, fw: newForward(m, pool, kvRot{})}, nil
}

// Window is the longest input.
func (e *Embedder) Window() int { return e.window }

// PassTokens is the most tokens one pass holds.
func (e *Embedder) PassTokens() int { return e.kv.MaxTokens() }

// Check returns nil if ids can be encoded: not empty, within the window,
// every id in the vocabulary.
func (e *Embedder) Check(ids []int32) error {
	switch {
	case len(ids) == 0:
		return fmt.Errorf("%w: empty input", ErrEmbedInput)
	case len(ids) > e.window:
		return fmt.Errorf("%w: %d tokens, the window is %d", ErrContextLength, len(ids), e.window)
	}
	for _, id := range ids {
		if id < 0 || int(id) >= e.m.Hyper.Vocab {
			return fmt.Errorf("%w: token id %d outside vocabulary of %d", ErrEmbedInput, id, e.m.Hyper.Vocab)
		}
	}
	return nil
}

// Encode runs one pass over inputs and returns one vector per input, in
// order. Inputs do not attend to each other (each has its own KV
// sequence), so a vector does not depend on the other inputs of the pass.
func (e *Embedder) Encode(inputs [][]int32) ([][]float32, error) {
	total := 0
	for i, ids := range inputs {
		if err := e.Check(ids); err != nil {
			return nil, fmt.Errorf("input %d: %w", i, err)
		}
		total += len(ids)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if total > e.kv.MaxTokens() {
		return nil, fmt.Errorf("%w: %d tokens, a pass holds %d", ErrPassTooLong, total, e.kv.MaxTokens())
	}
	chunks := make([]*chunk, len(inputs))
	defer func() {
		for _, c := range chunks {
			if c != nil {
				c.seq.Free()
			}
		}
	}()
	for i, ids := range inputs {
		seq := e.kv.NewSequence(kvcache.Owner{Namespace: "embed", Request: fmt.Sprint(i)})
		if err := seq.Reserve(len(ids)); err != nil {
			seq.Free()
			return nil, err
		}
		chunks[i] = &chunk{seq: seq, tokens: ids}
	}
	e.fw.run(chunks)
	h := e.m.Hyper
	out := make([][]float32, len(inputs))
	row := 0
	norm := make([]float32, h.Embd)
	for i, c := range chunks {
		if c.err != nil {
			return nil, fmt.Errorf("input %d: %w", i, c.err)
		}
		v := make([]float32, h.Embd)
		n := len(c.tokens)
		if e.pooling == PoolLast {
			e.fw.ks.RMSNorm(v, e.fw.x[(row+n-1)*h.Embd:][:h.Embd], e.m.OutNorm, h.NormEps)
		} else {
			inv := 1 / float32(n)
			for j := range n {
				e.fw.ks.RMSNorm(norm, e.fw.x[(row+j)*h.Embd:][:h.Embd], e.m.OutNorm, h.NormEps)
				for d, x := range norm {
					v[d] += x * inv
				}
			}
		}
		out[i] = v
		row += n
	}
	return out, nil
}

package kvcache

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/bulkhead-ai/bulkhead/models/gguf"
)

// TestConcurrentPrefixCache runs goroutines of two tenants that attach,
// write, publish, read and free against one small pool whose cache is always
// under pressure. Prompts come from a tiny alphabet so blocks repeat. The KV
// row a worker writes at a position is a function of its tenant, the layer,
// the position and that position's token only, so any page it reads back,
// its own or attached, must hold exactly its tenant's rows for its tokens: a
// page of the other tenant, a page scrubbed or reused under it, or a block
// attached for other tokens shows up as a wrong value. Under -race it also
// proves the locking.
func TestConcurrentPrefixCache(t *testing.T) {
	cases := []struct {
		name string
		cfg  Config
	}{
		{"scrub", Config{Layers: 2, KVHeads: 1, HeadDim: 4, PageSize: 4, Pages: 20}},
		{"poison", Config{Layers: 2, KVHeads: 1, HeadDim: 4, PageSize: 4, Pages: 20, Poison: true}},
		{"never scrub", Config{Layers: 2, KVHeads: 1, HeadDim: 4, PageSize: 4, Pages: 20, Scrub: ScrubNever}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := newTestPool(t, tc.cfg)
			const workers, rounds = 6, 120
			errs := make(chan error, workers)
			var wg sync.WaitGroup
			for w := range workers {
				wg.Go(func() { errs <- prefixWorker(p, w, rounds) })
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					t.Error(err)
				}
			}
			st := p.PrefixStats()
			if st.Idle != st.Cached {
				t.Errorf("every sequence ended but %d of %d cached pages are referenced", st.Cached-st.Idle, st.Cached)
			}
			if st.Hits == 0 || st.Published == 0 {
				t.Errorf("the cache was never exercised: %+v", st)
			}
			if n := p.FlushPrefixes(); n != st.Cached {
				t.Errorf("flushed %d of %d", n, st.Cached)
			}
			if free, total := p.FreePages(), p.TotalPages(); free != total {
				t.Errorf("%d of %d pages free after the flush", free, total)
			}
			t.Logf("%+v", st)
		})
	}
}

// kvValue is the half-exact row value a worker of tenant writes at (layer,
// pos, j) for token tok (all small).
func kvValue(tenant, layer, pos, j int, tok int32) float32 {
	return float32(tenant*1024 + layer*512 + int(tok)*64 + pos*2 + j%2)
}

func prefixWorker(p *Pool, w, rounds int) error {
	rng := rand.New(rand.NewPCG(uint64(w), 11))
	tenant := w % 2
	kvDim := p.KVDim()
	k := make([]float32, kvDim)
	v := make([]float32, kvDim)
	for r := range rounds {
		n := 1 + rng.IntN(14)
		tokens := make([]int32, n)
		for i := range tokens {
			tokens[i] = int32(rng.IntN(2)) // few distinct blocks: many hits
		}
		s := p.NewSequence(Owner{Namespace: fmt.Sprintf("tenant-%d", tenant), Request: fmt.Sprint(w, r)})
		usePrefix := rng.IntN(4) != 0
		attached := 0
		var err error
		if usePrefix {
			attached, err = s.AttachPrefix(model, tokens[:(n-1)/p.PageSize()*p.PageSize()], n)
		} else {
			err = s.Reserve(n)
		}
		if err != nil {
			s.Free()
			if errors.Is(err, ErrPoolExhausted) {
				continue
			}
			return fmt.Errorf("worker %d: reserve: %v", w, err)
		}
		for pos := attached; pos < n; pos++ {
			for l := range p.Layers() {
				for j := range kvDim {
					k[j], v[j] = kvValue(tenant, l, pos, j, tokens[pos]), -kvValue(tenant, l, pos, j, tokens[pos])
				}
				if err := s.Write(l, pos, k, v); err != nil {
					s.Free()
					return fmt.Errorf("worker %d: Write(%d, %d): %v", w, l, pos, err)
				}
			}
		}
		if usePrefix {
			if _, err := s.PublishPrefix(model, tokens); err != nil {
				s.Free()
				return fmt.Errorf("worker %d: PublishPrefix: %v", w, err)
			}
		}
		for l := range p.Layers() {
			view, err := s.View(l, n)
			if err != nil {
				s.Free()
				return fmt.Errorf("worker %d: View: %v", w, err)
			}
			for pos := range n {
				for j, h := range view.K(pos) {
					if got, want := gguf.F16ToF32(h), kvValue(tenant, l, pos, j, tokens[pos]); got != want {
						s.Free()
						return fmt.Errorf("worker %d (tenant %d, attached %d): layer %d pos %d K[%d] = %v, want %v", w, tenant, attached, l, pos, j, got, want)
					}
				}
				for j, h := range view.V(pos) {
					if got, want := gguf.F16ToF32(h), -kvValue(tenant, l, pos, j, tokens[pos]); got != want {
						s.Free()
						return fmt.Errorf("worker %d: layer %d pos %d V[%d] = %v, want %v", w, l, pos, j, got, want)
					}
				}
			}
		}
		s.Free()
	}
	return nil
}

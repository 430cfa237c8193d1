package kvcache

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/bulkhead-ai/bulkhead/models/gguf"
)

// TestConcurrentReserveFree runs many goroutines that reserve, write, read and
// free against one small pool. Under -race it also proves the locking. It
// checks that no page is ever held by two sequences, that every sequence reads
// back only its own values, and that accounting ends exact.
func TestConcurrentReserveFree(t *testing.T) {
	cases := []struct {
		name string
		cfg  Config
	}{
		{"scrub", Config{Layers: 2, KVHeads: 1, HeadDim: 4, PageSize: 4, Pages: 24}},
		{"poison", Config{Layers: 2, KVHeads: 1, HeadDim: 4, PageSize: 4, Pages: 24, Poison: true}},
		{"never scrub", Config{Layers: 2, KVHeads: 1, HeadDim: 4, PageSize: 4, Pages: 24, Scrub: ScrubNever}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := newTestPool(t, tc.cfg)
			const workers, rounds = 8, 150
			var (
				mu      sync.Mutex
				holder  = map[int]int{} // page id -> worker holding it
				exhaust int
			)
			claim := func(w int, pages []int) error {
				mu.Lock()
				defer mu.Unlock()
				for _, id := range pages {
					if other, ok := holder[id]; ok {
						return fmt.Errorf("page %d handed to worker %d while worker %d holds it", id, w, other)
					}
					holder[id] = w
				}
				return nil
			}
			unclaim := func(pages []int) {
				mu.Lock()
				defer mu.Unlock()
				for _, id := range pages {
					delete(holder, id)
				}
			}
			errs := make(chan error, workers)
			var wg sync.WaitGroup
			for w := range workers {
				wg.Go(func() {
					errs <- worker(p, w, rounds, claim, unclaim, func() { mu.Lock(); exhaust++; mu.Unlock() })
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					t.Error(err)
				}
			}
			if len(holder) != 0 {
				t.Errorf("pages still claimed: %v", holder)
			}
			t.Logf("%d reservations hit an exhausted pool", exhaust)
		})
	}
}

func worker(p *Pool, w, rounds int, claim func(int, []int) error, unclaim func([]int), exhausted func()) error {
	rng := rand.New(rand.NewPCG(uint64(w), 7))
	kvDim := p.KVDim()
	for r := range rounds {
		s := p.NewSequence(Owner{Namespace: fmt.Sprintf("tenant-%d", w), Request: fmt.Sprint(r)})
		n := 1 + rng.IntN(20)
		if err := s.Reserve(n); err != nil {
			var ae *AllocError
			if !errors.As(err, &ae) || len(s.Pages()) != 0 || s.Cap() != 0 {
				return fmt.Errorf("worker %d: Reserve(%d) = %v with %d pages held", w, n, err, len(s.Pages()))
			}
			exhausted()
			s.Free()
			continue
		}
		pages := s.Pages()
		if err := claim(w, pages); err != nil {
			return err
		}
		for _, id := range pages {
			if o, ok := p.PageOwner(id); !ok || o != s.Owner() {
				return fmt.Errorf("worker %d: page %d owner %+v, want %+v", w, id, o, s.Owner())
			}
		}
		val := func(l, pos, j int) float32 { return float32(w*200 + l*100 + pos*4 + j) }
		k := make([]float32, kvDim)
		v := make([]float32, kvDim)
		for pos := range n {
			for l := range p.Layers() {
				for j := range kvDim {
					k[j], v[j] = val(l, pos, j), -val(l, pos, j)
				}
				if err := s.Write(l, pos, k, v); err != nil {
					return fmt.Errorf("worker %d: Write: %v", w, err)
				}
			}
		}
		for l := range p.Layers() {
			view, err := s.View(l, n)
			if err != nil {
				return fmt.Errorf("worker %d: View: %v", w, err)
			}
			for pos := range n {
				for j, h := range view.K(pos) {
					if got := gguf.F16ToF32(h); got != val(l, pos, j) {
						return fmt.Errorf("worker %d: layer %d pos %d K[%d] = %v, want %v", w, l, pos, j, got, val(l, pos, j))
					}
				}
				for j, h := range view.V(pos) {
					if got := gguf.F16ToF32(h); got != -val(l, pos, j) {
						return fmt.Errorf("worker %d: layer %d pos %d V[%d] = %v", w, l, pos, j, got)
					}
				}
			}
		}
		unclaim(pages)
		s.Free()
	}
	return nil
}

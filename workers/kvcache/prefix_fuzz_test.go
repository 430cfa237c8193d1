package kvcache

import (
	"errors"
	"fmt"
	"testing"

	"github.com/bulkhead-ai/bulkhead/models/gguf"
)

// FuzzPrefixOps drives four sequences of two tenants on a six-page pool with
// an arbitrary stream of AttachPrefix/Reserve, writes, PublishPrefix, reads,
// Free and FlushPrefixes. Prompts come from a two-token alphabet, so blocks
// repeat and hit. After every call it checks: errors are the documented ones;
// every page is free, cached, or held by exactly the sequences that think they
// hold it; shared pages belong to the reader's namespace; and every value a
// View returns is the one that tenant writes for that layer, position and
// token (a page of the other tenant, or a scrubbed one, would differ).
func FuzzPrefixOps(f *testing.F) {
	// tenant 0 publishes [1 1 0 0]; tenant 1 then asks for the same blocks.
	f.Add(byte(0), []byte{0, 3, 1, 3, 1, 1, 2, 0, 5, 3, 6, 3})
	f.Add(byte(0), []byte{0, 0x4d, 1, 0, 2, 0, 4, 0, 8, 0x4d, 9, 0, 3, 0})
	f.Add(byte(1), []byte{0, 0xff, 1, 0, 2, 0, 5, 0xff, 6, 0, 7, 0, 8, 0xff, 15, 0, 10, 0x0f})
	f.Add(byte(2), []byte{0, 0x33, 1, 0, 2, 0, 4, 0, 5, 0x33, 6, 0, 4, 0, 10, 0x33, 11, 0, 13, 0})
	f.Fuzz(func(t *testing.T, mode byte, ops []byte) {
		cfg := Config{Layers: 2, KVHeads: 1, HeadDim: 2, PageSize: 2, Pages: 6}
		switch mode % 3 {
		case 1:
			cfg.Poison = true
		case 2:
			cfg.Scrub = ScrubNever
		}
		p := newTestPool(t, cfg)
		flushAtEnd(t, p)
		type slot struct {
			s      *Sequence
			tokens []int32
		}
		var slots [4]slot
		ns := func(i int) int { return i % 2 }
		for i := range slots {
			slots[i].s = p.NewSequence(Owner{Namespace: fmt.Sprint("t", ns(i))})
		}
		defer func() {
			for _, sl := range slots {
				sl.s.Free()
			}
		}()
		val := func(tenant, l, pos, j int, tok int32) float32 {
			return float32(tenant*512 + l*256 + int(tok)*128 + pos*2 + j)
		}
		for i := 0; i+1 < len(ops); i += 2 {
			op, arg := int(ops[i]), int(ops[i+1])
			k := (op / 5) % len(slots)
			sl := &slots[k]
			switch op % 5 {
			case 0: // new request in this slot: prompt from arg's bits
				sl.s.Free()
				sl.s = p.NewSequence(Owner{Namespace: fmt.Sprint("t", ns(k))})
				n := 1 + arg&7
				sl.tokens = make([]int32, n)
				for j := range sl.tokens {
					sl.tokens[j] = int32(arg >> (j % 8) & 1)
				}
				var err error
				attached := 0
				if arg&0x80 != 0 {
					err = sl.s.Reserve(n)
				} else {
					attached, err = sl.s.AttachPrefix("m", sl.tokens[:(n-1)/2*2], n)
				}
				if err != nil && !errors.Is(err, ErrPoolExhausted) {
					t.Fatalf("reserve: %v", err)
				}
				if err != nil && (sl.s.Cap() != 0 || len(sl.s.Pages()) != 0) {
					t.Fatalf("failed reservation kept %d positions", sl.s.Cap())
				}
				if sl.s.Len() != attached {
					t.Fatalf("attached %d, Len %d", attached, sl.s.Len())
				}
			case 1: // write up to arg positions more
				for c := 0; c < arg%4 && sl.s.Len() < sl.s.Cap(); c++ {
					pos := sl.s.Len()
					for l := range p.Layers() {
						kr := []float32{val(ns(k), l, pos, 0, sl.tokens[pos]), val(ns(k), l, pos, 1, sl.tokens[pos])}
						if err := sl.s.Write(l, pos, kr, kr); err != nil {
							t.Fatalf("Write(%d, %d): %v", l, pos, err)
						}
					}
				}
			case 2: // publish what is written
				if sl.s.Cap() == 0 {
					continue
				}
				if _, err := sl.s.PublishPrefix("m", sl.tokens[:sl.s.Len()]); err != nil {
					t.Fatalf("PublishPrefix: %v", err)
				}
			case 3:
				sl.s.Free()
			case 4:
				p.FlushPrefixes()
			}
			// Accounting: free + cached + private pages of live sequences.
			private := 0
			for _, o := range slots {
				for j, id := range o.s.Pages() {
					if o.s.Shared(j) {
						if own, _ := p.PageOwner(id); own != (Owner{Namespace: o.s.Owner().Namespace, Request: PrefixRequest}) {
							t.Fatalf("shared page %d owned by %+v, read by %+v", id, own, o.s.Owner())
						}
						continue
					}
					private++
					if own, _ := p.PageOwner(id); own != o.s.Owner() {
						t.Fatalf("private page %d owned by %+v, held by %+v", id, own, o.s.Owner())
					}
				}
			}
			st := p.PrefixStats()
			if got := p.FreePages() + st.Cached + private; got != p.TotalPages() {
				t.Fatalf("%d free + %d cached + %d private = %d of %d pages", p.FreePages(), st.Cached, private, got, p.TotalPages())
			}
			// Every readable value is the reader's own.
			for kk, o := range slots {
				n := o.s.Len()
				for l := range p.Layers() {
					w, err := o.s.View(l, n)
					if err != nil {
						if errors.Is(err, ErrFreed) {
							break
						}
						t.Fatalf("View(%d, %d): %v", l, n, err)
					}
					for pos := range n {
						for j, h := range w.K(pos) {
							if got, want := gguf.F16ToF32(h), val(ns(kk), l, pos, j, o.tokens[pos]); got != want {
								t.Fatalf("slot %d layer %d pos %d K[%d] = %v, want %v", kk, l, pos, j, got, want)
							}
						}
					}
				}
			}
		}
	})
}

package kvcache

import (
	"fmt"
	"testing"

	"github.com/bulkhead-ai/bulkhead/models/gguf"
)

// newTestPool builds a pool and checks, when the test ends, that every page
// went back to the free list with no owner and no written slots.
func newTestPool(t testing.TB, cfg Config) *Pool {
	t.Helper()
	p, err := New(cfg)
	if err != nil {
		t.Fatalf("New(%+v): %v", cfg, err)
	}
	t.Cleanup(func() {
		if free, total := p.FreePages(), p.TotalPages(); free != total {
			t.Errorf("page leak: %d of %d pages free at end of test", free, total)
		}
		for id := range p.TotalPages() {
			if o, ok := p.PageOwner(id); ok {
				t.Errorf("page %d still owned by %+v at end of test", id, o)
			}
			for l := range p.Layers() {
				if w, _ := p.PageWritten(id, l); w != 0 {
					t.Errorf("page %d layer %d: %d written slots at end of test", id, l, w)
				}
			}
		}
	})
	return p
}

// smallCfg is a tiny pool shape: 2 layers, KVDim 6, 4 slots a page.
func smallCfg(pages int) Config {
	return Config{Layers: 2, KVHeads: 2, HeadDim: 3, PageSize: 4, Pages: pages}
}

// rows returns n rows of kvDim values that encode tag (< 8), layer (< 2) and
// position (< 16) exactly in half precision: all are integers below 2048.
func rows(tag, layer, pos0, n, kvDim int) (k, v []float32) {
	if tag < 0 || tag >= 8 || layer < 0 || layer >= 2 || pos0 < 0 || pos0+n > 16 {
		panic("rows: tag, layer or position out of the exact range")
	}
	k = make([]float32, n*kvDim)
	v = make([]float32, n*kvDim)
	for r := range n {
		for j := range kvDim {
			x := float32(tag*256 + layer*128 + (pos0+r)*8 + j%8)
			k[r*kvDim+j] = x
			v[r*kvDim+j] = -x
		}
	}
	return k, v
}

// writeAll writes positions [pos0, pos0+n) at every layer with rows(tag, ...).
func writeAll(t testing.TB, s *Sequence, tag, pos0, n int) {
	t.Helper()
	p := s.pool
	for l := range p.Layers() {
		k, v := rows(tag, l, pos0, n, p.KVDim())
		if err := s.WriteRows(l, pos0, k, v, n); err != nil {
			t.Fatalf("WriteRows(layer %d, pos %d, n %d): %v", l, pos0, n, err)
		}
	}
}

// checkView reads positions [0, n) at every layer through K/V and KPage/VPage
// and compares them with what writeAll(tag) stored.
func checkView(t testing.TB, s *Sequence, tag, n int) {
	t.Helper()
	p := s.pool
	kvDim := p.KVDim()
	for l := range p.Layers() {
		w, err := s.View(l, n)
		if err != nil {
			t.Fatalf("View(%d, %d): %v", l, n, err)
		}
		if w.Len() != n {
			t.Fatalf("View.Len = %d, want %d", w.Len(), n)
		}
		wantK, wantV := rows(tag, l, 0, n, kvDim)
		for pos := range n {
			k, v := w.K(pos), w.V(pos)
			if len(k) != kvDim || len(v) != kvDim {
				t.Fatalf("row lengths %d/%d, want %d", len(k), len(v), kvDim)
			}
			for j := range kvDim {
				if got, want := gguf.F16ToF32(k[j]), wantK[pos*kvDim+j]; got != want {
					t.Fatalf("layer %d pos %d K[%d] = %v, want %v", l, pos, j, got, want)
				}
				if got, want := gguf.F16ToF32(v[j]), wantV[pos*kvDim+j]; got != want {
					t.Fatalf("layer %d pos %d V[%d] = %v, want %v", l, pos, j, got, want)
				}
			}
		}
		pos := 0
		for i := range w.NumPages() {
			kp, vp := w.KPage(i), w.VPage(i)
			if len(kp) != w.PageLen(i)*kvDim || len(vp) != len(kp) {
				t.Fatalf("page %d: %d/%d halves for %d rows", i, len(kp), len(vp), w.PageLen(i))
			}
			for j := range kp {
				if got, want := gguf.F16ToF32(kp[j]), wantK[pos*kvDim+j]; got != want {
					t.Fatalf("layer %d page %d K half %d = %v, want %v", l, i, j, got, want)
				}
				if got, want := gguf.F16ToF32(vp[j]), wantV[pos*kvDim+j]; got != want {
					t.Fatalf("layer %d page %d V half %d = %v, want %v", l, i, j, got, want)
				}
			}
			pos += w.PageLen(i)
		}
		if pos != n {
			t.Fatalf("pages cover %d positions, want %d", pos, n)
		}
	}
}

// rawPage returns page id's K and V storage at layer, all slots.
func rawPage(p *Pool, id, layer int) (k, v []uint16) {
	off := id * p.pageStride
	return p.k[layer][off : off+p.pageStride], p.v[layer][off : off+p.pageStride]
}

func TestFill(t *testing.T) {
	for _, n := range []int{0, 1, 2, 3, 7, 8, 9, 1000} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			s := make([]uint16, n+2)
			fill(s[1:n+1], 0xabcd)
			for i, x := range s {
				want := uint16(0xabcd)
				if i == 0 || i == n+1 {
					want = 0
				}
				if x != want {
					t.Fatalf("s[%d] = %#x, want %#x", i, x, want)
				}
			}
		})
	}
}

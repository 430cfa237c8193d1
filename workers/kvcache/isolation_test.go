package kvcache

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/bulkhead-ai/bulkhead/models/gguf"
)

// The tests in this file are the cache-level proof of tenant isolation: a
// sequence can read only slots it wrote itself, whatever a reused page holds.

func TestFreedPagesNeverLeak(t *testing.T) {
	cases := []struct {
		name  string
		cfg   func(Config) Config
		check func(t *testing.T, k, v []uint16) // raw page after A's free
	}{
		{"scrub on free zeroes", func(c Config) Config { return c }, allHalves(0)},
		{"poison fills NaN", func(c Config) Config { c.Poison = true; return c }, allHalves(PoisonF16)},
		{"poison wins over scrub never", func(c Config) Config { c.Poison = true; c.Scrub = ScrubNever; return c }, allHalves(PoisonF16)},
		{"scrub never keeps stale data", func(c Config) Config { c.Scrub = ScrubNever; return c }, func(t *testing.T, k, v []uint16) {
			t.Helper()
			if slices.Equal(k, make([]uint16, len(k))) {
				t.Error("ScrubNever page is zero; the test below would prove nothing")
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := newTestPool(t, tc.cfg(smallCfg(3)))
			a := p.NewSequence(Owner{Namespace: "tenant-a", Request: "secret"})
			if err := a.Reserve(12); err != nil {
				t.Fatal(err)
			}
			writeAll(t, a, 3, 0, 12)
			checkView(t, a, 3, 12)
			aPages := a.Pages()
			a.Free()
			for _, id := range aPages {
				for l := range p.Layers() {
					k, v := rawPage(p, id, l)
					tc.check(t, k, v)
				}
			}

			b := p.NewSequence(Owner{Namespace: "tenant-b", Request: "curious"})
			defer b.Free()
			if err := b.Reserve(12); err != nil {
				t.Fatal(err)
			}
			bPages := b.Pages()
			slices.Sort(bPages)
			if !slices.Equal(bPages, aPages) {
				t.Fatalf("B got pages %v, A had %v; the test needs reuse", bPages, aPages)
			}
			for l := range p.Layers() {
				for _, n := range []int{1, 4, 12} {
					if _, err := b.View(l, n); !errors.Is(err, ErrUnwritten) {
						t.Errorf("B View(%d, %d) over A's old slots = %v, want ErrUnwritten", l, n, err)
					}
				}
			}
			// B writes five positions; it sees exactly those and nothing of A's.
			writeAll(t, b, 5, 0, 5)
			checkView(t, b, 5, 5)
			if _, err := b.View(0, 6); !errors.Is(err, ErrUnwritten) {
				t.Errorf("B View(0, 6) = %v, want ErrUnwritten", err)
			}
		})
	}
}

func allHalves(want uint16) func(t *testing.T, k, v []uint16) {
	return func(t *testing.T, k, v []uint16) {
		t.Helper()
		for i := range k {
			if k[i] != want || v[i] != want {
				t.Fatalf("freed page half %d: K %#04x V %#04x, want %#04x", i, k[i], v[i], want)
			}
		}
	}
}

func TestPoisonedSlotsReadAsNaN(t *testing.T) {
	cfg := smallCfg(2)
	cfg.Poison = true
	p := newTestPool(t, cfg)
	for id := range p.TotalPages() { // at construction
		for l := range p.Layers() {
			k, v := rawPage(p, id, l)
			allHalves(PoisonF16)(t, k, v)
		}
	}
	s := p.NewSequence(tenant)
	defer s.Free()
	if err := s.Reserve(8); err != nil {
		t.Fatal(err)
	}
	writeAll(t, s, 1, 0, 3)
	// Slot 3 of the first page was reserved but never written.
	k, _ := rawPage(p, s.Pages()[0], 0)
	if x := gguf.F16ToF32(k[3*p.KVDim()]); !math.IsNaN(float64(x)) {
		t.Errorf("unwritten slot reads %v, want NaN", x)
	}
	if x := gguf.F16ToF32(k[2*p.KVDim()]); math.IsNaN(float64(x)) {
		t.Error("written slot reads NaN")
	}
}

func TestScrubOnlyTouchesFreedPages(t *testing.T) {
	p := newTestPool(t, smallCfg(4))
	a := p.NewSequence(Owner{Namespace: "a"})
	b := p.NewSequence(Owner{Namespace: "b"})
	defer b.Free()
	for _, s := range []*Sequence{a, b} {
		if err := s.Reserve(8); err != nil {
			t.Fatal(err)
		}
	}
	writeAll(t, a, 1, 0, 8)
	writeAll(t, b, 2, 0, 8)
	a.Free()
	checkView(t, b, 2, 8)
}

func TestViewOfAnotherSequencesPageIsRefused(t *testing.T) {
	p := newTestPool(t, smallCfg(4))
	a := p.NewSequence(Owner{Namespace: "a"})
	b := p.NewSequence(Owner{Namespace: "b"})
	defer a.Free()
	defer b.Free()
	for _, s := range []*Sequence{a, b} {
		if err := s.Reserve(4); err != nil {
			t.Fatal(err)
		}
		writeAll(t, s, 1, 0, 4)
	}
	// No API call can put B's page in A's table; forge it to prove the check
	// in View and PageChecksum does not rely on the table being right.
	saved := a.pages[0]
	a.pages[0] = b.pages[0]
	defer func() { a.pages[0] = saved }()
	if _, err := a.View(0, 1); !errors.Is(err, ErrNotOwner) {
		t.Errorf("View over B's page = %v, want ErrNotOwner", err)
	}
	if _, err := a.PageChecksum(0); !errors.Is(err, ErrNotOwner) {
		t.Errorf("PageChecksum of B's page = %v, want ErrNotOwner", err)
	}
	// A page that was freed (owner cleared) is refused the same way.
	a.pages[0] = 3
	if _, err := a.View(0, 1); !errors.Is(err, ErrNotOwner) {
		t.Errorf("View over a free page = %v, want ErrNotOwner", err)
	}
}

func TestViewAccessorsStayInBounds(t *testing.T) {
	p := newTestPool(t, smallCfg(4))
	s := p.NewSequence(tenant)
	if err := s.Reserve(8); err != nil {
		t.Fatal(err)
	}
	writeAll(t, s, 1, 0, 6)
	w, err := s.View(0, 5)
	if err != nil {
		t.Fatal(err)
	}
	if got := cap(w.K(4)); got != p.KVDim() {
		t.Errorf("K row capacity %d lets a caller reslice past the row", got)
	}
	if got := cap(w.KPage(1)); got != 1*p.KVDim() {
		t.Errorf("last page capacity %d, want one row", got)
	}
	cases := []struct {
		name string
		call func()
		msg  string
	}{
		{"K past n", func() { w.K(5) }, "out of range"},
		{"V negative", func() { w.V(-1) }, "out of range"},
		{"page past the view", func() { w.KPage(2) }, "out of range"},
		{"PageLen negative", func() { w.PageLen(-1) }, "out of range"},
		{"zero View", func() { var z View; z.K(0) }, "out of range"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { expectPanic(t, tc.call, tc.msg) })
	}
	s.Free()
	t.Run("K after Free", func(t *testing.T) { expectPanic(t, func() { w.K(0) }, "after its sequence was freed") })
	t.Run("VPage after Free", func(t *testing.T) { expectPanic(t, func() { w.VPage(0) }, "after its sequence was freed") })
}

func expectPanic(t *testing.T, f func(), msg string) {
	t.Helper()
	defer func() {
		t.Helper()
		r := recover()
		if r == nil {
			t.Fatalf("no panic, want one containing %q", msg)
		}
		if s, ok := r.(string); !ok || !strings.Contains(s, msg) {
			t.Fatalf("panic %v, want one containing %q", r, msg)
		}
	}()
	f()
}

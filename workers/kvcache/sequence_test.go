package kvcache

import (
	"errors"
	"fmt"
	"slices"
	"testing"
)

var tenant = Owner{Namespace: "acme", Request: "req-1"}

func TestReserveAllOrNothing(t *testing.T) {
	p := newTestPool(t, smallCfg(4)) // 16 slots
	a := p.NewSequence(tenant)
	defer a.Free()
	if err := a.Reserve(10); err != nil { // 3 pages
		t.Fatalf("Reserve(10): %v", err)
	}
	b := p.NewSequence(Owner{Namespace: "other", Request: "r"})
	defer b.Free()
	cases := []struct {
		name       string
		n          int
		need, free int
	}{
		{"two pages with one free", 5, 2, 1},
		{"more than the pool", 100, 25, 1},
		{"near max int", int(^uint(0) >> 1), int(^uint(0)>>1)/4 + 1, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := b.Reserve(tc.n)
			var ae *AllocError
			if !errors.As(err, &ae) || !errors.Is(err, ErrPoolExhausted) {
				t.Fatalf("Reserve(%d) = %v, want *AllocError wrapping ErrPoolExhausted", tc.n, err)
			}
			if ae.Need != tc.need || ae.Free != tc.free {
				t.Errorf("AllocError = %+v, want Need %d Free %d", *ae, tc.need, tc.free)
			}
			if b.Cap() != 0 || len(b.Pages()) != 0 || p.FreePages() != 1 {
				t.Errorf("failed Reserve changed state: Cap %d, pages %v, free %d", b.Cap(), b.Pages(), p.FreePages())
			}
		})
	}
	t.Run("slack in the last page needs no page", func(t *testing.T) {
		if err := a.Reserve(2); err != nil {
			t.Fatalf("Reserve(2) into slack: %v", err)
		}
		if a.Cap() != 12 || len(a.Pages()) != 3 || p.FreePages() != 1 {
			t.Errorf("Cap %d pages %d free %d, want 12, 3, 1", a.Cap(), len(a.Pages()), p.FreePages())
		}
	})
	t.Run("last page can still be taken", func(t *testing.T) {
		if err := b.Reserve(4); err != nil {
			t.Fatalf("Reserve(4): %v", err)
		}
		if p.FreePages() != 0 || p.UsedPages() != 4 {
			t.Errorf("free %d used %d, want 0 and 4", p.FreePages(), p.UsedPages())
		}
	})
}

func TestReserveArguments(t *testing.T) {
	p := newTestPool(t, smallCfg(2))
	cases := []struct {
		name  string
		owner Owner
		n     int
		want  error
	}{
		{"negative", tenant, -1, ErrInvalidArgument},
		{"no namespace", Owner{Request: "r"}, 1, ErrInvalidOwner},
		{"zero is fine", tenant, 0, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := p.NewSequence(tc.owner)
			defer s.Free()
			if err := s.Reserve(tc.n); !errors.Is(err, tc.want) {
				t.Errorf("Reserve(%d) = %v, want %v", tc.n, err, tc.want)
			}
			if s.Cap() != 0 || p.FreePages() != 2 {
				t.Errorf("Cap %d free %d after Reserve(%d)", s.Cap(), p.FreePages(), tc.n)
			}
		})
	}
}

func TestReserveOneAtATime(t *testing.T) {
	p := newTestPool(t, smallCfg(3))
	s := p.NewSequence(tenant)
	defer s.Free()
	for i := 1; i <= 12; i++ {
		if err := s.Reserve(1); err != nil {
			t.Fatalf("Reserve #%d: %v", i, err)
		}
		if s.Cap() != i {
			t.Fatalf("Cap = %d, want %d", s.Cap(), i)
		}
		if want := PagesForTokens(i, 4); len(s.Pages()) != want || p.UsedPages() != want {
			t.Fatalf("after %d tokens: %d pages held, %d used, want %d", i, len(s.Pages()), p.UsedPages(), want)
		}
	}
	if err := s.Reserve(1); !errors.Is(err, ErrPoolExhausted) {
		t.Fatalf("13th Reserve = %v, want ErrPoolExhausted", err)
	}
	if !slices.Equal(s.Pages(), []int{0, 1, 2}) {
		t.Errorf("pages %v, want [0 1 2]", s.Pages())
	}
}

func TestWriteChecks(t *testing.T) {
	p := newTestPool(t, smallCfg(4))
	s := p.NewSequence(tenant)
	defer s.Free()
	if err := s.Reserve(6); err != nil {
		t.Fatal(err)
	}
	row := func(n int) []float32 { return make([]float32, n*p.KVDim()) }
	writeAll(t, s, 1, 0, 2) // positions 0 and 1 at both layers
	cases := []struct {
		name   string
		layer  int
		pos, n int
		k, v   []float32
		want   error
	}{
		{"skips a position", 0, 3, 1, row(1), row(1), ErrOutOfOrder},
		{"rewrites a position", 0, 1, 1, row(1), row(1), ErrOutOfOrder},
		{"negative position", 0, -1, 1, row(1), row(1), ErrOutOfOrder},
		{"beyond reservation", 0, 2, 5, row(5), row(5), ErrNotReserved},
		{"layer negative", -1, 2, 1, row(1), row(1), ErrInvalidArgument},
		{"layer too big", 2, 2, 1, row(1), row(1), ErrInvalidArgument},
		{"short K", 0, 2, 1, row(1)[1:], row(1), ErrInvalidArgument},
		{"long V", 0, 2, 1, row(1), row(2), ErrInvalidArgument},
		{"rows/count mismatch", 0, 2, 2, row(1), row(1), ErrInvalidArgument},
		{"negative count", 0, 2, -1, nil, nil, ErrInvalidArgument},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := s.WriteRows(tc.layer, tc.pos, tc.k, tc.v, tc.n)
			if !errors.Is(err, tc.want) {
				t.Fatalf("WriteRows = %v, want %v", err, tc.want)
			}
			if s.Written(0) != 2 || s.Written(1) != 2 || s.Len() != 2 {
				t.Errorf("failed write changed counts: %d/%d, Len %d", s.Written(0), s.Written(1), s.Len())
			}
		})
	}
	t.Run("single Write checks order too", func(t *testing.T) {
		if err := s.Write(1, 5, row(1), row(1)); !errors.Is(err, ErrOutOfOrder) {
			t.Errorf("Write = %v, want ErrOutOfOrder", err)
		}
	})
	t.Run("zero rows at the next position is a no-op", func(t *testing.T) {
		if err := s.WriteRows(0, 2, nil, nil, 0); err != nil || s.Written(0) != 2 {
			t.Errorf("WriteRows(n=0) = %v, written %d", err, s.Written(0))
		}
	})
}

func TestLenIsMinimumOverLayers(t *testing.T) {
	p := newTestPool(t, smallCfg(4))
	s := p.NewSequence(tenant)
	defer s.Free()
	if err := s.Reserve(9); err != nil {
		t.Fatal(err)
	}
	kvDim := p.KVDim()
	steps := []struct {
		name            string
		layer, pos, n   int
		wantLen, wantW0 int
	}{
		{"layer 0 first five", 0, 0, 5, 0, 5},
		{"layer 1 first three", 1, 0, 3, 3, 5},
		{"layer 1 catches up past layer 0", 1, 3, 4, 5, 5},
		{"layer 0 to end", 0, 5, 4, 7, 9},
		{"layer 1 to end", 1, 7, 2, 9, 9},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			k, v := rows(3, st.layer, st.pos, st.n, kvDim)
			if err := s.WriteRows(st.layer, st.pos, k, v, st.n); err != nil {
				t.Fatal(err)
			}
			if s.Len() != st.wantLen || s.Written(0) != st.wantW0 {
				t.Errorf("Len %d Written(0) %d, want %d, %d", s.Len(), s.Written(0), st.wantLen, st.wantW0)
			}
		})
	}
	checkView(t, s, 3, 9)
}

func TestWriteRowsAcrossPagesReadsBack(t *testing.T) {
	cases := []struct {
		name   string
		chunks []int // WriteRows sizes, in order
	}{
		{"one at a time", []int{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}},
		{"one chunk over three pages", []int{11}},
		{"chunks straddling page edges", []int{3, 6, 2}},
		{"whole pages", []int{4, 4, 3}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := newTestPool(t, smallCfg(5))
			s := p.NewSequence(tenant)
			defer s.Free()
			if err := s.Reserve(11); err != nil {
				t.Fatal(err)
			}
			pos := 0
			for _, n := range tc.chunks {
				writeAll(t, s, 2, pos, n)
				pos += n
			}
			if s.Len() != 11 {
				t.Fatalf("Len = %d, want 11", s.Len())
			}
			for n := 0; n <= 11; n++ {
				checkView(t, s, 2, n)
			}
			for i, id := range s.Pages() {
				for l := range p.Layers() {
					want := min(4, 11-4*i)
					if got, err := p.PageWritten(id, l); err != nil || got != want {
						t.Errorf("PageWritten(%d, %d) = %d, %v; want %d", id, l, got, err, want)
					}
				}
			}
		})
	}
}

func TestWriteRoundsToHalf(t *testing.T) {
	p := newTestPool(t, Config{Layers: 1, KVHeads: 1, HeadDim: 4, Pages: 1})
	s := p.NewSequence(tenant)
	defer s.Free()
	if err := s.Reserve(1); err != nil {
		t.Fatal(err)
	}
	k := []float32{1.0 / 3, 70000, -1e-8, 2049}
	v := []float32{0.1, -70000, 65504, 2051}
	if err := s.Write(0, 0, k, v); err != nil {
		t.Fatal(err)
	}
	w, err := s.View(0, 1)
	if err != nil {
		t.Fatal(err)
	}
	wantK := []uint16{0x3555, 0x7c00, 0x8000, 0x6800} // 2049 ties to even 2048
	wantV := []uint16{0x2e66, 0xfc00, 0x7bff, 0x6802} // 2051 ties to even 2052
	if !slices.Equal(w.K(0), wantK) || !slices.Equal(w.V(0), wantV) {
		t.Errorf("K %#04x V %#04x, want %#04x %#04x", w.K(0), w.V(0), wantK, wantV)
	}
}

func TestViewChecks(t *testing.T) {
	p := newTestPool(t, smallCfg(4))
	s := p.NewSequence(tenant)
	defer s.Free()
	if err := s.Reserve(8); err != nil {
		t.Fatal(err)
	}
	writeAll(t, s, 1, 0, 5)
	k, v := rows(1, 0, 5, 1, p.KVDim())
	if err := s.Write(0, 5, k, v); err != nil { // layer 0 has 6, layer 1 has 5
		t.Fatal(err)
	}
	cases := []struct {
		name     string
		layer, n int
		want     error
	}{
		{"empty", 0, 0, nil},
		{"all written at layer 0", 0, 6, nil},
		{"layer 1 is behind", 1, 6, ErrUnwritten},
		{"reserved but unwritten", 0, 7, ErrUnwritten},
		{"beyond reservation", 0, 9, ErrNotReserved},
		{"negative", 0, -1, ErrInvalidArgument},
		{"bad layer", 2, 1, ErrInvalidArgument},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w, err := s.View(tc.layer, tc.n)
			if !errors.Is(err, tc.want) {
				t.Fatalf("View(%d, %d) = %v, want %v", tc.layer, tc.n, err, tc.want)
			}
			if err == nil && (w.Len() != tc.n || w.NumPages() != PagesForTokens(tc.n, 4)) {
				t.Errorf("View Len %d pages %d for n %d", w.Len(), w.NumPages(), tc.n)
			}
		})
	}
}

func TestViewDoesNotAllocate(t *testing.T) {
	p := newTestPool(t, smallCfg(4))
	s := p.NewSequence(tenant)
	defer s.Free()
	if err := s.Reserve(16); err != nil {
		t.Fatal(err)
	}
	writeAll(t, s, 1, 0, 16)
	var sum uint64
	allocs := testing.AllocsPerRun(20, func() {
		w, err := s.View(1, 16)
		if err != nil {
			panic(err)
		}
		for pos := range w.Len() {
			sum += uint64(w.K(pos)[0]) + uint64(w.V(pos)[5])
		}
	})
	if allocs != 0 {
		t.Errorf("View and reads allocate %v times per run", allocs)
	}
	if sum == 0 {
		t.Error("read nothing")
	}
}

func TestFreeIsIdempotentAndFinal(t *testing.T) {
	p := newTestPool(t, smallCfg(3))
	s := p.NewSequence(tenant)
	if err := s.Reserve(9); err != nil {
		t.Fatal(err)
	}
	writeAll(t, s, 1, 0, 4)
	s.Free()
	s.Free()
	if p.FreePages() != 3 {
		t.Fatalf("free pages %d after Free, want 3", p.FreePages())
	}
	if s.Len() != 0 || s.Cap() != 0 || len(s.Pages()) != 0 || s.Written(0) != 0 {
		t.Errorf("freed sequence Len %d Cap %d pages %v written %d", s.Len(), s.Cap(), s.Pages(), s.Written(0))
	}
	k, v := rows(1, 0, 0, 1, p.KVDim())
	cases := []struct {
		name string
		call func() error
	}{
		{"Reserve", func() error { return s.Reserve(1) }},
		{"Write", func() error { return s.Write(0, 0, k, v) }},
		{"View", func() error { _, err := s.View(0, 0); return err }},
		{"PageChecksum", func() error { _, err := s.PageChecksum(0); return err }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.call(); !errors.Is(err, ErrFreed) {
				t.Errorf("%s after Free = %v, want ErrFreed", tc.name, err)
			}
		})
	}
	if p.FreePages() != 3 {
		t.Errorf("calls after Free took pages: %d free", p.FreePages())
	}
}

func TestOwnerMetadata(t *testing.T) {
	p := newTestPool(t, smallCfg(4))
	a := p.NewSequence(Owner{Namespace: "tenant-a", Request: "r1"})
	b := p.NewSequence(Owner{Namespace: "tenant-b", Request: "r2"})
	if err := a.Reserve(5); err != nil {
		t.Fatal(err)
	}
	if err := b.Reserve(4); err != nil {
		t.Fatal(err)
	}
	writeAll(t, a, 1, 0, 5)
	for _, s := range []*Sequence{a, b} {
		for _, id := range s.Pages() {
			if o, ok := p.PageOwner(id); !ok || o != s.Owner() {
				t.Errorf("PageOwner(%d) = %+v, %v; want %+v", id, o, ok, s.Owner())
			}
		}
	}
	if w, _ := p.PageWritten(a.Pages()[1], 1); w != 1 {
		t.Errorf("a's second page layer 1 written %d, want 1", w)
	}
	if _, ok := p.PageOwner(3); ok {
		t.Error("free page 3 reports an owner")
	}
	for _, id := range []int{-1, 4} {
		if _, ok := p.PageOwner(id); ok {
			t.Errorf("PageOwner(%d) reports an owner", id)
		}
		if _, err := p.PageWritten(id, 0); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("PageWritten(%d, 0) = %v, want ErrInvalidArgument", id, err)
		}
	}
	if _, err := p.PageWritten(0, 2); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("PageWritten(0, 2) = %v, want ErrInvalidArgument", err)
	}
	aPages := a.Pages()
	a.Free()
	for _, id := range aPages {
		if o, ok := p.PageOwner(id); ok {
			t.Errorf("freed page %d still owned by %+v", id, o)
		}
		for l := range p.Layers() {
			if w, _ := p.PageWritten(id, l); w != 0 {
				t.Errorf("freed page %d layer %d written %d", id, l, w)
			}
		}
	}
	if o, ok := p.PageOwner(b.Pages()[0]); !ok || o.Namespace != "tenant-b" {
		t.Errorf("b's page lost its owner: %+v %v", o, ok)
	}
	b.Free()
}

func TestPageChecksum(t *testing.T) {
	p := newTestPool(t, smallCfg(8))
	a := p.NewSequence(Owner{Namespace: "a"})
	b := p.NewSequence(Owner{Namespace: "b"})
	defer a.Free()
	defer b.Free()
	for _, s := range []*Sequence{a, b} {
		if err := s.Reserve(6); err != nil {
			t.Fatal(err)
		}
		writeAll(t, s, 1, 0, 6)
	}
	sum := func(s *Sequence, i int) uint64 {
		t.Helper()
		c, err := s.PageChecksum(i)
		if err != nil {
			t.Fatalf("PageChecksum(%d): %v", i, err)
		}
		return c
	}
	if a.Pages()[0] == b.Pages()[0] {
		t.Fatal("two sequences share a page")
	}
	t.Run("same data on other page ids, same sum", func(t *testing.T) {
		for i := range 2 {
			if sum(a, i) != sum(b, i) {
				t.Errorf("page %d sums differ", i)
			}
		}
	})
	t.Run("different data, different sum", func(t *testing.T) {
		if sum(a, 0) == sum(a, 1) {
			t.Error("pages 0 and 1 hold different data but the same sum")
		}
	})
	t.Run("a further write changes the sum", func(t *testing.T) {
		before := sum(a, 1)
		k, v := rows(1, 0, 6, 1, p.KVDim())
		if err := a.Write(0, 6, k, v); err == nil {
			t.Fatal("write beyond reservation succeeded")
		}
		if err := a.Reserve(1); err != nil {
			t.Fatal(err)
		}
		if err := a.Write(0, 6, k, v); err != nil {
			t.Fatal(err)
		}
		if sum(a, 1) == before {
			t.Error("sum unchanged after writing a slot")
		}
	})
	t.Run("a flipped half changes the sum", func(t *testing.T) {
		before := sum(b, 0)
		k, _ := rawPage(p, b.Pages()[0], 1)
		k[3] ^= 1
		after := sum(b, 0)
		k[3] ^= 1
		if after == before {
			t.Error("sum unchanged after a bit flip")
		}
	})
	t.Run("index out of range", func(t *testing.T) {
		for _, i := range []int{-1, 2} {
			if _, err := a.PageChecksum(i); !errors.Is(err, ErrInvalidArgument) {
				t.Errorf("PageChecksum(%d) = %v, want ErrInvalidArgument", i, err)
			}
		}
	})
}

// TestRewind: a rewound sequence forgets the positions from n on at every
// layer (View refuses them, the slots are cleaned per the pool's config),
// keeps what came before and its reservation, and writes again from n; it
// refuses n beyond what is written, below a shared prefix page, and after
// Free.
func TestRewind(t *testing.T) {
	for _, cfg := range []Config{smallCfg(4), {Layers: 2, KVHeads: 2, HeadDim: 3, PageSize: 4, Pages: 4, Poison: true}} {
		t.Run(fmt.Sprintf("poison=%v", cfg.Poison), func(t *testing.T) {
			p := newTestPool(t, cfg)
			s := p.NewSequence(tenant)
			defer s.Free()
			if err := s.Reserve(14); err != nil {
				t.Fatal(err)
			}
			writeAll(t, s, 1, 0, 11) // pages 0-2, page 2 with 3 slots
			if err := s.Rewind(6); err != nil {
				t.Fatal(err)
			}
			if s.Len() != 6 || s.Cap() != 14 {
				t.Fatalf("after Rewind(6): Len %d, Cap %d", s.Len(), s.Cap())
			}
			for l := range p.Layers() {
				if _, err := s.View(l, 7); !errors.Is(err, ErrUnwritten) {
					t.Errorf("View(%d, 7) after Rewind(6) = %v, want ErrUnwritten", l, err)
				}
			}
			checkView(t, s, 1, 6)
			pages := s.Pages()
			want := map[int]int{pages[1]: 2, pages[2]: 0}
			for id, w := range want {
				for l := range p.Layers() {
					if got, _ := p.PageWritten(id, l); got != w {
						t.Errorf("page %d layer %d: %d written slots, want %d", id, l, got, w)
					}
					k, v := rawPage(p, id, l)
					for j := w * p.KVDim(); j < len(k); j++ {
						clean := uint16(0)
						if cfg.Poison {
							clean = PoisonF16
						}
						if k[j] != clean || v[j] != clean {
							t.Fatalf("page %d layer %d half %d: %#x/%#x after Rewind, want %#x", id, l, j, k[j], v[j], clean)
						}
					}
				}
			}
			// Written again from 6, in order, the sequence reads back whole.
			writeAll(t, s, 1, 6, 8)
			checkView(t, s, 1, 14)
			for _, n := range []int{-1, 15} {
				if err := s.Rewind(n); !errors.Is(err, ErrInvalidArgument) {
					t.Errorf("Rewind(%d) = %v, want ErrInvalidArgument", n, err)
				}
			}
			if err := s.Rewind(14); err != nil || s.Len() != 14 {
				t.Errorf("Rewind to the written length = %v, Len %d", err, s.Len())
			}
		})
	}
	t.Run("never into a shared prefix page", func(t *testing.T) {
		p := newTestPool(t, smallCfg(4))
		s := p.NewSequence(tenant)
		if err := s.Reserve(10); err != nil {
			t.Fatal(err)
		}
		writeAll(t, s, 1, 0, 10)
		if n, err := s.PublishPrefix("m", []int32{1, 2, 3, 4, 5, 6, 7, 8}); err != nil || n != 2 { // pages
			t.Fatalf("PublishPrefix = %d, %v", n, err)
		}
		if err := s.Rewind(7); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("Rewind(7) into a shared page = %v, want ErrInvalidArgument", err)
		}
		if err := s.Rewind(8); err != nil || s.Len() != 8 {
			t.Errorf("Rewind(8) = %v, Len %d", err, s.Len())
		}
		s.Free()
		p.FlushPrefixes()
		if err := s.Rewind(0); !errors.Is(err, ErrFreed) {
			t.Errorf("Rewind after Free = %v, want ErrFreed", err)
		}
	})
}

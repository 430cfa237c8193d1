package kvcache

import (
	"fmt"
	"testing"
)

// smollm2-135m's KV shape.
func smolCfg(pages int) Config {
	return Config{Layers: 30, KVHeads: 3, HeadDim: 64, Pages: pages}
}

// BenchmarkWritePosition writes one position at all 30 layers.
func BenchmarkWritePosition(b *testing.B) {
	p := newTestPool(b, smolCfg(64))
	kvDim := p.KVDim()
	k := make([]float32, kvDim)
	v := make([]float32, kvDim)
	for i := range k {
		k[i], v[i] = float32(i)*0.01, -float32(i)*0.02
	}
	const span = 1024
	s := p.NewSequence(tenant)
	if err := s.Reserve(span); err != nil {
		b.Fatal(err)
	}
	pos := 0
	for b.Loop() {
		if pos == span { // rare: start over with a fresh sequence
			s.Free()
			s = p.NewSequence(tenant)
			if err := s.Reserve(span); err != nil {
				b.Fatal(err)
			}
			pos = 0
		}
		for l := range 30 {
			if err := s.Write(l, pos, k, v); err != nil {
				b.Fatal(err)
			}
		}
		pos++
	}
	s.Free()
}

// BenchmarkViewRead512 checks a 512-position view of one layer and reads every
// K and V half, by position and by page.
func BenchmarkViewRead512(b *testing.B) {
	const n = 512
	p := newTestPool(b, smolCfg(n/16))
	kvDim := p.KVDim()
	s := p.NewSequence(tenant)
	defer s.Free()
	if err := s.Reserve(n); err != nil {
		b.Fatal(err)
	}
	k := make([]float32, n*kvDim)
	v := make([]float32, n*kvDim)
	for i := range k {
		k[i], v[i] = float32(i%1000), float32(i%777)
	}
	for l := range 30 {
		if err := s.WriteRows(l, 0, k, v, n); err != nil {
			b.Fatal(err)
		}
	}
	var sink uint64
	b.Run("by-position", func(b *testing.B) {
		b.SetBytes(2 * 2 * n * int64(kvDim))
		for b.Loop() {
			w, err := s.View(7, n)
			if err != nil {
				b.Fatal(err)
			}
			var sum uint64
			for pos := range w.Len() {
				for _, h := range w.K(pos) {
					sum += uint64(h)
				}
				for _, h := range w.V(pos) {
					sum += uint64(h)
				}
			}
			sink += sum
		}
	})
	b.Run("by-page", func(b *testing.B) {
		b.SetBytes(2 * 2 * n * int64(kvDim))
		for b.Loop() {
			w, err := s.View(7, n)
			if err != nil {
				b.Fatal(err)
			}
			var sum uint64
			for i := range w.NumPages() {
				for _, h := range w.KPage(i) {
					sum += uint64(h)
				}
				for _, h := range w.VPage(i) {
					sum += uint64(h)
				}
			}
			sink += sum
		}
	})
	b.Run("view-only", func(b *testing.B) {
		for b.Loop() {
			if _, err := s.View(7, n); err != nil {
				b.Fatal(err)
			}
		}
	})
	if sink == 0 {
		b.Fatal("read nothing")
	}
}

// BenchmarkFreePage reserves one page, marks it fully written at every layer
// and frees it: the difference between the modes is the per-page clean cost.
func BenchmarkFreePage(b *testing.B) {
	modes := []struct {
		name   string
		scrub  ScrubMode
		poison bool
	}{
		{"never", ScrubNever, false},
		{"scrub", ScrubOnFree, false},
		{"poison", ScrubOnFree, true},
	}
	for _, m := range modes {
		b.Run(m.name, func(b *testing.B) {
			cfg := smolCfg(4)
			cfg.Scrub, cfg.Poison = m.scrub, m.poison
			p := newTestPool(b, cfg)
			b.SetBytes(p.BytesPerPage())
			for b.Loop() {
				s := p.NewSequence(tenant)
				if err := s.Reserve(p.PageSize()); err != nil {
					b.Fatal(err)
				}
				id := s.pages[0]
				for l := range p.layers {
					p.pageWritten[int(id)*p.layers+l].Store(uint32(p.pageSize))
				}
				s.Free()
			}
		})
	}
}

func BenchmarkReserveFree(b *testing.B) {
	for _, pages := range []int{1, 32} {
		b.Run(fmt.Sprintf("%d-pages", pages), func(b *testing.B) {
			p := newTestPool(b, Config{Layers: 1, KVHeads: 1, HeadDim: 1, Pages: 64, Scrub: ScrubNever})
			for b.Loop() {
				s := p.NewSequence(tenant)
				if err := s.Reserve(pages * p.PageSize()); err != nil {
					b.Fatal(err)
				}
				s.Free()
			}
		})
	}
}

// BenchmarkFreePageCold frees pages last touched a whole pool (about 70 MB)
// ago, so the clean runs at memory rather than cache speed.
func BenchmarkFreePageCold(b *testing.B) {
	for _, m := range []struct {
		name  string
		scrub ScrubMode
	}{{"never", ScrubNever}, {"scrub", ScrubOnFree}} {
		b.Run(m.name, func(b *testing.B) {
			cfg := smolCfg(192)
			cfg.Scrub = m.scrub
			p := newTestPool(b, cfg)
			b.SetBytes(p.BytesPerPage())
			take := func() *Sequence {
				s := p.NewSequence(tenant)
				if err := s.Reserve(p.PageSize()); err != nil {
					b.Fatal(err)
				}
				id := int(s.pages[0])
				for l := range p.layers {
					p.pageWritten[id*p.layers+l].Store(uint32(p.pageSize))
				}
				return s
			}
			for l := range p.layers { // fault the memory in and make it dirty
				fill(p.k[l], 1)
				fill(p.v[l], 1)
			}
			ring := make([]*Sequence, p.TotalPages())
			for i := range ring {
				ring[i] = take()
			}
			i := 0
			for b.Loop() {
				ring[i].Free()
				ring[i] = take()
				i = (i + 1) % len(ring)
			}
			for _, s := range ring {
				s.Free()
			}
		})
	}
}

// fullPage returns a sequence of p holding one full page (all layers), for the
// page export and import benchmarks.
func fullPage(b *testing.B, p *Pool) *Sequence {
	kvDim := p.KVDim()
	n := p.PageSize()
	k := make([]float32, n*kvDim)
	v := make([]float32, n*kvDim)
	for i := range k {
		k[i], v[i] = float32(i%977)*0.01, -float32(i%613)*0.02
	}
	s := p.NewSequence(tenant)
	if err := s.Reserve(n); err != nil {
		b.Fatal(err)
	}
	for l := range p.Layers() {
		if err := s.WriteRows(l, 0, k, v, n); err != nil {
			b.Fatal(err)
		}
	}
	return s
}

// BenchmarkExportPage serializes one full page of smollm2-135m's shape
// (30 layers x 16 slots x 192 halves, K and V: 368,760 bytes).
func BenchmarkExportPage(b *testing.B) {
	p := newTestPool(b, smolCfg(1))
	s := fullPage(b, p)
	defer s.Free()
	b.SetBytes(int64(p.Layout().PageBytes(p.PageSize())))
	for b.Loop() {
		if _, err := s.ExportPage(0); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPageChecksum sums the same page without building its bytes.
func BenchmarkPageChecksum(b *testing.B) {
	p := newTestPool(b, smolCfg(1))
	s := fullPage(b, p)
	defer s.Free()
	b.SetBytes(int64(p.Layout().PageBytes(p.PageSize())))
	for b.Loop() {
		if _, err := s.PageChecksum(0); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkImportPage validates and stores the same page into a fresh
// sequence (the Reserve and Free are part of each iteration).
func BenchmarkImportPage(b *testing.B) {
	src := newTestPool(b, smolCfg(1))
	s := fullPage(b, src)
	data, err := s.ExportPage(0)
	s.Free()
	if err != nil {
		b.Fatal(err)
	}
	p := newTestPool(b, smolCfg(1))
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		d := p.NewSequence(tenant)
		if err := d.Reserve(p.PageSize()); err != nil {
			b.Fatal(err)
		}
		if err := d.ImportPage(0, data); err != nil {
			b.Fatal(err)
		}
		d.Free()
	}
}

// BenchmarkEvictPage reserves one page on a pool whose only page is an idle
// cached one, so every reservation evicts it (cleaning per the mode), then
// writes and republishes it: the difference between the modes is the
// per-page cost of cleaning a page as it moves to a new owner.
func BenchmarkEvictPage(b *testing.B) {
	for _, m := range []struct {
		name   string
		scrub  ScrubMode
		poison bool
	}{{"never", ScrubNever, false}, {"scrub", ScrubOnFree, false}, {"poison", ScrubOnFree, true}} {
		b.Run(m.name, func(b *testing.B) {
			cfg := smolCfg(1)
			cfg.Scrub, cfg.Poison = m.scrub, m.poison
			p := newTestPool(b, cfg)
			b.SetBytes(p.BytesPerPage())
			tokens := make([]int32, p.PageSize())
			for b.Loop() {
				s := p.NewSequence(tenant)
				if err := s.Reserve(p.PageSize()); err != nil {
					b.Fatal(err)
				}
				id := s.pages[0]
				for l := range p.layers { // mark it written without the cost of writing
					p.pageWritten[int(id)*p.layers+l].Store(uint32(p.pageSize))
					s.written[l] = p.pageSize
				}
				tokens[0]++ // a new key each time: the old entry is evicted, not hit
				if _, err := s.PublishPrefix("m", tokens); err != nil {
					b.Fatal(err)
				}
				s.Free()
			}
			if st := p.PrefixStats(); st.Evicted < uint64(b.N)-1 {
				b.Fatalf("%d evictions in %d iterations", st.Evicted, b.N)
			}
			p.FlushPrefixes()
		})
	}
}

// BenchmarkAttachPrefix512 is the lookup an opted-in request pays at
// admission for a 512-token prompt: hashing 32 blocks and looking them up,
// on a hit (31 pages attached) and on a miss (another tenant).
func BenchmarkAttachPrefix512(b *testing.B) {
	p := newTestPool(b, Config{Layers: 1, KVHeads: 1, HeadDim: 1, Pages: 128, Scrub: ScrubNever})
	tokens := make([]int32, 512)
	for i := range tokens {
		tokens[i] = int32(i * 7 % 32000)
	}
	pub := p.NewSequence(tenant)
	if err := pub.Reserve(512); err != nil {
		b.Fatal(err)
	}
	for l := range p.Layers() {
		if err := pub.WriteRows(l, 0, make([]float32, 512), make([]float32, 512), 512); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := pub.PublishPrefix("m", tokens); err != nil {
		b.Fatal(err)
	}
	pub.Free()
	for _, bc := range []struct {
		name  string
		owner Owner
		want  int
	}{{"hit", tenant, 496}, {"miss", Owner{Namespace: "other"}, 0}} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				s := p.NewSequence(bc.owner)
				n, err := s.AttachPrefix("m", tokens[:496], 513)
				if err != nil || n != bc.want {
					b.Fatalf("AttachPrefix = %d, %v", n, err)
				}
				s.Free()
			}
		})
	}
	p.FlushPrefixes()
}

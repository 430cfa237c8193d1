package kvcache

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/bulkhead-ai/bulkhead/models/gguf"
	"github.com/bulkhead-ai/bulkhead/workers/kernels"
)

// quantCfg is a pool shape a quantized type can hold: 2 layers, 2 KV heads
// of 64 values, 4 slots a page.
func quantCfg(dt DType, pages int) Config {
	return Config{Layers: 2, KVHeads: 2, HeadDim: 64, PageSize: 4, Pages: pages, DType: dt}
}

// TestDTypeCapacity: a pool of the same bytes holds 34/32 and 18/32 of F16's
// bytes per value, so 1.88x and 3.56x the tokens of an F16 pool.
func TestDTypeCapacity(t *testing.T) {
	const mem = 64 << 20
	shape := Config{Layers: 16, KVHeads: 8, HeadDim: 64, MemoryBytes: mem}
	tokens := map[DType]int{}
	for _, dt := range DTypes {
		c := shape
		c.DType = dt
		p, err := New(c)
		if err != nil {
			t.Fatal(err)
		}
		tokens[dt] = p.MaxTokens()
		if got := int64(p.TotalPages()) * p.BytesPerPage(); got > mem {
			t.Fatalf("%s: %d pages of %d bytes exceed the %d asked for", dt, p.TotalPages(), p.BytesPerPage(), mem)
		}
	}
	for dt, want := range map[DType]float64{DTypeQ8_0: 2 * 32 / 34.0, DTypeQ4_0: 2 * 32 / 18.0} {
		if r := float64(tokens[dt]) / float64(tokens[DTypeF16]); math.Abs(r-want) > 0.01 {
			t.Errorf("%s holds %.3fx F16's tokens, want %.3fx", dt, r, want)
		}
		t.Logf("%s: %d tokens in %d MiB, %.2fx F16's %d", dt, tokens[dt], mem>>20, float64(tokens[dt])/float64(tokens[DTypeF16]), tokens[DTypeF16])
	}
}

// TestDTypeRefused: an unknown type, or a quantized one on heads whose size
// is not a multiple of 32, is a config error naming the reason.
func TestDTypeRefused(t *testing.T) {
	for _, c := range []Config{
		{Layers: 1, KVHeads: 1, HeadDim: 64, Pages: 1, DType: "q5_0"},
		{Layers: 1, KVHeads: 1, HeadDim: 48, Pages: 1, DType: DTypeQ8_0},
		{Layers: 1, KVHeads: 4, HeadDim: 8, Pages: 1, DType: DTypeQ4_0},
	} {
		if _, err := New(c); !errors.Is(err, ErrConfig) {
			t.Errorf("%+v: %v, want ErrConfig", c, err)
		} else {
			t.Log(err)
		}
	}
	if d, err := ParseDType(""); d != DTypeF16 || err != nil {
		t.Errorf(`ParseDType("") = %q, %v`, d, err)
	}
}

// TestQuantizedWriteRead: rows written to a Q8_0 or Q4_0 pool read back
// through a view as exactly the kernels' blocks of each row, page after page,
// head after head, and the layout and export sizes follow the type.
func TestQuantizedWriteRead(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for _, dt := range []DType{DTypeQ8_0, DTypeQ4_0} {
		t.Run(string(dt), func(t *testing.T) {
			cfg := quantCfg(dt, 4)
			cfg.Poison = true
			p := newTestPool(t, cfg)
			s := p.NewSequence(tenant)
			defer s.Free()
			const n = 11
			if err := s.Reserve(n); err != nil {
				t.Fatal(err)
			}
			kvd := p.KVDim()
			k, v := make([]float32, n*kvd), make([]float32, n*kvd)
			for i := range k {
				k[i], v[i] = float32(rng.NormFloat64()), float32(rng.NormFloat64())
			}
			for l := range p.Layers() {
				if err := s.WriteRows(l, 0, k, v, n); err != nil {
					t.Fatal(err)
				}
			}
			w, err := s.View(1, n)
			if err != nil {
				t.Fatal(err)
			}
			if w.DType() != dt || w.RowHalves() != dt.RowHalves(kvd) {
				t.Fatalf("view type %s, row %d halves; want %s, %d", w.DType(), w.RowHalves(), dt, dt.RowHalves(kvd))
			}
			want := make([]uint16, w.RowHalves())
			for pos := range n {
				for _, c := range []struct {
					got []uint16
					src []float32
				}{{w.K(pos), k}, {w.V(pos), v}} {
					quantizeRow(dt, want, c.src[pos*kvd:(pos+1)*kvd])
					if !slices.Equal(c.got, want) {
						t.Fatalf("position %d reads other blocks than the row's", pos)
					}
				}
				page := w.KPage(pos / p.PageSize())
				j := pos % p.PageSize()
				if !slices.Equal(page[j*w.RowHalves():(j+1)*w.RowHalves()], w.K(pos)) {
					t.Fatalf("position %d: KPage row differs from K", pos)
				}
			}
			l := p.Layout()
			if l.DType != string(dt) || l.PageBytes(4) != 2*(4+2*4*2*dt.RowHalves(kvd)) {
				t.Fatalf("layout %+v, PageBytes(4) %d", l, l.PageBytes(4))
			}
			for i := range 3 {
				b, err := s.ExportPage(i)
				if err != nil {
					t.Fatal(err)
				}
				if len(b) != l.PageBytes(min(4, n-4*i)) {
					t.Fatalf("page %d exports %d bytes, want %d", i, len(b), l.PageBytes(min(4, n-4*i)))
				}
			}
			// The slot reserved but never written is poison: NaN scales.
			raw, _ := rawPage(p, s.Pages()[2], 0)
			if d := gguf.F16ToF32(raw[3*p.row]); !math.IsNaN(float64(d)) {
				t.Fatalf("unwritten slot's first scale is %g, want NaN", d)
			}
		})
	}
}

func quantizeRow(dt DType, dst []uint16, src []float32) {
	if dt == DTypeQ8_0 {
		kernels.QuantizeQ8Halves(dst, src)
	} else {
		kernels.QuantizeQ4Halves(dst, src)
	}
}

// TestQuantizedExportImportAndRewind: a Q8_0 page moves to another Q8_0 pool
// bit for bit and reads the same there; an F16 pool of the same shape refuses
// it (the sizes differ); Rewind and Free clean the quantized slots.
func TestQuantizedExportImportAndRewind(t *testing.T) {
	src, dst := newTestPool(t, quantCfg(DTypeQ8_0, 3)), newTestPool(t, quantCfg(DTypeQ8_0, 3))
	f16 := newTestPool(t, quantCfg(DTypeF16, 3))
	a := src.NewSequence(tenant)
	defer a.Free()
	if err := a.Reserve(6); err != nil {
		t.Fatal(err)
	}
	kvd := src.KVDim()
	k, v := make([]float32, 6*kvd), make([]float32, 6*kvd)
	for i := range k {
		k[i], v[i] = float32(i%17)-8, float32(i%13)-6
	}
	for l := range src.Layers() {
		if err := a.WriteRows(l, 0, k, v, 6); err != nil {
			t.Fatal(err)
		}
	}
	b := dst.NewSequence(tenant)
	defer b.Free()
	c := f16.NewSequence(tenant)
	defer c.Free()
	for _, s := range []*Sequence{b, c} {
		if err := s.Reserve(6); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 2 {
		page, err := a.ExportPage(i)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.ImportPage(i, page); err != nil {
			t.Fatal(err)
		}
		if err := c.ImportPage(0, page); !errors.Is(err, ErrBadPage) {
			t.Fatalf("an F16 pool imports a Q8_0 page: %v", err)
		}
	}
	wa, _ := a.View(0, 6)
	wb, err := b.View(0, 6)
	if err != nil {
		t.Fatal(err)
	}
	for pos := range 6 {
		if !slices.Equal(wa.K(pos), wb.K(pos)) || !slices.Equal(wa.V(pos), wb.V(pos)) {
			t.Fatalf("position %d differs after the hand-over", pos)
		}
	}
	if err := a.Rewind(5); err != nil {
		t.Fatal(err)
	}
	raw, _ := rawPage(src, a.Pages()[1], 1)
	if !allZero(raw[1*src.row : 4*src.row]) {
		t.Fatal("rewound slot not cleaned")
	}
}

func allZero(h []uint16) bool {
	for _, x := range h {
		if x != 0 {
			return false
		}
	}
	return true
}

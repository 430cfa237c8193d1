package kvcache

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc64"
	"slices"
	"testing"

	"github.com/bulkhead-ai/bulkhead/models/gguf"
)

func TestLayout(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		want Layout
	}{
		{"small", smallCfg(3), Layout{Layers: 2, KVHeads: 2, HeadDim: 3, PageSize: 4, DType: "f16"}},
		{"default page size", Config{Layers: 3, KVHeads: 1, HeadDim: 8, Pages: 1}, Layout{Layers: 3, KVHeads: 1, HeadDim: 8, PageSize: 16, DType: "f16"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := newTestPool(t, tc.cfg)
			if got := p.Layout(); got != tc.want {
				t.Fatalf("Layout = %+v, want %+v", got, tc.want)
			}
		})
	}
	t.Run("PageBytes matches ExportPage", func(t *testing.T) {
		p := newTestPool(t, smallCfg(4))
		s := p.NewSequence(Owner{Namespace: "a"})
		defer s.Free()
		if err := s.Reserve(7); err != nil {
			t.Fatal(err)
		}
		writeAll(t, s, 1, 0, 7)
		for i, n := range []int{4, 3} {
			b, err := s.ExportPage(i)
			if err != nil {
				t.Fatal(err)
			}
			if want := p.Layout().PageBytes(n); len(b) != want {
				t.Errorf("page %d: %d bytes, PageBytes(%d) = %d", i, len(b), n, want)
			}
		}
		if got, want := p.Layout().PageBytes(4), 2*(4+4*4*6); got != want {
			t.Errorf("PageBytes(4) = %d, want %d", got, want)
		}
	})
}

// TestExportFormat decodes an exported page by hand, following the documented
// format, and compares it with what was written.
func TestExportFormat(t *testing.T) {
	p := newTestPool(t, smallCfg(2))
	s := p.NewSequence(Owner{Namespace: "a"})
	defer s.Free()
	if err := s.Reserve(6); err != nil {
		t.Fatal(err)
	}
	writeAll(t, s, 2, 0, 6)
	for i, n := range []int{4, 2} {
		b, err := s.ExportPage(i)
		if err != nil {
			t.Fatal(err)
		}
		r := bytes.NewReader(b)
		for l := range p.Layers() {
			var count uint32
			if err := binary.Read(r, binary.LittleEndian, &count); err != nil || int(count) != n {
				t.Fatalf("page %d layer %d count %d (%v), want %d", i, l, count, err, n)
			}
			wantK, wantV := rows(2, l, i*4, n, p.KVDim())
			for _, want := range [][]float32{wantK, wantV} {
				got := make([]uint16, len(want))
				if err := binary.Read(r, binary.LittleEndian, got); err != nil {
					t.Fatalf("page %d layer %d: %v", i, l, err)
				}
				for j, h := range got {
					if gguf.F16ToF32(h) != want[j] {
						t.Fatalf("page %d layer %d half %d = %v, want %v", i, l, j, gguf.F16ToF32(h), want[j])
					}
				}
			}
		}
		if r.Len() != 0 {
			t.Errorf("page %d: %d trailing bytes", i, r.Len())
		}
	}
}

// TestChecksumIsCRCOfExport pins the one definition: PageChecksum is the
// CRC-64 ECMA of ExportPage's bytes, for full, partial, uneven and empty pages.
func TestChecksumIsCRCOfExport(t *testing.T) {
	p := newTestPool(t, smallCfg(4))
	s := p.NewSequence(Owner{Namespace: "a"})
	defer s.Free()
	if err := s.Reserve(16); err != nil {
		t.Fatal(err)
	}
	writeAll(t, s, 1, 0, 9)
	k, v := rows(1, 0, 9, 2, p.KVDim())
	if err := s.WriteRows(0, 9, k, v, 2); err != nil { // layer 0 ahead of layer 1
		t.Fatal(err)
	}
	table := crc64.MakeTable(crc64.ECMA)
	for i := range 4 {
		t.Run(fmt.Sprint("page ", i), func(t *testing.T) {
			b, err := s.ExportPage(i)
			if err != nil {
				t.Fatal(err)
			}
			sum, err := s.PageChecksum(i)
			if err != nil {
				t.Fatal(err)
			}
			if want := crc64.Checksum(b, table); sum != want || Checksum(b) != want {
				t.Fatalf("PageChecksum %#x, Checksum %#x, crc64 of export %#x", sum, Checksum(b), want)
			}
		})
	}
}

// importInto writes n positions with tag into a sequence of src, exports its
// pages and imports them into a fresh sequence of dst reserving reserve
// positions. It returns both sequences.
func importInto(t *testing.T, src, dst *Pool, tag, n, reserve int) (a, b *Sequence) {
	t.Helper()
	a = src.NewSequence(Owner{Namespace: "ns", Request: "a"})
	if err := a.Reserve(n); err != nil {
		t.Fatal(err)
	}
	writeAll(t, a, tag, 0, n)
	b = dst.NewSequence(Owner{Namespace: "ns", Request: "b"})
	if err := b.Reserve(reserve); err != nil {
		t.Fatal(err)
	}
	for i := range PagesForTokens(n, src.PageSize()) {
		data, err := a.ExportPage(i)
		if err != nil {
			t.Fatal(err)
		}
		sum, err := a.PageChecksum(i)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.ImportVerified(i, data, sum); err != nil {
			t.Fatalf("ImportVerified(%d): %v", i, err)
		}
		got, err := b.PageChecksum(i)
		if err != nil {
			t.Fatal(err)
		}
		if got != sum {
			t.Fatalf("page %d checksum %#x after import, %#x before", i, got, sum)
		}
	}
	return a, b
}

func TestExportImportRoundTrip(t *testing.T) {
	cfgs := map[string]func(int) Config{
		"zero on free": smallCfg,
		"poison":       func(n int) Config { c := smallCfg(n); c.Poison = true; return c },
		"scrub never":  func(n int) Config { c := smallCfg(n); c.Scrub = ScrubNever; return c },
	}
	for name, mk := range cfgs {
		for _, n := range []int{1, 3, 4, 5, 8, 11, 14} {
			t.Run(fmt.Sprintf("%s/%d positions", name, n), func(t *testing.T) {
				src, dst := newTestPool(t, mk(5)), newTestPool(t, mk(5))
				// Dirty dst: another tenant writes every page and frees them.
				d := dst.NewSequence(Owner{Namespace: "other"})
				if err := d.Reserve(16); err != nil {
					t.Fatal(err)
				}
				writeAll(t, d, 7, 0, 16)
				d.Free()

				a, b := importInto(t, src, dst, 3, n, n+2)
				defer a.Free()
				defer b.Free()
				if b.Len() != n {
					t.Fatalf("Len after import = %d, want %d", b.Len(), n)
				}
				checkView(t, b, 3, n)
				// Decoding continues after the imported positions.
				writeAll(t, b, 3, n, 2)
				checkView(t, b, 3, n+2)
			})
		}
	}
}

func TestImportPageRefused(t *testing.T) {
	src := newTestPool(t, smallCfg(3))
	a := src.NewSequence(Owner{Namespace: "ns"})
	defer a.Free()
	if err := a.Reserve(6); err != nil {
		t.Fatal(err)
	}
	writeAll(t, a, 1, 0, 6)
	full, _ := a.ExportPage(0)
	part, _ := a.ExportPage(1) // 2 slots
	lay := src.Layout()
	per := func(n int) int { return 4 + 4*n*src.KVDim() } // bytes per layer

	setCount := func(b []byte, layer int, c uint32) []byte {
		b = slices.Clone(b)
		binary.LittleEndian.PutUint32(b[layer*per(int(binary.LittleEndian.Uint32(b))):], c)
		return b
	}
	tests := []struct {
		name    string
		page    int
		data    []byte
		reserve int
		pre     int // positions written before the import
		want    error
	}{
		{"nil", 0, nil, 8, 0, ErrBadPage},
		{"count only", 0, full[:4], 8, 0, ErrBadPage},
		{"truncated by one byte", 0, full[:len(full)-1], 8, 0, ErrBadPage},
		{"one byte too many", 0, append(slices.Clone(full), 0), 8, 0, ErrBadPage},
		{"inflated count", 0, setCount(part, 0, 3), 8, 0, ErrBadPage},
		{"inflated count on both layers", 0, setCount(setCount(part, 0, 3), 1, 3), 8, 0, ErrBadPage},
		{"count above page size", 0, setCount(setCount(full, 0, 5), 1, 5), 8, 0, ErrBadPage},
		{"zero count", 0, make([]byte, lay.PageBytes(0)), 8, 0, ErrBadPage},
		{"layers disagree", 0, setCount(full, 1, 3), 8, 0, ErrBadPage},
		{"more slots than reserved", 0, full, 3, 0, ErrBadPage},
		{"page out of order", 1, full, 8, 0, ErrOutOfOrder},
		{"page already written", 0, full, 8, 2, ErrOutOfOrder},
		{"after a partial page", 1, full, 8, 2, ErrOutOfOrder},
		{"page not reserved", 1, full, 4, 4, ErrNotReserved},
		{"negative index", -1, full, 8, 0, ErrInvalidArgument},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dst := newTestPool(t, smallCfg(3))
			b := dst.NewSequence(Owner{Namespace: "ns"})
			defer b.Free()
			if err := b.Reserve(tc.reserve); err != nil {
				t.Fatal(err)
			}
			writeAll(t, b, 2, 0, tc.pre)
			before := snapshot(dst, b)
			if err := b.ImportPage(tc.page, tc.data); !errors.Is(err, tc.want) {
				t.Fatalf("ImportPage = %v, want %v", err, tc.want)
			}
			if after := snapshot(dst, b); !slices.Equal(before, after) {
				t.Fatal("a refused import changed the pool")
			}
		})
	}
	t.Run("freed", func(t *testing.T) {
		dst := newTestPool(t, smallCfg(3))
		b := dst.NewSequence(Owner{Namespace: "ns"})
		if err := b.Reserve(4); err != nil {
			t.Fatal(err)
		}
		b.Free()
		if err := b.ImportPage(0, full); !errors.Is(err, ErrFreed) {
			t.Fatalf("ImportPage after Free = %v, want ErrFreed", err)
		}
	})
}

// TestImportVerifiedEveryByte flips each byte of an exported page in turn:
// ImportVerified refuses every one against the sender's checksum, ImportPage
// alone refuses those in a count field, and a refusal writes nothing.
func TestImportVerifiedEveryByte(t *testing.T) {
	src := newTestPool(t, smallCfg(2))
	a := src.NewSequence(Owner{Namespace: "ns"})
	defer a.Free()
	if err := a.Reserve(3); err != nil {
		t.Fatal(err)
	}
	writeAll(t, a, 1, 0, 3)
	data, err := a.ExportPage(0)
	if err != nil {
		t.Fatal(err)
	}
	sum, _ := a.PageChecksum(0)
	per := len(data) / src.Layers()
	dst := newTestPool(t, smallCfg(2))
	for at := range data {
		for _, bit := range []byte{0x01, 0x80} {
			bad := slices.Clone(data)
			bad[at] ^= bit
			b := dst.NewSequence(Owner{Namespace: "ns"})
			if err := b.Reserve(4); err != nil {
				t.Fatal(err)
			}
			before := snapshot(dst, b)
			err := b.ImportVerified(0, bad, sum)
			if !errors.Is(err, ErrChecksum) || !errors.Is(err, ErrBadPage) {
				t.Fatalf("byte %d ^ %#x: ImportVerified = %v, want ErrChecksum and ErrBadPage", at, bit, err)
			}
			if at%per < 4 {
				if err := b.ImportPage(0, bad); !errors.Is(err, ErrBadPage) {
					t.Fatalf("byte %d ^ %#x in a count: ImportPage = %v, want ErrBadPage", at, bit, err)
				}
			}
			if !slices.Equal(before, snapshot(dst, b)) {
				t.Fatalf("byte %d ^ %#x: a refused import changed the pool", at, bit)
			}
			b.Free()
		}
	}
}

// snapshot returns everything an import could change: every page's K and V
// storage, every written count, and the sequence's own counts.
func snapshot(p *Pool, s *Sequence) []uint64 {
	var out []uint64
	for l := range p.layers {
		for _, h := range p.k[l] {
			out = append(out, uint64(h))
		}
		for _, h := range p.v[l] {
			out = append(out, uint64(h))
		}
	}
	for i := range p.pageWritten {
		out = append(out, uint64(p.pageWritten[i].Load()))
	}
	for _, w := range s.written {
		out = append(out, uint64(w))
	}
	return out
}

// FuzzImportPage feeds arbitrary bytes to ImportPage on a sequence that has
// already imported pos0 positions: it never panics; on error nothing changed;
// on success the page re-exports to exactly the same bytes, View reads it and
// Len advanced by its count.
func FuzzImportPage(f *testing.F) {
	src, err := New(smallCfg(3))
	if err != nil {
		f.Fatal(err)
	}
	a := src.NewSequence(Owner{Namespace: "ns"})
	if err := a.Reserve(10); err != nil {
		f.Fatal(err)
	}
	for l := range src.Layers() {
		k, v := rows(1, l, 0, 10, src.KVDim())
		if err := a.WriteRows(l, 0, k, v, 10); err != nil {
			f.Fatal(err)
		}
	}
	for i := range 3 {
		b, _ := a.ExportPage(i)
		f.Add(byte(i), b)
		f.Add(byte(0), b)
		if len(b) > 5 {
			f.Add(byte(i), b[:len(b)-5])
		}
	}
	f.Add(byte(1), []byte{1, 0, 0, 0})
	f.Add(byte(0), []byte{})
	f.Fuzz(func(t *testing.T, at byte, data []byte) {
		p := newTestPool(t, smallCfg(3))
		s := p.NewSequence(Owner{Namespace: "ns"})
		defer s.Free()
		if err := s.Reserve(10); err != nil {
			t.Fatal(err)
		}
		i := int(at % 3)
		for j := range i { // pages before i imported from good data
			good, _ := a.ExportPage(j)
			if err := s.ImportPage(j, good); err != nil {
				t.Fatalf("good page %d: %v", j, err)
			}
		}
		before := snapshot(p, s)
		if err := s.ImportPage(i, data); err != nil {
			if !slices.Equal(before, snapshot(p, s)) {
				t.Fatalf("refused import (%v) changed the pool", err)
			}
			return
		}
		n := int(binary.LittleEndian.Uint32(data))
		if got := s.Len(); got != i*4+n {
			t.Fatalf("Len = %d after importing %d slots at page %d", got, n, i)
		}
		back, err := s.ExportPage(i)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(back, data) {
			t.Fatal("accepted page does not re-export to the same bytes")
		}
		for l := range p.Layers() {
			if _, err := s.View(l, s.Len()); err != nil {
				t.Fatalf("View after import: %v", err)
			}
		}
	})
}

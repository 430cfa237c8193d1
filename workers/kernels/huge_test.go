package kernels

import (
	"bytes"
	"testing"
	"unsafe"

	"github.com/bulkhead-ai/bulkhead/models/gguf"
)

// TestHugeCopy checks the weight copies: equal to their source, on 64-byte
// boundaries, small ones packed one after another in a chunk, and a float
// matrix (F32, F16, BF16) on a vector path reading its copy, not the
// caller's bytes.
func TestHugeCopy(t *testing.T) {
	var prev []byte
	for _, n := range []int{100, arenaMin, arenaMin + 1, 3 << 20, arenaChunk/2 + 1} {
		src := make([]byte, n)
		for i := range src {
			src[i] = byte(i*7 + n)
		}
		b := hugeCopy(src)
		if !bytes.Equal(b, src) || cap(b) != n {
			t.Fatalf("%d bytes: copy differs or has spare capacity %d", n, cap(b))
		}
		if n >= arenaMin && uintptrOf(b)%64 != 0 {
			t.Fatalf("%d bytes: copy at %#x, not on a 64-byte boundary", n, uintptrOf(b))
		}
		if n == arenaMin+1 && prev != nil && uintptrOf(b) != uintptrOf(prev)+arenaMin {
			t.Fatalf("consecutive copies not packed: %#x after %#x", uintptrOf(b), uintptrOf(prev))
		}
		prev = b
	}

	cols, rows := 64, 1024 // 64..256 KiB: an arena copy
	for _, typ := range []gguf.Type{gguf.TypeF32, gguf.TypeF16, gguf.TypeBF16} {
		data := make([]byte, rows*cols*typ.TypeSize())
		for i := range data {
			data[i] = byte(i)
		}
		eachSet(t, func(t *testing.T, ks Set) {
			m, err := ks.NewMatrix(typ, rows, cols, data)
			if err != nil {
				t.Fatal(err)
			}
			copied := uintptrOf(m.Data) != uintptrOf(data)
			if want := ks.path() >= pathAVX2; copied != want || m.Packed() != want || m.Set() != ks {
				t.Fatalf("%s matrix copied %v, Packed %v, set %v; want %v on %v", typ, copied, m.Packed(), m.Set(), want, ks)
			}
			if !bytes.Equal(m.Data, data) {
				t.Fatal("the matrix's data differs from the caller's")
			}
		})
	}
}

// TestHugeHalves checks the KV pool's buffers: n zero halves, none spare, on a
// 64-byte boundary once large enough for the arena, and independent of each
// other.
func TestHugeHalves(t *testing.T) {
	if HugeHalves(0) != nil {
		t.Fatal("0 halves: not nil")
	}
	var bufs [][]uint16
	for _, n := range []int{1, 7, arenaMin / 2, arenaMin, 5 << 20, arenaChunk} {
		h := HugeHalves(n)
		if len(h) != n || cap(h) != n {
			t.Fatalf("%d halves: len %d cap %d", n, len(h), cap(h))
		}
		for i, v := range h {
			if v != 0 {
				t.Fatalf("%d halves: [%d] = %#x, want 0", n, i, v)
			}
		}
		if p := uintptr(unsafe.Pointer(&h[0])); 2*n >= arenaMin && p%64 != 0 {
			t.Fatalf("%d halves at %#x, not on a 64-byte boundary", n, p)
		}
		for i := range h {
			h[i] = uint16(n)
		}
		bufs = append(bufs, h)
	}
	for _, h := range bufs {
		for i, v := range h {
			if v != uint16(len(h)) {
				t.Fatalf("%d halves: [%d] = %d, overwritten by another buffer", len(h), i, v)
			}
		}
	}
}

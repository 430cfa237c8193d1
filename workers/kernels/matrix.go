package kernels

import (
	"fmt"
	"unsafe"

	"github.com/bulkhead-ai/bulkhead/models/gguf"
)

// Matrix is a row-major weight matrix: Rows rows of Cols elements, each row
// Type.RowSize(Cols) bytes, in Data (usually a slice of a memory-mapped file).
type Matrix struct {
	Type       gguf.Type
	Rows, Cols int
	Data       []byte

	set    Set    // the kernel set the matrix is laid out for; its products run on it
	pack   []byte // the weights interleaved for the packed kernels (repack.go), or nil
	copied bool   // Data is a copy made by NewMatrix (in huge pages), not the caller's
}

// NewMatrix checks that the type has kernels here, that Cols is a whole number
// of the type's blocks, and that Data holds exactly Rows rows, and lays the
// matrix out for ks: every MatMul with it runs ks's kernels.
func (ks Set) NewMatrix(t gguf.Type, rows, cols int, data []byte) (Matrix, error) {
	return ks.newMatrix(t, rows, cols, data, false)
}

// NewTable is NewMatrix for a matrix that is only looked up by row (an
// embedding table that is not also an output projection): it reads data as
// it is, with no interleaved or huge-page copy, which its products would
// need. MatMul still works on it, with the row kernels.
func (ks Set) NewTable(t gguf.Type, rows, cols int, data []byte) (Matrix, error) {
	return ks.newMatrix(t, rows, cols, data, true)
}

func (ks Set) newMatrix(t gguf.Type, rows, cols int, data []byte, table bool) (Matrix, error) {
	switch t {
	case gguf.TypeF32, gguf.TypeF16, gguf.TypeBF16, gguf.TypeQ8_0, gguf.TypeQ4_0,
		gguf.TypeQ4_1, gguf.TypeQ5_0, gguf.TypeQ5_1, gguf.TypeIQ4_NL,
		gguf.TypeQ2_K, gguf.TypeQ3_K, gguf.TypeQ4_K, gguf.TypeQ5_K, gguf.TypeQ6_K, gguf.TypeIQ4_XS:
	default:
		return Matrix{}, fmt.Errorf("%w: %s", ErrUnsupportedType, t)
	}
	if rows <= 0 || cols <= 0 {
		return Matrix{}, fmt.Errorf("%w: %d x %d", ErrShape, rows, cols)
	}
	if cols%t.BlockSize() != 0 {
		return Matrix{}, fmt.Errorf("%w: %d columns is not a multiple of %s's block of %d", ErrShape, cols, t, t.BlockSize())
	}
	rs, err := t.RowSize(cols)
	if err != nil {
		return Matrix{}, fmt.Errorf("%w: %w", ErrShape, err)
	}
	if rows > len(data)/rs || rows*rs != len(data) {
		return Matrix{}, fmt.Errorf("%w: %d x %d %s needs %d bytes, have %d", ErrShape, rows, cols, t, rows*rs, len(data))
	}
	ks = ks.path().set() // the zero Set resolved, so that Set reports the path
	m := Matrix{Type: t, Rows: rows, Cols: cols, Data: data, set: ks}
	if table {
		return m, nil
	}
	if packs(ks.path(), t) {
		m.pack = repack(m)
	}
	if ks.path() >= pathAVX2 {
		switch t {
		case gguf.TypeF32, gguf.TypeF16, gguf.TypeBF16:
			// Float rows are read as they are, from a copy in huge pages.
			m.Data, m.copied = hugeCopy(data), true
		}
	}
	return m, nil
}

// Packed reports whether the matrix reads only a copy of the weights made at
// construction (interleaved, or float rows in huge pages on a vector path),
// so the caller's data need not stay resident (Row reads Data, which is the
// copy for the float types and the caller's otherwise).
func (m Matrix) Packed() bool { return m.pack != nil || m.copied }

// Set is the kernel set the matrix was laid out for.
func (m Matrix) Set() Set { return m.set }

// rowSize is the bytes per row; m must have come from NewMatrix.
func (m Matrix) rowSize() int { return m.Cols / m.Type.BlockSize() * m.Type.TypeSize() }

// RowBytes is the size of one row of Data.
func (m Matrix) RowBytes() int { return m.rowSize() }

// Row writes weight row i, dequantized, into dst[:m.Cols] (an embedding lookup).
func (m Matrix) Row(i int, dst []float32) {
	if i < 0 || i >= m.Rows {
		panic(fmt.Sprintf("kernels: row %d out of range [0,%d)", i, m.Rows))
	}
	rs := m.rowSize()
	m.DecodeRow(m.Data[i*rs:(i+1)*rs], dst)
}

// DecodeRow writes w, one row of m's type and width as Data holds it (a copy
// of a row of Data, read from elsewhere), dequantized into dst[:m.Cols].
func (m Matrix) DecodeRow(w []byte, dst []float32) {
	if len(w) != m.rowSize() {
		panic(fmt.Sprintf("kernels: DecodeRow of %d bytes, rows are %d", len(w), m.rowSize()))
	}
	dst = dst[:m.Cols]
	switch m.Type {
	case gguf.TypeF32:
		copy(dst, f32s(w))
	case gguf.TypeF16:
		m.set.F16ToF32s(dst, u16s(w))
	case gguf.TypeBF16:
		for j, h := range u16s(w) {
			dst[j] = gguf.BF16ToF32(h)
		}
	case gguf.TypeQ8_0:
		for b := 0; b < m.Cols/32; b++ {
			blk := w[b*q8Block : (b+1)*q8Block]
			d := half(blk)
			for j := range 32 {
				dst[b*32+j] = d * float32(int8(blk[2+j]))
			}
		}
	case gguf.TypeQ4_0:
		for b := 0; b < m.Cols/32; b++ {
			blk := w[b*q4Block : (b+1)*q4Block]
			d := half(blk)
			for j := range 16 {
				dst[b*32+j] = d * float32(int32(blk[2+j]&15)-8)
				dst[b*32+16+j] = d * float32(int32(blk[2+j]>>4)-8)
			}
		}
	case gguf.TypeQ4_K:
		dequantQ4K(dst, w)
	case gguf.TypeQ6_K:
		dequantQ6K(dst, w)
	default:
		// The other types have no hot embedding path: the models/gguf
		// dequantizer, exact to GGML's, serves. NewMatrix checked the sizes.
		if err := gguf.Dequantize(m.Type, w, dst); err != nil {
			panic("kernels: Row: " + err.Error())
		}
	}
}

// f32s and u16s view little-endian weight bytes as float32 / uint16 without
// copying. Every supported target is little-endian; the weight data of a GGUF
// file is aligned (32 bytes by default) and the targets allow unaligned loads.
func f32s(b []byte) []float32 {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), len(b)/4)
}

func u16s(b []byte) []uint16 {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Slice((*uint16)(unsafe.Pointer(&b[0])), len(b)/2)
}

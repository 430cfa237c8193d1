package gguf

import (
	"encoding/binary"
	"fmt"
	"math"
)

// Dequantize expands data, a whole number of blocks of type t, into dst, one
// float32 per element. len(dst) must be a multiple of t's block size and data
// exactly the bytes that many elements take. Block layouts are GGML's
// (ggml-common.h) and the arithmetic follows its reference dequantize_row_*
// functions operation by operation, so results are the same float32 values.
func Dequantize(t Type, data []byte, dst []float32) error {
	if !t.Supported() {
		return fmt.Errorf("%w: cannot dequantize %s", ErrUnsupportedType, t)
	}
	size, err := t.RowSize(len(dst))
	if err != nil {
		return fmt.Errorf("%w: %d elements of %s: %v", ErrSize, len(dst), t, err)
	}
	if size != len(data) {
		return fmt.Errorf("%w: %d elements of %s take %d bytes, got %d", ErrSize, len(dst), t, size, len(data))
	}
	switch t {
	case TypeF32:
		for i := range dst {
			dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(data[4*i:]))
		}
	case TypeF16:
		for i := range dst {
			dst[i] = F16ToF32(binary.LittleEndian.Uint16(data[2*i:]))
		}
	case TypeBF16:
		for i := range dst {
			dst[i] = BF16ToF32(binary.LittleEndian.Uint16(data[2*i:]))
		}
	case TypeQ8_0:
		dequantQ8_0(data, dst)
	case TypeQ4_0:
		dequantQ4_0(data, dst)
	case TypeQ4_1:
		dequantQ4_1(data, dst)
	case TypeQ5_0:
		dequantQ5_0(data, dst)
	case TypeQ5_1:
		dequantQ5_1(data, dst)
	case TypeIQ4_NL:
		dequantIQ4NL(data, dst)
	case TypeQ2_K:
		dequantQ2K(data, dst)
	case TypeQ3_K:
		dequantQ3K(data, dst)
	case TypeQ4_K:
		dequantQ4K(data, dst)
	case TypeQ5_K:
		dequantQ5K(data, dst)
	case TypeQ6_K:
		dequantQ6K(data, dst)
	case TypeIQ4_XS:
		dequantIQ4XS(data, dst)
	default:
		return fmt.Errorf("%w: no dequantizer for %s", ErrUnsupportedType, t)
	}
	return nil
}

// Q8_0 block: f16 d, then 32 int8 quants; x = q*d.
func dequantQ8_0(data []byte, dst []float32) {
	const bs = 2 + QK
	for i := 0; i < len(dst)/QK; i++ {
		b := (*[bs]byte)(data[i*bs:])
		y := (*[QK]float32)(dst[i*QK:])
		d := F16ToF32(binary.LittleEndian.Uint16(b[:]))
		q := b[2:bs]
		for j := range y {
			y[j] = float32(int8(q[j])) * d
		}
	}
}

// Q4_0 block: f16 d, then 16 bytes whose low nibbles are elements 0..15 and
// high nibbles elements 16..31; x = (q-8)*d.
func dequantQ4_0(data []byte, dst []float32) {
	const bs = 2 + QK/2
	for i := 0; i < len(dst)/QK; i++ {
		b := (*[bs]byte)(data[i*bs:])
		y := (*[QK]float32)(dst[i*QK:])
		d := F16ToF32(binary.LittleEndian.Uint16(b[:]))
		q := b[2:bs]
		lo, hi := y[:QK/2], y[QK/2:]
		for j := range QK / 2 {
			lo[j] = float32(int(q[j]&0xf)-8) * d
			hi[j] = float32(int(q[j]>>4)-8) * d
		}
	}
}

// Q4_1 block: f16 d, f16 m, then 16 bytes of nibbles laid out as in Q4_0;
// x = q*d + m.
func dequantQ4_1(data []byte, dst []float32) {
	const bs = 2 + 2 + QK/2
	for i := 0; i < len(dst)/QK; i++ {
		b := (*[bs]byte)(data[i*bs:])
		y := (*[QK]float32)(dst[i*QK:])
		d := F16ToF32(binary.LittleEndian.Uint16(b[0:]))
		m := F16ToF32(binary.LittleEndian.Uint16(b[2:]))
		q := b[4:bs]
		for j := range QK / 2 {
			// The conversion rounds the product before the add (no fusion).
			y[j] = float32(float32(q[j]&0xf)*d) + m
			y[j+QK/2] = float32(float32(q[j]>>4)*d) + m
		}
	}
}

// q5High returns the fifth bits of elements j and j+16 of a Q5_0/Q5_1 block,
// already shifted to bit 4: bit j and bit j+16 of the little-endian qh word.
func q5High(qh uint32, j int) (h0, h1 uint8) {
	return uint8(qh>>j<<4) & 0x10, uint8(qh>>(j+12)) & 0x10
}

// Q5_0 block: f16 d, a 32-bit word of fifth bits (bit j for element j), then
// nibbles as in Q4_0; x = (q-16)*d.
func dequantQ5_0(data []byte, dst []float32) {
	const bs = 2 + 4 + QK/2
	for i := 0; i < len(dst)/QK; i++ {
		b := (*[bs]byte)(data[i*bs:])
		y := (*[QK]float32)(dst[i*QK:])
		d := F16ToF32(binary.LittleEndian.Uint16(b[0:]))
		qh := binary.LittleEndian.Uint32(b[2:])
		q := b[6:bs]
		for j := range QK / 2 {
			h0, h1 := q5High(qh, j)
			y[j] = float32(int(q[j]&0xf|h0)-16) * d
			y[j+QK/2] = float32(int(q[j]>>4|h1)-16) * d
		}
	}
}

// Q5_1 block: f16 d, f16 m, the fifth-bit word, then nibbles; x = q*d + m.
func dequantQ5_1(data []byte, dst []float32) {
	const bs = 2 + 2 + 4 + QK/2
	for i := 0; i < len(dst)/QK; i++ {
		b := (*[bs]byte)(data[i*bs:])
		y := (*[QK]float32)(dst[i*QK:])
		d := F16ToF32(binary.LittleEndian.Uint16(b[0:]))
		m := F16ToF32(binary.LittleEndian.Uint16(b[2:]))
		qh := binary.LittleEndian.Uint32(b[4:])
		q := b[8:bs]
		for j := range QK / 2 {
			h0, h1 := q5High(qh, j)
			y[j] = float32(float32(q[j]&0xf|h0)*d) + m
			y[j+QK/2] = float32(float32(q[j]>>4|h1)*d) + m
		}
	}
}

// IQ4NLValues is GGML's non-linear 4-bit codebook (kvalues_iq4nl), shared by
// IQ4_NL and IQ4_XS: a nibble selects one of these int8 levels.
var IQ4NLValues = [16]int8{-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113}

// IQ4_NL block: f16 d, then nibbles laid out as in Q4_0, each selecting a
// codebook level; x = d*level.
func dequantIQ4NL(data []byte, dst []float32) {
	const bs = 2 + QK/2
	for i := 0; i < len(dst)/QK; i++ {
		b := (*[bs]byte)(data[i*bs:])
		y := (*[QK]float32)(dst[i*QK:])
		d := F16ToF32(binary.LittleEndian.Uint16(b[0:]))
		q := b[2:bs]
		for j := range QK / 2 {
			y[j] = d * float32(IQ4NLValues[q[j]&0xf])
			y[j+QK/2] = d * float32(IQ4NLValues[q[j]>>4])
		}
	}
}

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
	case TypeQ4_K:
		dequantQ4K(data, dst)
	case TypeQ6_K:
		dequantQ6K(data, dst)
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

// scaleMinK4 unpacks sub-block j's 6-bit scale and min from a Q4_K block's 12
// scale bytes: sub-blocks 0..3 keep theirs in the low 6 bits of bytes j and j+4;
// sub-blocks 4..7 keep their low 4 bits in byte j+4 (scale low nibble, min high
// nibble) and their top 2 bits in the top bits of bytes j-4 (scale) and j (min).
func scaleMinK4(j int, q []byte) (sc, m uint8) {
	if j < 4 {
		return q[j] & 63, q[j+4] & 63
	}
	return q[j+4]&0xf | (q[j-4]>>6)<<4, q[j+4]>>4 | (q[j]>>6)<<4
}

// Q4_K super-block of 256: f16 d, f16 dmin, 12 bytes of packed 6-bit scales and
// mins for 8 sub-blocks of 32, then 128 bytes of nibbles. Each 32 bytes of
// nibbles hold two sub-blocks: low nibbles the first, high nibbles the second.
// x = d*scale*q - dmin*min.
func dequantQ4K(data []byte, dst []float32) {
	const bs = 2 + 2 + 12 + QKK/2
	for i := 0; i < len(dst)/QKK; i++ {
		b := (*[bs]byte)(data[i*bs:])
		y := (*[QKK]float32)(dst[i*QKK:])
		d := F16ToF32(binary.LittleEndian.Uint16(b[0:]))
		dmin := F16ToF32(binary.LittleEndian.Uint16(b[2:]))
		scales := b[4:16]
		qs := b[16:bs]
		for k := range 4 { // 64 elements, two sub-blocks, per pass
			sc, m := scaleMinK4(2*k, scales)
			d1, m1 := d*float32(sc), dmin*float32(m)
			sc, m = scaleMinK4(2*k+1, scales)
			d2, m2 := d*float32(sc), dmin*float32(m)
			q := qs[32*k : 32*k+32]
			lo, hi := y[64*k:64*k+32], y[64*k+32:64*k+64]
			for l := range 32 {
				// Explicit conversions keep each product rounded, as GGML's C
				// does, instead of letting the compiler fuse a multiply-add.
				lo[l] = float32(d1*float32(q[l]&0xf)) - m1
				hi[l] = float32(d2*float32(q[l]>>4)) - m2
			}
		}
	}
}

// Q6_K super-block of 256: 128 bytes of low 4 bits, 64 bytes of high 2 bits, 16
// int8 scales (one per 16 elements), f16 d. Each half of 128 elements uses 64 low
// bytes, 32 high bytes and 8 scales; x = d*scale*(q-32).
func dequantQ6K(data []byte, dst []float32) {
	const bs = QKK/2 + QKK/4 + QKK/16 + 2
	for i := 0; i < len(dst)/QKK; i++ {
		b := (*[bs]byte)(data[i*bs:])
		y := (*[QKK]float32)(dst[i*QKK:])
		d := F16ToF32(binary.LittleEndian.Uint16(b[bs-2:]))
		for h := range 2 {
			ql := b[64*h : 64*h+64]
			qh := b[QKK/2+32*h : QKK/2+32*h+32]
			sc := b[QKK/2+QKK/4+8*h : QKK/2+QKK/4+8*h+8]
			yh := y[128*h : 128*h+128]
			for l := range 32 {
				is := l / 16
				q1 := int(ql[l]&0xf|(qh[l]&3)<<4) - 32
				q2 := int(ql[l+32]&0xf|(qh[l]>>2&3)<<4) - 32
				q3 := int(ql[l]>>4|(qh[l]>>4&3)<<4) - 32
				q4 := int(ql[l+32]>>4|(qh[l]>>6&3)<<4) - 32
				yh[l] = d * float32(int8(sc[is])) * float32(q1)
				yh[l+32] = d * float32(int8(sc[is+2])) * float32(q2)
				yh[l+64] = d * float32(int8(sc[is+4])) * float32(q3)
				yh[l+96] = d * float32(int8(sc[is+6])) * float32(q4)
			}
		}
	}
}

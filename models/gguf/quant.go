package gguf

import (
	"encoding/binary"
	"fmt"
	"math"
)

// The quantizers reproduce GGML's reference quantize_row_q8_0_ref and
// quantize_row_q4_0_ref bit for bit (the ones llama-quantize uses without an
// importance matrix), so a model quantized here has the same blocks as one
// quantized by llama.cpp. Every float operation below is a single rounded
// float32 operation in the same order as the C; explicit float32 conversions
// stop the Go compiler from fusing a multiply and an add where the C does not.

// QuantizeQ8_0 quantizes src to Q8_0 blocks. len(src) must be a multiple of QK;
// it panics otherwise, as an out-of-range index would.
func QuantizeQ8_0(src []float32) []byte {
	dst := make([]byte, len(src)/QK*(2+QK))
	if err := QuantizeQ8_0Into(dst, src); err != nil {
		panic(err)
	}
	return dst
}

// QuantizeQ8_0Into quantizes src into dst, which must be exactly
// len(src)/QK*34 bytes; len(src) must be a multiple of QK.
func QuantizeQ8_0Into(dst []byte, src []float32) error {
	if err := checkQuant(TypeQ8_0, dst, src); err != nil {
		return err
	}
	const bs = 2 + QK
	for i := 0; i < len(src)/QK; i++ {
		x := (*[QK]float32)(src[i*QK:])
		b := (*[bs]byte)(dst[i*bs:])
		amax := float32(0)
		for _, v := range x {
			// MAX(amax, fabsf(v)) is "amax > a ? amax : a".
			if a := abs32(v); !(amax > a) {
				amax = a
			}
		}
		d := amax / 127
		id := float32(0)
		if d != 0 {
			id = 1 / d
		}
		binary.LittleEndian.PutUint16(b[:], F32ToF16(d))
		q := b[2:bs]
		for j, v := range x {
			q[j] = uint8(int8(int32(roundAway(v * id))))
		}
	}
	return nil
}

// QuantizeQ4_0 quantizes src to Q4_0 blocks. len(src) must be a multiple of QK;
// it panics otherwise, as an out-of-range index would.
func QuantizeQ4_0(src []float32) []byte {
	dst := make([]byte, len(src)/QK*(2+QK/2))
	if err := QuantizeQ4_0Into(dst, src); err != nil {
		panic(err)
	}
	return dst
}

// QuantizeQ4_0Into quantizes src into dst, which must be exactly
// len(src)/QK*18 bytes; len(src) must be a multiple of QK.
//
// The scale comes from the element of largest magnitude, sign kept (the first
// one on ties): d = max/-8, so that element maps to quant 0 exactly and the
// others to min(15, trunc(x/d + 8.5)).
func QuantizeQ4_0Into(dst []byte, src []float32) error {
	if err := checkQuant(TypeQ4_0, dst, src); err != nil {
		return err
	}
	const bs = 2 + QK/2
	for i := 0; i < len(src)/QK; i++ {
		x := (*[QK]float32)(src[i*QK:])
		b := (*[bs]byte)(dst[i*bs:])
		amax, maxv := float32(0), float32(0)
		for _, v := range x {
			if a := abs32(v); amax < a {
				amax, maxv = a, v
			}
		}
		d := maxv / -8
		id := float32(0)
		if d != 0 {
			id = 1 / d
		}
		binary.LittleEndian.PutUint16(b[:], F32ToF16(d))
		q := b[2:bs]
		for j := range QK / 2 {
			q[j] = q4(x[j]*id) | q4(x[j+QK/2]*id)<<4
		}
	}
	return nil
}

// q4 is MIN(15, (int8_t)(x + 8.5f)) with C's truncating conversion.
func q4(x float32) uint8 {
	v := int8(int32(float32(x) + 8.5))
	if v > 15 {
		v = 15
	}
	return uint8(v)
}

func abs32(v float32) float32 { return math.Float32frombits(math.Float32bits(v) &^ (1 << 31)) }

// roundAway is C's roundf: nearest integer, halves away from zero. A float32 is
// exact in float64, so rounding there gives roundf's result.
func roundAway(x float32) float32 { return float32(math.Round(float64(x))) }

func checkQuant(t Type, dst []byte, src []float32) error {
	size, err := t.RowSize(len(src))
	if err != nil {
		return fmt.Errorf("%w: %d elements for %s: %v", ErrSize, len(src), t, err)
	}
	if size != len(dst) {
		return fmt.Errorf("%w: %d elements of %s take %d bytes, destination has %d", ErrSize, len(src), t, size, len(dst))
	}
	return nil
}

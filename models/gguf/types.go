package gguf

import (
	"fmt"
	"math"
)

// Type is a GGML tensor type, numbered as in ggml.h.
type Type uint32

// The tensor types of GGML's numbering (ggml.h). Those marked supported in the
// type table can be dequantized and computed with; the others have a name (and,
// where GGML fixes one, a block layout) so that a file holding one is refused by
// name. Numbers 4, 5 and 31..33, 36..38 belonged to removed types.
const (
	TypeF32     Type = 0
	TypeF16     Type = 1
	TypeQ4_0    Type = 2
	TypeQ4_1    Type = 3
	TypeQ5_0    Type = 6
	TypeQ5_1    Type = 7
	TypeQ8_0    Type = 8
	TypeQ8_1    Type = 9
	TypeQ2_K    Type = 10
	TypeQ3_K    Type = 11
	TypeQ4_K    Type = 12
	TypeQ5_K    Type = 13
	TypeQ6_K    Type = 14
	TypeQ8_K    Type = 15
	TypeIQ2_XXS Type = 16
	TypeIQ2_XS  Type = 17
	TypeIQ3_XXS Type = 18
	TypeIQ1_S   Type = 19
	TypeIQ4_NL  Type = 20
	TypeIQ3_S   Type = 21
	TypeIQ2_S   Type = 22
	TypeIQ4_XS  Type = 23
	TypeI8      Type = 24
	TypeI16     Type = 25
	TypeI32     Type = 26
	TypeI64     Type = 27
	TypeF64     Type = 28
	TypeIQ1_M   Type = 29
	TypeBF16    Type = 30
	TypeTQ1_0   Type = 34
	TypeTQ2_0   Type = 35
	TypeMXFP4   Type = 39
	TypeNVFP4   Type = 40
	TypeQ1_0    Type = 41
	TypeQ2_0    Type = 42
)

// QK is the number of weights in a Q4_0/Q4_1/Q5_0/Q5_1/Q8_0/IQ4_NL block; QKK
// in a K-quant (and IQ4_XS) super-block.
const (
	QK  = 32
	QKK = 256
)

type typeInfo struct {
	name      string
	blockSize int // elements per block
	typeSize  int // bytes per block
	supported bool
}

// typeTable holds GGML's block layouts (ggml-common.h): elements per block and
// bytes per block.
var typeTable = map[Type]typeInfo{
	TypeF32:  {"F32", 1, 4, true},
	TypeF16:  {"F16", 1, 2, true},
	TypeBF16: {"BF16", 1, 2, true},
	TypeQ4_0: {"Q4_0", QK, 2 + QK/2, true},         // f16 d, nibbles
	TypeQ4_1: {"Q4_1", QK, 2 + 2 + QK/2, true},     // f16 d, f16 m, nibbles
	TypeQ5_0: {"Q5_0", QK, 2 + 4 + QK/2, true},     // f16 d, 32 high bits, nibbles
	TypeQ5_1: {"Q5_1", QK, 2 + 2 + 4 + QK/2, true}, // f16 d, f16 m, 32 high bits, nibbles
	TypeQ8_0: {"Q8_0", QK, 2 + QK, true},           // f16 d, int8s
	TypeQ8_1: {"Q8_1", QK, 2 + 2 + QK, false},      // f16 d, f16 s, int8s
	TypeQ2_K: {"Q2_K", QKK, QKK/16 + QKK/4 + 2 + 2, true},
	TypeQ3_K: {"Q3_K", QKK, QKK/8 + QKK/4 + 12 + 2, true},
	TypeQ4_K: {"Q4_K", QKK, 2 + 2 + 12 + QKK/2, true},
	TypeQ5_K: {"Q5_K", QKK, 2 + 2 + 12 + QKK/8 + QKK/2, true},
	TypeQ6_K: {"Q6_K", QKK, QKK/2 + QKK/4 + QKK/16 + 2, true},
	TypeQ8_K: {"Q8_K", QKK, 4 + QKK + QKK/16*2, false},

	TypeIQ2_XXS: {"IQ2_XXS", QKK, 2 + QKK/4, false},
	TypeIQ2_XS:  {"IQ2_XS", QKK, 2 + QKK/4 + QKK/32, false},
	TypeIQ3_XXS: {"IQ3_XXS", QKK, 2 + 3*QKK/8, false},
	TypeIQ1_S:   {"IQ1_S", QKK, 2 + QKK/8 + QKK/16, false},
	TypeIQ4_NL:  {"IQ4_NL", QK, 2 + QK/2, true},                // f16 d, nibbles indexing a table
	TypeIQ3_S:   {"IQ3_S", QKK, 2 + 13*QKK/32 + QKK/64, false}, // d, qs, qh, signs, scales
	TypeIQ2_S:   {"IQ2_S", QKK, 2 + QKK/4 + QKK/16, false},
	TypeIQ4_XS:  {"IQ4_XS", QKK, 2 + 2 + QKK/64 + QKK/2, true}, // f16 d, scales_h, scales_l, nibbles
	TypeIQ1_M:   {"IQ1_M", QKK, QKK/8 + QKK/16 + QKK/32, false},
	TypeTQ1_0:   {"TQ1_0", QKK, (QKK-4*QKK/64)/5 + QKK/64 + 2, false},
	TypeTQ2_0:   {"TQ2_0", QKK, QKK/4 + 2, false},
	TypeMXFP4:   {"MXFP4", QK, 1 + QK/2, false},
	TypeNVFP4:   {"NVFP4", 64, 4 + 64/2, false},
	TypeQ1_0:    {"Q1_0", 128, 2 + 128/8, false},
	TypeQ2_0:    {"Q2_0", 64, 2 + 64/4, false},

	TypeI8:  {"I8", 1, 1, false},
	TypeI16: {"I16", 1, 2, false},
	TypeI32: {"I32", 1, 4, false},
	TypeI64: {"I64", 1, 8, false},
	TypeF64: {"F64", 1, 8, false},
}

// UnsupportedTypeError is the refusal of a tensor whose type Bulkhead cannot
// compute with. It wraps ErrUnsupportedType.
type UnsupportedTypeError struct {
	Tensor string
	Type   Type
}

func (e *UnsupportedTypeError) Error() string {
	return fmt.Sprintf("tensor %s has type %s, which Bulkhead does not support", e.Tensor, e.Type)
}

// Unwrap lets errors.Is match ErrUnsupportedType.
func (e *UnsupportedTypeError) Unwrap() error { return ErrUnsupportedType }

// String returns GGML's name for the type, or "type(N)" when unknown.
func (t Type) String() string {
	if ti, ok := typeTable[t]; ok {
		return ti.name
	}
	return fmt.Sprintf("type(%d)", uint32(t))
}

// Known reports whether the type's block layout is known (so sizes can be computed).
func (t Type) Known() bool { _, ok := typeTable[t]; return ok }

// Supported reports whether Bulkhead can dequantize and compute with the type.
func (t Type) Supported() bool { return typeTable[t].supported }

// BlockSize is the number of elements per block (1 for float types).
func (t Type) BlockSize() int { return typeTable[t].blockSize }

// TypeSize is the number of bytes per block.
func (t Type) TypeSize() int { return typeTable[t].typeSize }

// RowSize returns the bytes taken by n elements of type t, or an error when n is
// not a whole number of blocks or the type is unknown.
func (t Type) RowSize(n int) (int, error) {
	ti, ok := typeTable[t]
	if !ok {
		return 0, fmt.Errorf("%w: %s", ErrUnsupportedType, t)
	}
	if n%ti.blockSize != 0 {
		return 0, fmt.Errorf("%w: %d elements is not a multiple of %s's block of %d", ErrCorrupt, n, t, ti.blockSize)
	}
	return n / ti.blockSize * ti.typeSize, nil
}

// ParseType maps a name like "q8_0" or "F32" to its Type.
func ParseType(name string) (Type, error) {
	for t, ti := range typeTable {
		if equalFold(ti.name, name) {
			return t, nil
		}
	}
	return 0, fmt.Errorf("%w: %q", ErrUnsupportedType, name)
}

func equalFold(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		ca, cb := a[i], b[i]
		if 'A' <= ca && ca <= 'Z' {
			ca += 'a' - 'A'
		}
		if 'A' <= cb && cb <= 'Z' {
			cb += 'a' - 'A'
		}
		if ca != cb {
			return false
		}
	}
	return true
}

// F16ToF32 converts an IEEE half-precision value to float32 exactly.
func F16ToF32(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h) & 0x3ff
	switch {
	case exp == 0x1f: // Inf or NaN
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	case exp != 0: // normal
		return math.Float32frombits(sign | (exp+112)<<23 | mant<<13)
	case mant == 0: // zero
		return math.Float32frombits(sign)
	default: // subnormal: renormalize
		e := uint32(113)
		for mant&0x400 == 0 {
			mant <<= 1
			e--
		}
		mant &= 0x3ff
		return math.Float32frombits(sign | e<<23 | mant<<13)
	}
}

// F32ToF16 converts float32 to half precision, rounding to nearest even, as the
// F16C instruction VCVTPS2PH and GGML's scalar fallback do.
func F32ToF16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int32(b>>23) & 0xff
	mant := b & 0x7fffff
	if exp == 0xff { // Inf or NaN; keep NaN a (quiet) NaN
		if mant != 0 {
			return sign | 0x7e00 | uint16(mant>>13)
		}
		return sign | 0x7c00
	}
	e := exp - 127 + 15
	if e >= 0x1f {
		return sign | 0x7c00 // overflow to Inf
	}
	if e <= 0 {
		if e < -10 {
			return sign // underflow to zero
		}
		mant |= 0x800000
		shift := uint32(14 - e)
		half := mant >> shift
		rem := mant & (1<<shift - 1)
		mid := uint32(1) << (shift - 1)
		if rem > mid || (rem == mid && half&1 == 1) {
			half++
		}
		return sign | uint16(half)
	}
	half := uint32(e)<<10 | mant>>13
	rem := mant & 0x1fff
	if rem > 0x1000 || (rem == 0x1000 && half&1 == 1) {
		half++ // may carry into the exponent, which is correct rounding
	}
	return sign | uint16(half)
}

// BF16ToF32 converts a bfloat16 value to float32 exactly.
func BF16ToF32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// F32ToBF16 converts float32 to bfloat16 with round-to-nearest-even, as GGML does
// (NaNs stay quiet NaNs).
func F32ToBF16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 {
		return uint16(b>>16) | 64
	}
	return uint16((b + (0x7fff + (b>>16)&1)) >> 16)
}

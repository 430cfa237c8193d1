package kernels

import (
	"encoding/binary"

	"github.com/bulkhead-ai/bulkhead/models/gguf"
)

// Portable kernels for the 32-element block types beyond Q8_0/Q4_0: Q4_1 and
// Q5_1 (dotted with Q8_1 activations), Q5_0 and IQ4_NL (with Q8_0). Each
// computes what GGML's scalar ggml_vec_dot_<type>_<vec type>_generic does:
// exact integer block sums, then one float update of the sum per block, in
// block order, every product rounded to float32 as C rounds it.

// Block sizes in bytes.
const (
	q81Block   = 36 // Q8_1: f16 d, f16 s = d*sum(qs), int8 qs[32]
	q41Block   = 20 // Q4_1: f16 d, f16 m, uint8 qs[16]
	q50Block   = 22 // Q5_0: f16 d, uint8 qh[4], uint8 qs[16]
	q51Block   = 24 // Q5_1: f16 d, f16 m, uint8 qh[4], uint8 qs[16]
	iq4NLBlock = 18 // IQ4_NL: f16 d, uint8 qs[16]
)

// quantizeQ8_1 writes x (a multiple of 32 long) as Q8_1 blocks into dst, as
// GGML's quantize_row_q8_1_ref: d = amax/127 and q = round(x/d) (ties away
// from zero) as for Q8_0 (NaN blocks included), plus s = d*sum(q) stored as
// f16.
func quantizeQ8_1(dst []byte, x []float32) {
	for b := 0; b < len(x)/32; b++ {
		xs := x[b*32 : b*32+32 : b*32+32]
		o := dst[b*q81Block : b*q81Block+q81Block : b*q81Block+q81Block]
		d, id := q8Scale(xs)
		binary.LittleEndian.PutUint16(o[0:], gguf.F32ToF16(d))
		var sum int32
		for j, v := range xs {
			q := roundAway(v * id)
			o[4+j] = byte(q)
			sum += int32(q)
		}
		binary.LittleEndian.PutUint16(o[2:], gguf.F32ToF16(float32(sum)*d))
	}
}

// dotQ4_1Go is a Q4_1 weight row · Q8_1 activation row product over nb blocks:
// sum += (d_w*d_x)*isum + m_w*s_x per block.
func dotQ4_1Go(w, x []byte, nb int) float32 {
	var sum float32
	for b := range nb {
		wb := w[b*q41Block : b*q41Block+q41Block : b*q41Block+q41Block]
		xb := x[b*q81Block : b*q81Block+q81Block : b*q81Block+q81Block]
		var isum int32
		for j := range 16 {
			q := wb[4+j]
			isum += int32(q&15) * int32(int8(xb[4+j]))
			isum += int32(q>>4) * int32(int8(xb[20+j]))
		}
		sum = sum + legacyMinTerm(wb, xb, isum)
	}
	return sum
}

// legacyMinTerm is one Q4_1/Q5_1 block's contribution,
// (d_w*d_x)*isum + m_w*s_x, with GGML's roundings.
func legacyMinTerm(wb, xb []byte, isum int32) float32 {
	d := float32(half(wb[0:2]) * half(xb[0:2]))
	dm := float32(d * float32(isum))
	ms := float32(half(wb[2:4]) * half(xb[2:4]))
	return dm + ms
}

// q5Bits returns the fifth bits of elements j and j+16 of a Q5_0/Q5_1 block
// (bits j and j+16 of the little-endian qh word), shifted to bit 4.
func q5Bits(qh uint32, j int) (h0, h1 byte) {
	return byte(qh>>j<<4) & 0x10, byte(qh>>(j+12)) & 0x10
}

// dotQ5_0Go is a Q5_0 weight row · Q8_0 activation row product over nb blocks:
// sum += (d_w*d_x)*isum per block.
func dotQ5_0Go(w, x []byte, nb int) float32 {
	var sum float32
	for b := range nb {
		wb := w[b*q50Block : b*q50Block+q50Block : b*q50Block+q50Block]
		xb := x[b*q8Block : b*q8Block+q8Block : b*q8Block+q8Block]
		qh := binary.LittleEndian.Uint32(wb[2:6])
		var isum int32
		for j := range 16 {
			q := wb[6+j]
			h0, h1 := q5Bits(qh, j)
			isum += (int32(q&15|h0) - 16) * int32(int8(xb[2+j]))
			isum += (int32(q>>4|h1) - 16) * int32(int8(xb[18+j]))
		}
		d := float32(half(wb) * half(xb))
		sum = sum + float32(d*float32(isum))
	}
	return sum
}

// dotQ5_1Go is a Q5_1 weight row · Q8_1 activation row product over nb blocks,
// with the float order of dotQ4_1Go.
func dotQ5_1Go(w, x []byte, nb int) float32 {
	var sum float32
	for b := range nb {
		wb := w[b*q51Block : b*q51Block+q51Block : b*q51Block+q51Block]
		xb := x[b*q81Block : b*q81Block+q81Block : b*q81Block+q81Block]
		qh := binary.LittleEndian.Uint32(wb[4:8])
		var isum int32
		for j := range 16 {
			q := wb[8+j]
			h0, h1 := q5Bits(qh, j)
			isum += int32(q&15|h0) * int32(int8(xb[4+j]))
			isum += int32(q>>4|h1) * int32(int8(xb[20+j]))
		}
		sum = sum + legacyMinTerm(wb, xb, isum)
	}
	return sum
}

// dotIQ4NLGo is an IQ4_NL weight row · Q8_0 activation row product over nb
// blocks: sum += (d_x*d_w)*isum per block, each nibble a codebook level.
func dotIQ4NLGo(w, x []byte, nb int) float32 {
	kv := &gguf.IQ4NLValues
	var sum float32
	for b := range nb {
		wb := w[b*iq4NLBlock : b*iq4NLBlock+iq4NLBlock : b*iq4NLBlock+iq4NLBlock]
		xb := x[b*q8Block : b*q8Block+q8Block : b*q8Block+q8Block]
		var isum int32
		for j := range 16 {
			q := wb[2+j]
			isum += int32(kv[q&15]) * int32(int8(xb[2+j]))
			isum += int32(kv[q>>4]) * int32(int8(xb[18+j]))
		}
		d := float32(half(xb) * half(wb))
		sum = sum + float32(d*float32(isum))
	}
	return sum
}

package kernels

import (
	"math"
	"unsafe"

	"github.com/bulkhead-ai/bulkhead/models/gguf"
)

// KV cache rows held in 32-value blocks, as llama.cpp's -ctk/-ctv q8_0 and
// q4_0 hold them: a Q8_0 block is an f16 scale and 32 int8 values (34
// bytes), a Q4_0 block an f16 scale and 32 4-bit values (18 bytes). The
// cache keeps its pages as []uint16, so a block is 17 or 9 halves and the
// functions here take rows as halves; every row starts on a block.
const (
	Q8Halves = q8Block / 2 // halves per 32-value Q8_0 block
	Q4Halves = q4Block / 2 // halves per 32-value Q4_0 block
)

// halfBytes views halves as their little-endian bytes.
func halfBytes(h []uint16) []byte {
	if len(h) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&h[0])), 2*len(h))
}

// QuantizeQ8Row writes x (a multiple of 32 long) as Q8_0 blocks into dst
// (len(x)/32*34 bytes) as llama.cpp's x86 CPU quantizer does, the one that
// stores its quantized KV cache and quantizes its flash attention's queries:
// d = amax/127 stored as f16, q = x*(127/amax) rounded half to even. amax
// is absMax's, so a block with a NaN has a NaN scale, and a NaN or infinite
// product is code 0 (kvCode), as the activation quantizers have them.
func QuantizeQ8Row(dst []byte, x []float32) {
	_ = dst[len(x)/32*q8Block-1]
	for b := 0; b < len(x)/32; b++ {
		xs := x[b*32 : b*32+32 : b*32+32]
		o := dst[b*q8Block : b*q8Block+q8Block : b*q8Block+q8Block]
		amax := absMax(xs)
		h := gguf.F32ToF16(amax / 127)
		o[0], o[1] = byte(h), byte(h>>8)
		var id float32
		if amax != 0 {
			id = 127 / amax
		}
		for j, v := range xs {
			o[2+j] = byte(kvCode(roundEven(v * id)))
		}
	}
}

// kvCode is a KV quantizer's rounded (or offset) product as an integer code:
// 0 for a NaN or infinite one, which only a block with a NaN or an infinity
// or a scale whose inverse overflows gives (Go leaves converting those to
// the platform: amd64 gives 0, arm64 saturates), as roundAway does.
func kvCode(v float32) int8 {
	if v-v != 0 {
		return 0
	}
	return int8(v)
}

// roundEven rounds x (|x| < 2^22) to the nearest integer, ties to even, as
// the CPU's default rounding does: adding and taking back 1.5*2^23 leaves no
// fraction bits in between.
func roundEven(x float32) float32 {
	const magic = 1.5 * (1 << 23)
	return float32(x+magic) - magic
}

// QuantizeQ8Halves is QuantizeQ8Row into a row of halves (len(x)/32*17).
func QuantizeQ8Halves(dst []uint16, x []float32) {
	QuantizeQ8Row(halfBytes(dst[:len(x)/32*Q8Halves]), x)
}

// QuantizeQ4Halves writes x (a multiple of 32 long) as Q4_0 blocks into dst
// (len(x)/32*9 halves) as llama.cpp's quantize_row_q4_0_ref does (its CPU
// quantizer for Q4_0): d = m/-8 where m is the value of largest magnitude,
// q = min(15, trunc(x/d + 8.5)), values j and j+16 sharing byte j. m is
// the first value of the largest |x| compared as bits (absMax's order), so
// a block with a NaN has a NaN scale, where llama.cpp's float compare skips
// the NaN and stores it as a finite code; a NaN or infinite x/d + 8.5 is
// code 0 (kvCode).
func QuantizeQ4Halves(dst []uint16, x []float32) {
	out := halfBytes(dst[:len(x)/32*Q4Halves])
	for b := 0; b < len(x)/32; b++ {
		xs := x[b*32 : b*32+32 : b*32+32]
		o := out[b*q4Block : b*q4Block+q4Block : b*q4Block+q4Block]
		var amax uint32
		var m float32
		for _, v := range xs {
			if a := math.Float32bits(v) &^ (1 << 31); a > amax {
				amax, m = a, v
			}
		}
		d := m / -8
		var id float32
		if d != 0 {
			id = 1 / d
		}
		h := gguf.F32ToF16(d)
		o[0], o[1] = byte(h), byte(h>>8)
		for j := range 16 {
			q0 := min(15, kvCode(float32(xs[j]*id)+8.5))
			q1 := min(15, kvCode(float32(xs[16+j]*id)+8.5))
			o[2+j] = byte(q0) | byte(q1)<<4
		}
	}
}

// DotsQ8 sets out[j] = dot(key j, q) * scale for j < len(out), where q is a
// Q8_0 row of nb blocks and key j the Q8_0 row at k[j*stride:] (stride in
// halves): per block the integer sum is exact, sum += (dk*dq)*isum in block
// order, as MatMul's Q8_0 rows. Bitwise the same on every set.
func (ks Set) DotsQ8(out []float32, q []byte, k []uint16, stride int, scale float32) {
	ks.dotsQ(out, q, k, stride, scale, Q8Halves)
}

// DotsQ4 is DotsQ8 for Q4_0 keys (the query is Q8_0, as for Q4_0 weights).
func (ks Set) DotsQ4(out []float32, q []byte, k []uint16, stride int, scale float32) {
	ks.dotsQ(out, q, k, stride, scale, Q4Halves)
}

func (ks Set) dotsQ(out []float32, q []byte, k []uint16, stride int, scale float32, bh int) {
	nb := len(q) / q8Block
	if len(out) == 0 || nb == 0 {
		return
	}
	_ = k[(len(out)-1)*stride+nb*bh-1]
	kb := halfBytes(k)
	j := 0
	if ks.asm() {
		var t [4]float32
		for ; j+4 <= len(out); j += 4 {
			dot4Q(bh, &kb[2*j*stride], uintptr(2*stride), &q[0], nb, &t)
			for i := range 4 {
				out[j+i] = t[i] * scale
			}
		}
		for ; j < len(out); j++ {
			dot4Q(bh, &kb[2*j*stride], 0, &q[0], nb, &t) // stride 0: row j four times
			out[j] = t[0] * scale
		}
		return
	}
	for ; j < len(out); j++ {
		row := kb[2*j*stride : 2*j*stride+2*nb*bh]
		if bh == Q8Halves {
			out[j] = dotQ8Go(row, q, nb) * scale
		} else {
			out[j] = dotQ4Go(row, q, nb) * scale
		}
	}
}

// dot4Q calls the four-row Q8_0 or Q4_0 (by block size in halves) product.
func dot4Q(bh int, w *byte, wstride uintptr, x *byte, nb int, out *[4]float32) {
	if bh == Q8Halves {
		dot4Q8AVX(w, wstride, x, nb, out)
	} else {
		dot4Q4AVX(w, wstride, x, nb, out)
	}
}

// AxpysQ8 adds w[j]*v_j[i] to dst[i] for i < len(dst), key j after key j for
// j < len(w), where v_j is the Q8_0 row at v[j*stride:] (stride in halves):
// per block c = w[j]*d, then dst[i] = dst[i] + c*q[i], each product rounded.
// Bitwise the same on every set.
func (ks Set) AxpysQ8(dst []float32, w []float32, v []uint16, stride int) {
	nb := len(dst) / 32
	if len(w) == 0 || nb == 0 {
		return
	}
	_ = v[(len(w)-1)*stride+nb*Q8Halves-1]
	vb := halfBytes(v)
	if ks.asm() {
		axpysQ8AVX(&dst[0], &w[0], &vb[0], uintptr(2*stride), len(w), nb)
		return
	}
	for j, a := range w {
		row := vb[2*j*stride:]
		for b := range nb {
			blk := row[b*q8Block : b*q8Block+q8Block : b*q8Block+q8Block]
			c := a * half(blk)
			o := dst[b*32 : b*32+32 : b*32+32]
			for i := range o {
				o[i] = o[i] + float32(c*float32(int8(blk[2+i])))
			}
		}
	}
}

// AxpysQ4 is AxpysQ8 for Q4_0 rows: value i of a block is (nibble-8).
func (ks Set) AxpysQ4(dst []float32, w []float32, v []uint16, stride int) {
	nb := len(dst) / 32
	if len(w) == 0 || nb == 0 {
		return
	}
	_ = v[(len(w)-1)*stride+nb*Q4Halves-1]
	vb := halfBytes(v)
	if ks.asm() {
		axpysQ4AVX(&dst[0], &w[0], &vb[0], uintptr(2*stride), len(w), nb)
		return
	}
	for j, a := range w {
		row := vb[2*j*stride:]
		for b := range nb {
			blk := row[b*q4Block : b*q4Block+q4Block : b*q4Block+q4Block]
			c := a * half(blk)
			o := dst[b*32 : b*32+32 : b*32+32]
			for i := range 16 {
				o[i] = o[i] + float32(c*float32(int8(blk[2+i]&15)-8))
				o[16+i] = o[16+i] + float32(c*float32(int8(blk[2+i]>>4)-8))
			}
		}
	}
}

// FWHT rotates x (a power-of-two length n) in place by the orthonormal
// Walsh-Hadamard matrix of size n (Sylvester's order; it is its own
// inverse), as llama.cpp's CPU backend does before a quantized KV cache
// stores K and V (and after attention, to turn the output back): x is first
// scaled by 1/sqrt(n), then butterflies of span 1, 2, 4, ... replace each
// pair (u, v) by (u+v, u-v). The same bits on every set.
func FWHT(x []float32) {
	n := len(x)
	if n&(n-1) != 0 {
		panic("kernels: FWHT of a length that is not a power of two")
	}
	scale := 1 / float32(math.Sqrt(float64(n)))
	for i := range x {
		x[i] *= scale
	}
	for span := 1; span < n; span <<= 1 {
		for i := 0; i < n; i += 2 * span {
			a, b := x[i:i+span:i+span], x[i+span:i+2*span:i+2*span]
			for j := range a {
				u, v := a[j], b[j]
				a[j], b[j] = u+v, u-v
			}
		}
	}
}

// Dots4Q8 is DotsQ8 for the four queries held one after another in q (each
// a Q8_0 row of nb blocks, len(q) = 4*nb*34) against the same nk keys: the
// query heads that share a KV head. It sets out[i*ostride+j] = dot(key j,
// query i) * scale, bitwise four DotsQ8 calls; each key is loaded once for
// the four.
func (ks Set) Dots4Q8(out []float32, ostride, nk int, q []byte, k []uint16, stride int, scale float32) {
	ks.dots4Q(out, ostride, nk, q, k, stride, scale, Q8Halves)
}

// Dots4Q4 is Dots4Q8 for Q4_0 keys.
func (ks Set) Dots4Q4(out []float32, ostride, nk int, q []byte, k []uint16, stride int, scale float32) {
	ks.dots4Q(out, ostride, nk, q, k, stride, scale, Q4Halves)
}

func (ks Set) dots4Q(out []float32, ostride, nk int, q []byte, k []uint16, stride int, scale float32, bh int) {
	nb := len(q) / 4 / q8Block
	if nk == 0 || nb == 0 {
		return
	}
	_ = out[3*ostride+nk-1]
	_ = k[(nk-1)*stride+nb*bh-1]
	if ks.asm() {
		kb := halfBytes(k)
		if bh == Q8Halves {
			dots4Q8AVX(&out[0], uintptr(4*ostride), &q[0], &kb[0], uintptr(2*stride), nk, nb, scale)
		} else {
			dots4Q4AVX(&out[0], uintptr(4*ostride), &q[0], &kb[0], uintptr(2*stride), nk, nb, scale)
		}
		return
	}
	for i := range 4 {
		ks.dotsQ(out[i*ostride:i*ostride+nk], q[i*nb*q8Block:(i+1)*nb*q8Block], k, stride, scale, bh)
	}
}

// Axpys4Q8 is AxpysQ8 for four outputs sharing the values: dst holds the 4
// outputs one after another (len(dst)/4 values each, a multiple of 32), and
// query i's weight for key j is w[i*wstride+j], j < nk. Bitwise four AxpysQ8
// calls; each value row is loaded and converted once for the four.
func (ks Set) Axpys4Q8(dst []float32, w []float32, wstride, nk int, v []uint16, stride int) {
	ks.axpys4Q(dst, w, wstride, nk, v, stride, Q8Halves)
}

// Axpys4Q4 is Axpys4Q8 for Q4_0 values.
func (ks Set) Axpys4Q4(dst []float32, w []float32, wstride, nk int, v []uint16, stride int) {
	ks.axpys4Q(dst, w, wstride, nk, v, stride, Q4Halves)
}

func (ks Set) axpys4Q(dst []float32, w []float32, wstride, nk int, v []uint16, stride int, bh int) {
	hd := len(dst) / 4
	nb := hd / 32
	if nk == 0 || nb == 0 {
		return
	}
	_ = w[3*wstride+nk-1]
	_ = v[(nk-1)*stride+nb*bh-1]
	if ks.asm() {
		vb := halfBytes(v)
		if bh == Q8Halves {
			axpys4Q8AVX(&dst[0], uintptr(4*hd), &w[0], uintptr(4*wstride), &vb[0], uintptr(2*stride), nk, nb)
		} else {
			axpys4Q4AVX(&dst[0], uintptr(4*hd), &w[0], uintptr(4*wstride), &vb[0], uintptr(2*stride), nk, nb)
		}
		return
	}
	for i := range 4 {
		o, wi := dst[i*hd:(i+1)*hd], w[i*wstride:i*wstride+nk]
		if bh == Q8Halves {
			ks.AxpysQ8(o, wi, v, stride)
		} else {
			ks.AxpysQ4(o, wi, v, stride)
		}
	}
}

package kernels

import (
	"math"

	"github.com/bulkhead-ai/bulkhead/models/gguf"
)

// Block sizes in bytes of the formats handled here.
const (
	q8Block  = 34  // Q8_0: f16 d, int8 qs[32]
	q4Block  = 18  // Q4_0: f16 d, uint8 qs[16]
	q4KBlock = 144 // Q4_K: f16 d, f16 dmin, uint8 scales[12], uint8 qs[128]
	q6KBlock = 210 // Q6_K: uint8 ql[128], uint8 qh[64], int8 scales[16], f16 d
)

// quantizeQ8 writes x (a multiple of 32 long) as Q8_0 blocks into dst, as GGML's
// reference quantize_row_q8_0 does: d = amax/127 stored as f16, q = round(x/d)
// with ties away from zero. A block with a NaN gets a NaN scale (so every
// product with it is NaN, as in float arithmetic) and zero quants (roundAway).
func quantizeQ8(dst []byte, x []float32) {
	for b := 0; b < len(x)/32; b++ {
		xs := x[b*32 : b*32+32 : b*32+32]
		o := dst[b*q8Block : b*q8Block+q8Block : b*q8Block+q8Block]
		d, id := q8Scale(xs)
		h := gguf.F32ToF16(d)
		o[0], o[1] = byte(h), byte(h>>8)
		for j, v := range xs {
			o[2+j] = byte(roundAway(v * id))
		}
	}
}

// q8Scale is a 32-value block's scale for 8-bit quantization, as GGML's
// reference quantizers take it: d = amax/127 and its inverse (0 for a block
// of zeros). amax is the largest |x| taken on the bits, as the vector
// quantizers take it: a NaN beats every number (the one with the largest
// payload, if there are several), so a block with a NaN has a NaN scale.
func q8Scale(xs []float32) (d, id float32) {
	d = absMax(xs) / 127
	if d != 0 {
		id = 1 / d
	}
	return d, id
}

// absMax is the largest |x| of xs compared as bits (sign cleared): as
// floats for every number and infinity, and above them all for a NaN.
func absMax(xs []float32) float32 {
	var m uint32
	for _, v := range xs {
		m = max(m, math.Float32bits(v)&^(1<<31))
	}
	return math.Float32frombits(m)
}

// roundAway rounds v to the nearest integer, ties away from zero (C's
// roundf), as an int8. A NaN or infinite v, which only a block with a NaN
// or an infinity or a vanishing scale gives, is 0: Go leaves converting
// those to an integer to the platform, and the vector quantizers agree on 0.
func roundAway(v float32) int8 {
	if v-v != 0 { // NaN or ±Inf
		return 0
	}
	return int8(math.Round(float64(v)))
}

func abs32(v float32) float32 { return math.Float32frombits(math.Float32bits(v) &^ (1 << 31)) }

// q8K is GGML's block_q8_K: the activation format K-quant weights are dotted with.
type q8K struct {
	d     float32
	qs    [256]int8
	bsums [16]int16
}

// quantizeQ8K writes x (a multiple of 256 long) as Q8_K blocks, as GGML's
// quantize_row_q8_K_ref: scale from the value of largest magnitude, mapped to
// -127, round to nearest even, clamp at 127. A block with a NaN is zero
// quants with a NaN scale (absMax's), as in quantizeQ8; a NaN or infinite
// product (an infinity in the block) quantizes to 0.
func quantizeQ8K(dst []q8K, x []float32) {
	for b := range dst[:len(x)/256] {
		xs := x[b*256 : b*256+256 : b*256+256]
		o := &dst[b]
		if m := absMax(xs); m != m {
			*o = q8K{d: m}
			continue
		}
		var amax, vmax float32
		for _, v := range xs {
			if a := abs32(v); a > amax {
				amax, vmax = a, v
			}
		}
		if amax == 0 {
			*o = q8K{}
			continue
		}
		iscale := -127 / vmax
		for j, v := range xs {
			q := iscale * v
			if q-q != 0 { // NaN or ±Inf
				q = 0
			}
			o.qs[j] = int8(min(127, int(math.RoundToEven(float64(q)))))
		}
		for j := range 16 {
			var s int16
			for _, q := range o.qs[j*16 : j*16+16] {
				s += int16(q)
			}
			o.bsums[j] = s
		}
		o.d = 1 / iscale
	}
}

// q4KScaleMin returns the 6-bit scale and min of sub-block j (0..7) from the
// 12 packed bytes of a Q4_K super-block.
func q4KScaleMin(j int, s []byte) (sc, m uint8) {
	if j < 4 {
		return s[j] & 63, s[j+4] & 63
	}
	return s[j+4]&0xF | (s[j-4]>>6)<<4, s[j+4]>>4 | (s[j]>>6)<<4
}

// dotQ4KGo is a Q4_K weight row · Q8_K activation row product. Per super-block
// the integer sums are exact; sum += (d*dx)*isum, then sum -= (dmin*dx)*msum.
func dotQ4KGo(w []byte, x []q8K) float32 {
	var sum float32
	for b := range x {
		wb := w[b*q4KBlock : b*q4KBlock+q4KBlock : b*q4KBlock+q4KBlock]
		xb := &x[b]
		sc := wb[4:16]
		qs := wb[16:144]
		var isum, msum int32
		for j := range 4 { // 64 elements: low nibbles then high nibbles of 32 bytes
			s1, m1 := q4KScaleMin(2*j, sc)
			s2, m2 := q4KScaleMin(2*j+1, sc)
			q := qs[j*32 : j*32+32]
			xl := xb.qs[j*64 : j*64+32]
			xh := xb.qs[j*64+32 : j*64+64]
			var lo, hi int32
			for l := range 32 {
				lo += int32(q[l]&15) * int32(xl[l])
				hi += int32(q[l]>>4) * int32(xh[l])
			}
			isum += int32(s1)*lo + int32(s2)*hi
			msum += int32(m1)*int32(xb.bsums[4*j]+xb.bsums[4*j+1]) +
				int32(m2)*int32(xb.bsums[4*j+2]+xb.bsums[4*j+3])
		}
		d := float32(half(wb[0:2]) * xb.d)
		dmin := float32(half(wb[2:4]) * xb.d)
		sum = sum + float32(d*float32(isum))
		sum = sum - float32(dmin*float32(msum))
	}
	return sum
}

// dotQ6KGo is a Q6_K weight row · Q8_K activation row product:
// sum += (d*dx)*isum per super-block, isum exact.
func dotQ6KGo(w []byte, x []q8K) float32 {
	var sum float32
	for b := range x {
		wb := w[b*q6KBlock : b*q6KBlock+q6KBlock : b*q6KBlock+q6KBlock]
		xb := &x[b]
		var isum int32
		for h := range 2 { // two halves of 128 elements
			ql := wb[h*64 : h*64+64]
			qh := wb[128+h*32 : 128+h*32+32]
			sc := wb[192+h*8 : 192+h*8+8]
			xs := xb.qs[h*128 : h*128+128]
			var part [8]int32 // per 16-element sub-block
			for l := range 32 {
				is := l / 16
				q1 := int32(ql[l]&15|(qh[l]&3)<<4) - 32
				q2 := int32(ql[l+32]&15|(qh[l]>>2&3)<<4) - 32
				q3 := int32(ql[l]>>4|(qh[l]>>4&3)<<4) - 32
				q4 := int32(ql[l+32]>>4|(qh[l]>>6&3)<<4) - 32
				part[is] += q1 * int32(xs[l])
				part[is+2] += q2 * int32(xs[l+32])
				part[is+4] += q3 * int32(xs[l+64])
				part[is+6] += q4 * int32(xs[l+96])
			}
			for j := range 8 {
				isum += int32(int8(sc[j])) * part[j]
			}
		}
		d := float32(half(wb[208:210]) * xb.d)
		sum = sum + float32(d*float32(isum))
	}
	return sum
}

// dequantQ4K writes one Q4_K row (len(dst) a multiple of 256) as float32.
func dequantQ4K(dst []float32, w []byte) {
	for b := 0; b < len(dst)/256; b++ {
		wb := w[b*q4KBlock : b*q4KBlock+q4KBlock]
		d, dmin := half(wb[0:2]), half(wb[2:4])
		sc, qs := wb[4:16], wb[16:144]
		y := dst[b*256 : b*256+256]
		for j := range 4 {
			s1, m1 := q4KScaleMin(2*j, sc)
			s2, m2 := q4KScaleMin(2*j+1, sc)
			d1, n1 := float32(d*float32(s1)), float32(dmin*float32(m1))
			d2, n2 := float32(d*float32(s2)), float32(dmin*float32(m2))
			q := qs[j*32 : j*32+32]
			for l := range 32 {
				y[j*64+l] = float32(d1*float32(q[l]&15)) - n1
				y[j*64+32+l] = float32(d2*float32(q[l]>>4)) - n2
			}
		}
	}
}

// dequantQ6K writes one Q6_K row (len(dst) a multiple of 256) as float32.
func dequantQ6K(dst []float32, w []byte) {
	for b := 0; b < len(dst)/256; b++ {
		wb := w[b*q6KBlock : b*q6KBlock+q6KBlock]
		d := half(wb[208:210])
		for h := range 2 {
			ql := wb[h*64 : h*64+64]
			qh := wb[128+h*32 : 128+h*32+32]
			sc := wb[192+h*8 : 192+h*8+8]
			y := dst[b*256+h*128 : b*256+h*128+128]
			for l := range 32 {
				is := l / 16
				q1 := float32(int32(ql[l]&15|(qh[l]&3)<<4) - 32)
				q2 := float32(int32(ql[l+32]&15|(qh[l]>>2&3)<<4) - 32)
				q3 := float32(int32(ql[l]>>4|(qh[l]>>4&3)<<4) - 32)
				q4 := float32(int32(ql[l+32]>>4|(qh[l]>>6&3)<<4) - 32)
				y[l] = float32(d*float32(int8(sc[is]))) * q1
				y[l+32] = float32(d*float32(int8(sc[is+2]))) * q2
				y[l+64] = float32(d*float32(int8(sc[is+4]))) * q3
				y[l+96] = float32(d*float32(int8(sc[is+6]))) * q4
			}
		}
	}
}

package kernels

import (
	"encoding/binary"

	"github.com/bulkhead-ai/bulkhead/models/gguf"
)

// Portable kernels for Q2_K, Q3_K, Q5_K and IQ4_XS weights against Q8_K
// activations. Q2_K computes what GGML's scalar ggml_vec_dot_q2_K_q8_K_generic
// does, float operation for float operation; IQ4_XS follows GGML's x86 kernel
// (see dotIQ4XSGo). Q3_K and Q5_K keep eight float lane sums across
// super-blocks, added together only at the end, as GGML's kernels do, with
// lane l collecting the l-th 32 elements of every super-block (for Q5_K a
// sub-block, for Q3_K two): each lane's integer sum per super-block then takes
// one scale multiply per 16 or 32 products, where GGML's generic lanes
// (elements l mod 8) need one per 4. A single sum per super-block, as Q4_K's,
// fails a greedy golden (docs/engine.md).

// Super-block sizes in bytes.
const (
	q2KBlock   = 84  // Q2_K: uint8 scales[16], uint8 qs[64], f16 d, f16 dmin
	q3KBlock   = 110 // Q3_K: uint8 hmask[32], uint8 qs[64], uint8 scales[12], f16 d
	q5KBlock   = 176 // Q5_K: f16 d, f16 dmin, uint8 scales[12], uint8 qh[32], uint8 qs[128]
	iq4XSBlock = 136 // IQ4_XS: f16 d, u16 scales_h, uint8 scales_l[4], uint8 qs[128]
)

// dotQ2KGo is a Q2_K weight row · Q8_K activation row product. Per super-block
// the integer sums are exact; sum += (dx*d)*isum - (dx*dmin)*msum.
func dotQ2KGo(w []byte, x []q8K) float32 {
	var sum float32
	for b := range x {
		wb := w[b*q2KBlock : b*q2KBlock+q2KBlock : b*q2KBlock+q2KBlock]
		xb := &x[b]
		sc := wb[0:16]
		var msum int32
		for j := range 16 {
			msum += int32(xb.bsums[j]) * int32(sc[j]>>4)
		}
		var isum int32
		for h := range 2 { // 128 elements from 32 quant bytes, four shifts
			q := wb[16+32*h : 16+32*h+32]
			for j := range 4 {
				shift := 2 * j
				xs := xb.qs[128*h+32*j : 128*h+32*j+32]
				var lo, hi int32
				for l := range 16 {
					lo += int32(xs[l]) * int32(q[l]>>shift&3)
					hi += int32(xs[16+l]) * int32(q[16+l]>>shift&3)
				}
				isum += int32(sc[8*h+2*j]&15)*lo + int32(sc[8*h+2*j+1]&15)*hi
			}
		}
		dall := float32(xb.d * half(wb[80:82]))
		dmin := float32(xb.d * half(wb[82:84]))
		sum = sum + (float32(dall*float32(isum)) - float32(dmin*float32(msum)))
	}
	return sum
}

// q3KScales unpacks the 16 signed 6-bit sub-block scales of a Q3_K block.
func q3KScales(s []byte) (out [16]int32) {
	for j := range out {
		lo := s[j%8] & 15
		if j >= 8 {
			lo = s[j%8] >> 4
		}
		hi := s[8+j%4] >> (2 * (j / 4)) & 3
		out[j] = int32(lo|hi<<4) - 32
	}
	return out
}

// addLanes adds per-lane sums d*lane[l] into acc after each super-block of
// Q3_K or Q5_K.
func addLanes(acc *[8]float32, d float32, lane *[8]int32) {
	for l := range 8 {
		acc[l] = acc[l] + float32(d*float32(lane[l]))
	}
}

// dotQ3KGo is a Q3_K weight row · Q8_K activation row product.
func dotQ3KGo(w []byte, x []q8K) float32 {
	var acc [8]float32
	for b := range x {
		wb := w[b*q3KBlock : b*q3KBlock+q3KBlock : b*q3KBlock+q3KBlock]
		xb := &x[b]
		hm := wb[0:32]
		scales := q3KScales(wb[96:108])
		var lane [8]int32
		for h := range 2 {
			q := wb[32+32*h : 32+32*h+32]
			for j := range 4 {
				shift, m := 2*j, byte(1)<<(4*h+j)
				e0 := 128*h + 32*j
				xs := xb.qs[e0 : e0+32]
				s0, s1 := scales[e0/16], scales[e0/16+1]
				for l := range 32 {
					v := int32(q[l] >> shift & 3)
					if hm[l]&m == 0 {
						v -= 4
					}
					s := s0
					if l >= 16 {
						s = s1
					}
					lane[e0/32] += s * (v * int32(xs[l]))
				}
			}
		}
		addLanes(&acc, float32(half(wb[108:110])*xb.d), &lane)
	}
	var sum float32
	for l := range 8 {
		sum = sum + acc[l]
	}
	return sum
}

// dotQ5KGo is a Q5_K weight row · Q8_K activation row product: lane sums as in
// dotQ3KGo, and sum -= (dmin*dx)*msum per super-block.
func dotQ5KGo(w []byte, x []q8K) float32 {
	var acc [8]float32
	var sum float32
	for b := range x {
		wb := w[b*q5KBlock : b*q5KBlock+q5KBlock : b*q5KBlock+q5KBlock]
		xb := &x[b]
		sc := wb[4:16]
		qh := wb[16:48]
		qs := wb[48:176]
		var lane [8]int32
		var msum int32
		for k := range 4 { // 64 elements: low nibbles then high nibbles of 32 bytes
			s1, m1 := q4KScaleMin(2*k, sc)
			s2, m2 := q4KScaleMin(2*k+1, sc)
			msum += int32(m1)*(int32(xb.bsums[4*k])+int32(xb.bsums[4*k+1])) +
				int32(m2)*(int32(xb.bsums[4*k+2])+int32(xb.bsums[4*k+3]))
			u1, u2 := byte(1)<<(2*k), byte(2)<<(2*k)
			q := qs[32*k : 32*k+32]
			xl := xb.qs[64*k : 64*k+32]
			xh := xb.qs[64*k+32 : 64*k+64]
			for l := range 32 {
				v1, v2 := int32(q[l]&15), int32(q[l]>>4)
				if qh[l]&u1 != 0 {
					v1 += 16
				}
				if qh[l]&u2 != 0 {
					v2 += 16
				}
				lane[2*k] += int32(s1) * (v1 * int32(xl[l]))
				lane[2*k+1] += int32(s2) * (v2 * int32(xh[l]))
			}
		}
		addLanes(&acc, float32(half(wb[0:2])*xb.d), &lane)
		dmin := float32(half(wb[2:4]) * xb.d)
		sum = sum - float32(dmin*float32(msum))
	}
	for l := range 8 {
		sum = sum + acc[l]
	}
	return sum
}

// dotIQ4XSGo is an IQ4_XS weight row · Q8_K activation row product:
// sum += (d*dx)*isum per super-block, where isum = sum of scale*subsum over
// the eight 32-element sub-blocks, exact in integers.
//
// This is the arithmetic of llama.cpp's x86 (AVX2) kernel, not of its scalar
// generic one, which rounds sum += ((d*dx)*scale)*subsum per sub-block: with
// the generic order one of the four greedy golden cases of
// ../shared/models/quant/llama-tiny-iq4_xs.gguf diverges at a margin of 0.0204,
// just past the near-tie bound; with this one all four match.
func dotIQ4XSGo(w []byte, x []q8K) float32 {
	kv := &gguf.IQ4NLValues
	var sum float32
	for b := range x {
		wb := w[b*iq4XSBlock : b*iq4XSBlock+iq4XSBlock : b*iq4XSBlock+iq4XSBlock]
		xb := &x[b]
		sh := binary.LittleEndian.Uint16(wb[2:4])
		var isum int32
		for ib := range 8 {
			q := wb[8+16*ib : 8+16*ib+16]
			xs := xb.qs[32*ib : 32*ib+32]
			var sub int32
			for j := range 16 {
				sub += int32(xs[j]) * int32(kv[q[j]&15])
				sub += int32(xs[16+j]) * int32(kv[q[j]>>4])
			}
			isum += int32(gguf.IQ4XSScale(ib, sh, wb[4:8])) * sub
		}
		d := float32(half(wb[0:2]) * xb.d)
		sum = sum + float32(d*float32(isum))
	}
	return sum
}

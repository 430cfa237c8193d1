package kernels

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/bulkhead-ai/bulkhead/models/gguf"
)

// dequantKV returns one Q8_0 (bh 17) or Q4_0 (bh 9) row of n values as
// float64, read from the GGML block layouts directly.
func dequantKV(row []uint16, n, bh int) []float64 {
	b := halfBytes(row)
	out := make([]float64, n)
	for k := range n / 32 {
		blk := b[k*2*bh:]
		d := float64(gguf.F16ToF32(rd16(blk)))
		for i := range 32 {
			switch bh {
			case Q8Halves:
				out[k*32+i] = d * float64(int8(blk[2+i]))
			default:
				q := blk[2+i%16] & 15
				if i >= 16 {
					q = blk[2+i%16] >> 4
				}
				out[k*32+i] = d * float64(int(q)-8)
			}
		}
	}
	return out
}

// TestQuantizeKV: both quantizers round-trip values within half a step of
// their block's scale (Q4_0: a step where it clamps), keep zeros and signs, and write the exact codes of
// llama.cpp's rules at the cases that tell them apart (Q8_0's ties go to
// even; Q4_0's scale takes the sign of the largest value).
func TestQuantizeKV(t *testing.T) {
	rng := rand.New(rand.NewPCG(41, 42))
	for _, bh := range []int{Q8Halves, Q4Halves} {
		x := randVec(rng, 256)
		clear(x[32:64]) // a block of zeros
		row := make([]uint16, 8*bh)
		if bh == Q8Halves {
			QuantizeQ8Halves(row, x)
		} else {
			QuantizeQ4Halves(row, x)
		}
		got := dequantKV(row, 256, bh)
		for k := range 8 {
			var amax float64
			for _, v := range x[k*32 : k*32+32] {
				amax = max(amax, math.Abs(float64(v)))
			}
			// Half a step, but Q4_0's codes reach only 7 steps on the side
			// opposite its largest value: a value beyond is clamped.
			step, tol := amax/127, 0.51
			if bh == Q4Halves {
				step, tol = amax/8, 1.01
			}
			for i := k * 32; i < k*32+32; i++ {
				if d := math.Abs(got[i] - float64(x[i])); d > tol*step+1e-3*amax {
					t.Fatalf("block size %d: value %d is %g, stored %g (step %g)", bh, i, x[i], got[i], step)
				}
			}
		}
	}
	// Q8_0: 127/amax * x = 2.5 exactly rounds to 2, not 3.
	x := make([]float32, 32)
	x[0], x[1] = 127, 2.5
	row := make([]uint16, Q8Halves)
	QuantizeQ8Halves(row, x)
	if q := int8(halfBytes(row)[3]); q != 2 {
		t.Fatalf("Q8_0 tie 2.5 stored as %d, want 2 (half to even)", q)
	}
	// Q4_0: the largest magnitude is negative, so d > 0 and it maps to 0 (-8).
	x[0], x[1] = -8, 4
	row = make([]uint16, Q4Halves)
	QuantizeQ4Halves(row, x)
	b := halfBytes(row)
	if d := gguf.F16ToF32(rd16(b)); d != 1 || b[2]&15 != 0 || b[3]&15 != 12 {
		t.Fatalf("Q4_0 of -8, 4: d %g, codes %d %d, want 1, 0, 12", d, b[2]&15, b[3]&15)
	}
}

// TestQuantizeKVNonFinite: the KV quantizers follow the activation
// quantizers' rule (absMax, roundAway), so a row's bytes do not depend on
// how the platform converts a NaN or an infinity to an integer: a block with
// a NaN gets a NaN scale (Q4_0 too, whose largest-magnitude search used to
// skip it and store the NaN as a finite code), and a product that is NaN or
// infinite is code 0. Finite blocks keep their codes (TestQuantizeKV).
func TestQuantizeKVNonFinite(t *testing.T) {
	nan := float32(math.NaN())
	inf := float32(math.Inf(1))
	for _, tc := range []struct {
		name  string
		set   func(x []float32)
		scale string // "nan", "inf", "zero" or "finite"
		zeros []int  // codes that must be 0 (Q8_0) or 0 (Q4_0's raw nibble)
	}{
		{"a NaN", func(x []float32) { x[0], x[5] = 3, nan }, "nan", all32()},
		{"a NaN last, after larger values", func(x []float32) { x[0], x[31] = -100, nan }, "nan", all32()},
		{"+Inf", func(x []float32) { x[0], x[7] = 2, inf }, "inf", []int{7}},
		{"-Inf", func(x []float32) { x[3] = -inf }, "inf", []int{3}},
		{"an overflowing inverse scale", func(x []float32) {
			clear(x)
			x[0], x[1] = 1e-44, -1e-45
		}, "zero", all32()},
	} {
		for _, bh := range []int{Q8Halves, Q4Halves} {
			x := make([]float32, 32)
			for i := range x {
				x[i] = float32(i%5) - 2 // finite neighbours, zeros among them
			}
			tc.set(x)
			row := make([]uint16, bh)
			for i := range row {
				row[i] = 0x5555 // every byte must be written
			}
			if bh == Q8Halves {
				QuantizeQ8Halves(row, x)
			} else {
				QuantizeQ4Halves(row, x)
			}
			b := halfBytes(row)
			d := gguf.F16ToF32(rd16(b))
			ok := map[string]bool{
				"nan":    d != d,
				"inf":    math.IsInf(float64(d), 0),
				"zero":   d == 0,
				"finite": !math.IsInf(float64(d), 0) && d == d,
			}[tc.scale]
			if !ok {
				t.Errorf("%s, block of %d halves: scale %g, want %s", tc.name, bh, d, tc.scale)
			}
			for _, i := range tc.zeros {
				var q byte
				switch {
				case bh == Q8Halves:
					q = b[2+i]
				case i < 16:
					q = b[2+i] & 15
				default:
					q = b[2+i-16] >> 4
				}
				if q != 0 {
					t.Errorf("%s, block of %d halves: code %d of value %g is %d, want 0", tc.name, bh, i, x[i], q)
				}
			}
		}
	}
}

func all32() []int {
	out := make([]int, 32)
	for i := range out {
		out[i] = i
	}
	return out
}

// TestKVQuantAttention: DotsQ8/DotsQ4 and AxpysQ8/AxpysQ4 give the same bits
// on every set, whatever the number of keys (the assembly takes four at a
// time), and values within rounding of a float64 computation on the
// dequantized rows.
func TestKVQuantAttention(t *testing.T) {
	rng := rand.New(rand.NewPCG(43, 44))
	for _, bh := range []int{Q8Halves, Q4Halves} {
		for _, hd := range []int{32, 64, 128} {
			for _, nk := range []int{1, 3, 4, 7, 16} {
				stride := 3*hd/32*bh + 5 // rows of 3 heads plus padding
				k := make([]uint16, nk*stride)
				v := make([]uint16, nk*stride)
				for j := range nk {
					kx, vx := randVec(rng, hd), randVec(rng, hd)
					if bh == Q8Halves {
						QuantizeQ8Halves(k[j*stride:], kx)
						QuantizeQ8Halves(v[j*stride:], vx)
					} else {
						QuantizeQ4Halves(k[j*stride:], kx)
						QuantizeQ4Halves(v[j*stride:], vx)
					}
				}
				q := make([]byte, hd/32*q8Block)
				QuantizeQ8Row(q, randVec(rng, hd))
				w := randVec(rng, nk)
				init := randVec(rng, hd)
				var ref []float32
				var refDots []float32
				eachSet(t, func(t *testing.T, ks Set) {
					dots := make([]float32, nk)
					dst := append([]float32(nil), init...)
					if bh == Q8Halves {
						ks.DotsQ8(dots, q, k, stride, 0.5)
						ks.AxpysQ8(dst, w, v, stride)
					} else {
						ks.DotsQ4(dots, q, k, stride, 0.5)
						ks.AxpysQ4(dst, w, v, stride)
					}
					if ref == nil {
						ref, refDots = dst, dots
						checkKVQuantValues(t, bh, hd, q, k, v, stride, w, init, dots, dst)
						return
					}
					for i := range dst {
						if math.Float32bits(dst[i]) != math.Float32bits(ref[i]) {
							t.Fatalf("block %d hd %d keys %d: value sum [%d] %g, first set %g", bh, hd, nk, i, dst[i], ref[i])
						}
					}
					for j := range dots {
						if math.Float32bits(dots[j]) != math.Float32bits(refDots[j]) {
							t.Fatalf("block %d hd %d keys %d: score [%d] %g, first set %g", bh, hd, nk, j, dots[j], refDots[j])
						}
					}
				})
			}
		}
	}
}

func checkKVQuantValues(t *testing.T, bh, hd int, q []byte, k, v []uint16, stride int, w, init, dots, dst []float32) {
	t.Helper()
	qrow := dequantKV(bytesHalves(q), hd, Q8Halves)
	for j := range dots {
		kr := dequantKV(k[j*stride:], hd, bh)
		var s float64
		for i := range hd {
			s += kr[i] * qrow[i]
		}
		if math.Abs(0.5*s-float64(dots[j])) > 1e-4*(1+math.Abs(s)) {
			t.Fatalf("block %d hd %d: score %d is %g, want %g", bh, hd, j, dots[j], 0.5*s)
		}
	}
	for i := range hd {
		s := float64(init[i])
		for j := range w {
			s += float64(w[j]) * dequantKV(v[j*stride:], hd, bh)[i]
		}
		if math.Abs(s-float64(dst[i])) > 1e-4*(1+math.Abs(s)) {
			t.Fatalf("block %d hd %d: value sum %d is %g, want %g", bh, hd, i, dst[i], s)
		}
	}
}

// bytesHalves views an even-length byte row as halves (the inverse of halfBytes).
func bytesHalves(b []byte) []uint16 {
	h := make([]uint16, len(b)/2)
	for i := range h {
		h[i] = rd16(b[2*i:])
	}
	return h
}

// TestFWHT: FWHT is the product by Sylvester's Hadamard matrix scaled by
// 1/sqrt(n) (to float32 rounding), and applied twice gives x back.
func TestFWHT(t *testing.T) {
	rng := rand.New(rand.NewPCG(45, 46))
	for _, n := range []int{1, 2, 8, 64, 128} {
		x := randVec(rng, n)
		y := append([]float32(nil), x...)
		FWHT(y)
		for i := range n {
			var s float64
			for j := range n {
				sign := 1.0
				if bitsOnes(i&j)%2 == 1 {
					sign = -1
				}
				s += sign * float64(x[j])
			}
			s /= math.Sqrt(float64(n))
			if math.Abs(s-float64(y[i])) > 1e-5*(1+math.Abs(s)) {
				t.Fatalf("n %d: [%d] %g, want %g", n, i, y[i], s)
			}
		}
		FWHT(y)
		for i := range n {
			if math.Abs(float64(y[i]-x[i])) > 1e-5*(1+math.Abs(float64(x[i]))) {
				t.Fatalf("n %d: twice gives [%d] %g, was %g", n, i, y[i], x[i])
			}
		}
	}
}

func bitsOnes(v int) int {
	n := 0
	for ; v != 0; v &= v - 1 {
		n++
	}
	return n
}

// TestKVQuant4Queries: the four-query kernels give, for each query, the bits
// of the one-query kernels on every set, at every key count.
func TestKVQuant4Queries(t *testing.T) {
	rng := rand.New(rand.NewPCG(47, 48))
	for _, bh := range []int{Q8Halves, Q4Halves} {
		for _, hd := range []int{32, 64, 128} {
			for _, nk := range []int{1, 3, 5, 16} {
				stride := 2*hd/32*bh + 3
				k := make([]uint16, nk*stride)
				v := make([]uint16, nk*stride)
				for j := range nk {
					if bh == Q8Halves {
						QuantizeQ8Halves(k[j*stride:], randVec(rng, hd))
						QuantizeQ8Halves(v[j*stride:], randVec(rng, hd))
					} else {
						QuantizeQ4Halves(k[j*stride:], randVec(rng, hd))
						QuantizeQ4Halves(v[j*stride:], randVec(rng, hd))
					}
				}
				nb := hd / 32
				q := make([]byte, 4*nb*q8Block)
				for i := range 4 {
					QuantizeQ8Row(q[i*nb*q8Block:], randVec(rng, hd))
				}
				const ostride = 19
				w := randVec(rng, 3*ostride+nk)
				init := randVec(rng, 4*hd)
				eachSet(t, func(t *testing.T, ks Set) {
					out := make([]float32, 3*ostride+nk)
					dst := append([]float32(nil), init...)
					if bh == Q8Halves {
						ks.Dots4Q8(out, ostride, nk, q, k, stride, 0.25)
						ks.Axpys4Q8(dst, w, ostride, nk, v, stride)
					} else {
						ks.Dots4Q4(out, ostride, nk, q, k, stride, 0.25)
						ks.Axpys4Q4(dst, w, ostride, nk, v, stride)
					}
					for i := range 4 {
						one := make([]float32, nk)
						o := append([]float32(nil), init[i*hd:(i+1)*hd]...)
						qi := q[i*nb*q8Block : (i+1)*nb*q8Block]
						if bh == Q8Halves {
							ks.DotsQ8(one, qi, k, stride, 0.25)
							ks.AxpysQ8(o, w[i*ostride:i*ostride+nk], v, stride)
						} else {
							ks.DotsQ4(one, qi, k, stride, 0.25)
							ks.AxpysQ4(o, w[i*ostride:i*ostride+nk], v, stride)
						}
						for j := range nk {
							if math.Float32bits(one[j]) != math.Float32bits(out[i*ostride+j]) {
								t.Fatalf("block %d hd %d keys %d: query %d key %d score %g, one query %g", bh, hd, nk, i, j, out[i*ostride+j], one[j])
							}
						}
						for x := range hd {
							if math.Float32bits(o[x]) != math.Float32bits(dst[i*hd+x]) {
								t.Fatalf("block %d hd %d keys %d: query %d value [%d] %g, one query %g", bh, hd, nk, i, x, dst[i*hd+x], o[x])
							}
						}
					}
				})
			}
		}
	}
}

// TestRoundEven: roundEven is math.RoundToEven over the range Q8_0 uses,
// ties included.
func TestRoundEven(t *testing.T) {
	rng := rand.New(rand.NewPCG(49, 50))
	for i := range 200000 {
		x := float32(rng.Float64()*300 - 150)
		if i%4 == 0 {
			x = float32(int(x)) + 0.5 // a tie
		}
		if got, want := roundEven(x), float32(math.RoundToEven(float64(x))); got != want {
			t.Fatalf("roundEven(%v) = %v, want %v", x, got, want)
		}
	}
}

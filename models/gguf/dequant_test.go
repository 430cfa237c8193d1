package gguf

import (
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"testing"
)

func f16le(f float32) []byte { return binary.LittleEndian.AppendUint16(nil, F32ToF16(f)) }

func TestDequantizeHandBuilt(t *testing.T) {
	q8 := append(f16le(0.5), make([]byte, QK)...)
	for j := range QK {
		q8[2+j] = byte(int8(j - 16)) // q = -16..15
	}
	q4 := append(f16le(-2), make([]byte, QK/2)...)
	for j := range QK / 2 {
		q4[2+j] = byte(j) | byte(15-j)<<4 // element j: j, element 16+j: 15-j
	}
	for _, tc := range []struct {
		name string
		typ  Type
		data []byte
		want func(i int) float32
		n    int
	}{
		{"f32", TypeF32, binary.LittleEndian.AppendUint32(binary.LittleEndian.AppendUint32(nil, math.Float32bits(1.5)), math.Float32bits(-2e-30)), func(i int) float32 { return []float32{1.5, -2e-30}[i] }, 2},
		{"f16 normal, subnormal, negative zero", TypeF16, []byte{0x00, 0x3c, 0x01, 0x00, 0x00, 0x80, 0x00, 0xc0}, func(i int) float32 {
			return []float32{1, 5.9604645e-08, float32(math.Copysign(0, -1)), -2}[i]
		}, 4},
		{"bf16", TypeBF16, []byte{0x80, 0x3f, 0x49, 0x40}, func(i int) float32 { return []float32{1, 3.140625}[i] }, 2},
		{"q8_0", TypeQ8_0, q8, func(i int) float32 { return float32(i-16) * 0.5 }, QK},
		{"q4_0 low nibbles first", TypeQ4_0, q4, func(i int) float32 {
			if i < 16 {
				return float32(i-8) * -2
			}
			return float32(15-(i-16)-8) * -2
		}, QK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dst := make([]float32, tc.n)
			if err := Dequantize(tc.typ, tc.data, dst); err != nil {
				t.Fatal(err)
			}
			for i, got := range dst {
				if want := tc.want(i); math.Float32bits(got) != math.Float32bits(want) {
					t.Errorf("element %d = %g, want %g", i, got, want)
				}
			}
		})
	}
}

// packQ4K builds a Q4_K block from its logical contents: 8 sub-block scales and
// mins (6 bits each) and 256 quants (4 bits), packed as ggml-common.h describes.
func packQ4K(d, dmin float32, sc, m [8]uint8, q [QKK]uint8) []byte {
	b := append(f16le(d), f16le(dmin)...)
	var s [12]byte
	for j := range 8 {
		if j < 4 {
			s[j] |= sc[j] & 63
			s[j+4] |= m[j] & 63
		} else {
			s[j+4] = sc[j]&0xf | (m[j]&0xf)<<4
			s[j-4] |= sc[j] >> 4 << 6
			s[j] |= m[j] >> 4 << 6
		}
	}
	b = append(b, s[:]...)
	qs := make([]byte, QKK/2)
	for e, v := range q {
		sub, l := e/32, e%32
		if sub%2 == 0 {
			qs[32*(sub/2)+l] |= v & 0xf
		} else {
			qs[32*(sub/2)+l] |= v << 4
		}
	}
	return append(b, qs...)
}

// packQ6K builds a Q6_K block from 256 6-bit quants (stored +32), 16 int8 scales
// (one per 16 elements) and d.
func packQ6K(d float32, sc [16]int8, q [QKK]uint8) []byte {
	ql := make([]byte, QKK/2)
	qh := make([]byte, QKK/4)
	for e, v := range q {
		h, r := e/128, e%128
		k, l := r/32, r%32
		lowByte := 64*h + l + 32*(k%2)
		if k < 2 {
			ql[lowByte] |= v & 0xf
		} else {
			ql[lowByte] |= (v & 0xf) << 4
		}
		qh[32*h+l] |= (v >> 4 & 3) << (2 * k)
	}
	b := append(ql, qh...)
	for _, s := range sc {
		b = append(b, byte(s))
	}
	return append(b, f16le(d)...)
}

func TestDequantizeKQuantsHandBuilt(t *testing.T) {
	t.Run("q4_k", func(t *testing.T) {
		// Scales and mins above 15 exercise the packed high bits.
		sc := [8]uint8{1, 63, 17, 32, 5, 48, 63, 33}
		m := [8]uint8{0, 2, 63, 40, 16, 31, 1, 62}
		var q [QKK]uint8
		for e := range q {
			q[e] = uint8((e*7 + e/32) % 16)
		}
		const d, dmin = 0.5, 0.25
		dst := make([]float32, QKK)
		if err := Dequantize(TypeQ4_K, packQ4K(d, dmin, sc, m, q), dst); err != nil {
			t.Fatal(err)
		}
		for e, got := range dst {
			sub := e / 32
			want := d*float64(sc[sub])*float64(q[e]) - dmin*float64(m[sub])
			if float64(got) != want {
				t.Fatalf("element %d (sub-block %d) = %g, want %g", e, sub, got, want)
			}
		}
	})
	t.Run("q6_k", func(t *testing.T) {
		sc := [16]int8{1, -1, 127, -128, 3, 5, -7, 9, 11, 13, -15, 17, 19, 21, 23, -25}
		var q [QKK]uint8
		for e := range q {
			q[e] = uint8((e*11 + e/16) % 64)
		}
		const d = 0.125
		dst := make([]float32, QKK)
		if err := Dequantize(TypeQ6_K, packQ6K(d, sc, q), dst); err != nil {
			t.Fatal(err)
		}
		for e, got := range dst {
			want := d * float64(sc[e/16]) * float64(int(q[e])-32)
			if float64(got) != want {
				t.Fatalf("element %d = %g, want %g", e, got, want)
			}
		}
	})
}

func normals(seed uint64, n int, std float64) []float32 {
	r := rand.New(rand.NewPCG(seed, 0))
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(r.NormFloat64() * std)
	}
	return x
}

func round(x float64) float64 { return math.Round(x) }

func clamp(x, lo, hi float64) float64 { return math.Max(lo, math.Min(hi, x)) }

// TestDequantizeKQuantsRoundTrip quantizes random data with simple reference
// quantizers (min/max per sub-block, not GGML's search) packed by the helpers
// above, and bounds each element's error by what those quantizers guarantee.
func TestDequantizeKQuantsRoundTrip(t *testing.T) {
	const blocks = 8
	x := normals(7, blocks*QKK, 0.02)
	t.Run("q4_k", func(t *testing.T) {
		var data []byte
		var bound []float64
		for b := range blocks {
			xb := x[b*QKK : (b+1)*QKK]
			var scale, mins [8]float64
			for s := range 8 {
				mn, mx := 0.0, math.Inf(-1)
				for _, v := range xb[32*s : 32*s+32] {
					mn, mx = math.Min(mn, float64(v)), math.Max(mx, float64(v))
				}
				scale[s], mins[s] = (mx-mn)/15, -mn
			}
			d, dmin := 0.0, 0.0
			for s := range 8 {
				d, dmin = math.Max(d, scale[s]/63), math.Max(dmin, mins[s]/63)
			}
			d16, dmin16 := float64(F16ToF32(F32ToF16(float32(d)))), float64(F16ToF32(F32ToF16(float32(dmin))))
			var sc, m [8]uint8
			var q [QKK]uint8
			for s := range 8 {
				sc[s], m[s] = uint8(clamp(round(scale[s]/d16), 0, 63)), uint8(clamp(round(mins[s]/dmin16), 0, 63))
				es, em := d16*float64(sc[s]), dmin16*float64(m[s])
				for l := range 32 {
					q[32*s+l] = uint8(clamp(round((float64(xb[32*s+l])+em)/es), 0, 15))
					bound = append(bound, es/2+math.Abs(em-mins[s])+15*math.Abs(es-scale[s])+1e-7)
				}
			}
			data = append(data, packQ4K(float32(d), float32(dmin), sc, m, q)...)
		}
		checkRoundTrip(t, TypeQ4_K, data, x, bound)
	})
	t.Run("q6_k", func(t *testing.T) {
		var data []byte
		var bound []float64
		for b := range blocks {
			xb := x[b*QKK : (b+1)*QKK]
			var scale [16]float64
			d := 0.0
			for g := range 16 {
				for _, v := range xb[16*g : 16*g+16] {
					scale[g] = math.Max(scale[g], math.Abs(float64(v))/31)
				}
				d = math.Max(d, scale[g]/127)
			}
			d16 := float64(F16ToF32(F32ToF16(float32(d))))
			var sc [16]int8
			var q [QKK]uint8
			for g := range 16 {
				sc[g] = int8(clamp(round(scale[g]/d16), -128, 127))
				es := d16 * float64(sc[g])
				for l := range 16 {
					q[16*g+l] = uint8(clamp(round(float64(xb[16*g+l])/es), -32, 31) + 32)
					bound = append(bound, es/2+31*math.Abs(es-scale[g])+1e-7)
				}
			}
			data = append(data, packQ6K(float32(d), sc, q)...)
		}
		checkRoundTrip(t, TypeQ6_K, data, x, bound)
	})
}

func checkRoundTrip(t *testing.T, typ Type, data []byte, x []float32, bound []float64) {
	t.Helper()
	y := make([]float32, len(x))
	if err := Dequantize(typ, data, y); err != nil {
		t.Fatal(err)
	}
	worst := 0.0
	for i := range x {
		err := math.Abs(float64(y[i]) - float64(x[i]))
		if err > bound[i] {
			t.Fatalf("element %d: %g dequantized to %g, error %g over the bound %g", i, x[i], y[i], err, bound[i])
		}
		worst = math.Max(worst, err/bound[i])
	}
	t.Logf("%s: worst error is %.2f of its bound", typ, worst)
}

// TestDequantizeWithinQuantizationError dequantizes every quantized tensor of
// the llama-quantize files and compares it with the F32 source, block by block.
// With d the exact scale the reference quantizer computes from the block and
// d16 the half-precision scale stored:
//
//	Q8_0: |x - x'| <= d16/2 + 127|d16 - d| + 1e-6*amax   (round to nearest of q*d16)
//	Q4_0: |x - x'| <= |d16| + 8|d16 - d|  + 1e-6*amax   (one full step where +8 clamps to 7)
func TestDequantizeWithinQuantizationError(t *testing.T) {
	src := openShared(t, f32File)
	for _, qf := range quantFiles {
		t.Run(qf.main.String(), func(t *testing.T) {
			f := openShared(t, qf.rel)
			for _, ti := range f.Tensors {
				if ti.Type == TypeF32 {
					continue
				}
				x := tensorF32(t, src, ti.Name)
				y := tensorF32(t, f, ti.Name)
				_, raw, _ := f.Tensor(ti.Name)
				bs := ti.Type.TypeSize()
				worst := 0.0
				for b := 0; b < len(x)/QK; b++ {
					xb, yb := x[b*QK:(b+1)*QK], y[b*QK:(b+1)*QK]
					d16 := float64(F16ToF32(binary.LittleEndian.Uint16(raw[b*bs:])))
					amax, maxv := 0.0, 0.0
					for _, v := range xb {
						if a := math.Abs(float64(v)); a > amax {
							amax, maxv = a, float64(v)
						}
					}
					var bound float64
					switch ti.Type {
					case TypeQ8_0:
						d := amax / 127
						bound = d16/2 + 127*math.Abs(d16-d) + 1e-6*amax
					case TypeQ4_0:
						d := maxv / -8
						bound = math.Abs(d16) + 8*math.Abs(d16-d) + 1e-6*amax
					}
					for j := range xb {
						err := math.Abs(float64(yb[j]) - float64(xb[j]))
						if err > bound {
							t.Fatalf("%s block %d element %d: source %g, dequantized %g, error %g > bound %g", ti.Name, b, j, xb[j], yb[j], err, bound)
						}
						if bound > 0 {
							worst = math.Max(worst, err/bound)
						}
					}
				}
				if worst < 0.3 {
					t.Errorf("%s: worst error only %.2f of the bound; the bound is not being tested", ti.Name, worst)
				}
			}
		})
	}
}

func TestDequantizeErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		typ  Type
		data int
		dst  int
		want error
	}{
		{"unsupported type", TypeIQ2_XXS, 66, 256, ErrUnsupportedType},
		{"unknown type", Type(77), 4, 1, ErrUnsupportedType},
		{"partial block", TypeQ8_0, 34, 31, ErrSize},
		{"short data", TypeQ4_0, 17, 32, ErrSize},
		{"long data", TypeF32, 12, 2, ErrSize},
		{"q6_k short", TypeQ6_K, 209, 256, ErrSize},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Dequantize(tc.typ, make([]byte, tc.data), make([]float32, tc.dst))
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
}

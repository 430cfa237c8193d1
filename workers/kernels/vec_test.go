package kernels

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/bulkhead-ai/bulkhead/models/gguf"
)

func halves(rng *rand.Rand, n int) []uint16 {
	h := make([]uint16, n)
	for i := range h {
		h[i] = gguf.F32ToF16(float32(rng.NormFloat64()))
	}
	return h
}

func TestDots(t *testing.T) {
	eachSet(t, func(t *testing.T, ks Set) {
		rng := rand.New(rand.NewPCG(21, 22))
		for _, n := range []int{0, 1, 7, 8, 9, 64, 203} {
			t.Run(fmt.Sprintf("n%d", n), func(t *testing.T) {
				a, b := randVec(rng, n), randVec(rng, n)
				ha, hb := halves(rng, n), halves(rng, n)
				var want, scale, hwant, hscale float64
				for i := range n {
					want += float64(a[i]) * float64(b[i])
					scale += math.Abs(float64(a[i]) * float64(b[i]))
					p := float64(gguf.F16ToF32(ha[i])) * float64(gguf.F16ToF32(hb[i]))
					hwant += p
					hscale += math.Abs(p)
				}
				checkClose(t, "DotF32", ks.DotF32(a, b), want, scale, 1e-6)
				checkClose(t, "DotF16", ks.DotF16(ha, hb), hwant, hscale, 1e-6)
				checkClose(t, "dotF32Go", dotF32Go(a, b), want, scale, 1e-6)
				checkClose(t, "dotF16Go", dotF16Go(ha, hb), hwant, hscale, 1e-6)
			})
		}
	})
}

// TestDotF16MatchesF16MatMul: DotF16 and an F16 MatMul row agree bitwise when
// the activations are already f16 values.
func TestDotF16MatchesF16MatMul(t *testing.T) {
	eachSet(t, func(t *testing.T, ks Set) {
		rng := rand.New(rand.NewPCG(23, 24))
		const cols = 203
		w, x := halves(rng, cols), halves(rng, cols)
		data := make([]byte, 2*cols)
		for i, h := range w {
			data[2*i], data[2*i+1] = byte(h), byte(h>>8)
		}
		m, err := ks.NewMatrix(gguf.TypeF16, 1, cols, data)
		if err != nil {
			t.Fatal(err)
		}
		xf := make([]float32, cols)
		ks.F16ToF32s(xf, x)
		p := NewPool(1)
		defer p.Close()
		out := make([]float32, 1)
		p.MatMul(out, m, xf, 1)
		if d := ks.DotF16(w, x); math.Float32bits(d) != math.Float32bits(out[0]) {
			t.Fatalf("DotF16 %g != MatMul %g", d, out[0])
		}
	})
}

func TestAxpyF16(t *testing.T) {
	eachSet(t, func(t *testing.T, ks Set) {
		rng := rand.New(rand.NewPCG(25, 26))
		for _, n := range []int{0, 3, 8, 19, 64} {
			t.Run(fmt.Sprintf("n%d", n), func(t *testing.T) {
				dst, x := randVec(rng, n), halves(rng, n)
				want := make([]float64, n)
				for i := range n {
					want[i] = float64(dst[i]) + 0.75*float64(gguf.F16ToF32(x[i]))
				}
				ks.AxpyF16(dst, 0.75, x)
				for i := range n {
					checkClose(t, fmt.Sprintf("[%d]", i), dst[i], want[i], math.Abs(want[i])+1, 1e-6)
				}
			})
		}
	})
}

func TestAxpyF32(t *testing.T) {
	eachSet(t, func(t *testing.T, ks Set) {
		rng := rand.New(rand.NewPCG(29, 30))
		for _, n := range []int{0, 3, 8, 19, 64} {
			dst, x := randVec(rng, n), randVec(rng, n)
			want := make([]float64, n)
			for i := range n {
				want[i] = float64(dst[i]) - 1.25*float64(x[i])
			}
			ks.AxpyF32(dst, -1.25, x)
			for i := range n {
				checkClose(t, fmt.Sprintf("n%d[%d]", n, i), dst[i], want[i], math.Abs(want[i])+1, 1e-6)
			}
		}
	})
}

// TestDotsT: every column's product is DotF32's of the column, bit for bit.
func TestDotsT(t *testing.T) {
	eachSet(t, func(t *testing.T, ks Set) {
		rng := rand.New(rand.NewPCG(31, 32))
		for _, n := range []int{1, 4, 8, 16, 19, 32} {
			for _, cols := range []int{1, 8, 64, 136} {
				w, x := randVec(rng, n*cols), randVec(rng, n)
				out := make([]float32, cols)
				ks.DotsT(out, w, cols, x)
				col := make([]float32, n)
				for c := range cols {
					for k := range n {
						col[k] = w[k*cols+c]
					}
					if want := ks.DotF32(col, x); math.Float32bits(out[c]) != math.Float32bits(want) {
						t.Fatalf("n %d, %d columns: column %d is %v, DotF32 %v", n, cols, c, out[c], want)
					}
				}
			}
		}
	})
}

// TestSetAdd: Set.Add gives the package Add's sums bit for bit, at every
// length around the vector width.
func TestSetAdd(t *testing.T) {
	eachSet(t, func(t *testing.T, ks Set) {
		rng := rand.New(rand.NewPCG(27, 28))
		for _, n := range []int{0, 1, 7, 8, 9, 16, 23, 384} {
			dst, x := randVec(rng, n), randVec(rng, n)
			want := slices.Clone(dst)
			Add(want, x)
			ks.Add(dst, x)
			for i := range n {
				if math.Float32bits(dst[i]) != math.Float32bits(want[i]) {
					t.Fatalf("n %d [%d]: %g, want %g", n, i, dst[i], want[i])
				}
			}
		}
	})
}

// f16Cases are float32 values that exercise every rounding path of F32ToF16.
func f16Cases(rng *rand.Rand) []float32 {
	v := []float32{0, float32(math.Copysign(0, -1)), 1, -1, 65504, 65519.99, 65520, -65520, 1e10,
		float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()),
		math.Float32frombits(0x7f800001), math.Float32frombits(0xffc12345), // signalling / payload NaNs
		5.960464477539063e-08, 2.98e-08, 2.9802322387695312e-08, 8.940696716308594e-08, // subnormal edges
		6.097555160522461e-05, 6.103515625e-05, 1.0009765625, 1.00048828125, 1.00146484375}
	for range 20000 {
		v = append(v, math.Float32frombits(rng.Uint32()))
	}
	for range 20000 { // dense around the half range, subnormals included
		v = append(v, float32(rng.NormFloat64()*math.Pow(2, float64(rng.IntN(50)-30))))
	}
	for h := range 1 << 16 { // exact halves and midpoints between neighbours
		f := gguf.F16ToF32(uint16(h))
		v = append(v, f, math.Float32frombits(math.Float32bits(f)+1<<12), math.Float32frombits(math.Float32bits(f)+1<<12+1))
	}
	return v
}

func TestF32ToF16s(t *testing.T) {
	eachSet(t, func(t *testing.T, ks Set) {
		rng := rand.New(rand.NewPCG(27, 28))
		src := f16Cases(rng)
		dst := make([]uint16, len(src))
		ks.F32ToF16s(dst, src)
		for i, f := range src {
			if want := gguf.F32ToF16(f); dst[i] != want {
				t.Fatalf("F32ToF16s(%g = %#x) = %#x, want %#x", f, math.Float32bits(f), dst[i], want)
			}
		}
	})
}

func TestF16ToF32s(t *testing.T) {
	eachSet(t, func(t *testing.T, ks Set) {
		src := make([]uint16, 1<<16)
		for i := range src {
			src[i] = uint16(i)
		}
		dst := make([]float32, len(src))
		ks.F16ToF32s(dst, src)
		for i, h := range src {
			want := gguf.F16ToF32(h)
			if math.Float32bits(dst[i]) == math.Float32bits(want) {
				continue
			}
			// The hardware quiets signalling NaNs; any NaN with the same sign is fine.
			if dst[i] != dst[i] && want != want && (math.Float32bits(dst[i])^math.Float32bits(want))>>31 == 0 {
				continue
			}
			t.Fatalf("F16ToF32s(%#x) = %#x, want %#x", h, math.Float32bits(dst[i]), math.Float32bits(want))
		}
	})
}

// TestRMSNorm checks the portable set's RMSNorm against the float64 formula
// and every set's bitwise against it; inputs spread over 2^-20..2^20 so the
// sums' order shows in their bits.
func TestRMSNorm(t *testing.T) {
	rng := rand.New(rand.NewPCG(29, 30))
	for _, n := range []int{1, 5, 8, 9, 32, 128, 576, 1029} {
		t.Run(fmt.Sprintf("n%d", n), func(t *testing.T) {
			x, w := randVec(rng, n), randVec(rng, n)
			for i := range x {
				x[i] = float32(math.Ldexp(float64(x[i]), rng.IntN(41)-20))
			}
			if n == 32 {
				// Squares 1 and 2^-24 (lane 0) make a float32 midpoint; four
				// of 2^-54 (lane 1) push it over only when summed first, as
				// the lanes do: in order each is lost against 1.
				clear(x)
				x[0], x[8] = 1, 1.0/(1<<12)
				x[1], x[9], x[17], x[25] = 1.0/(1<<27), 1.0/(1<<27), 1.0/(1<<27), 1.0/(1<<27)
			}
			want := make([]float32, n)
			pathGo.set().RMSNorm(want, x, w, 1e-5)
			var ss float64
			for _, v := range x {
				ss += float64(v) * float64(v)
			}
			scale := 1 / math.Sqrt(ss/float64(n)+1e-5)
			for i := range n {
				f := float64(x[i]) * scale * float64(w[i])
				checkClose(t, fmt.Sprintf("[%d]", i), want[i], f, math.Abs(f)+1e-6, 1e-6)
			}
			eachSet(t, func(t *testing.T, ks Set) {
				got := append([]float32(nil), x...)
				ks.RMSNorm(got, got, w, 1e-5) // in place, as the engine's q and k norms
				for i := range n {
					if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
						t.Fatalf("[%d] = %g, want %g bitwise", i, got[i], want[i])
					}
				}
			})
		})
	}
}

// TestLayerNorm checks every set's LayerNorm bitwise against the portable
// set's, and that set against the float64 formula; inputs offset from zero
// and spread over 2^-20..2^20 so the sums' order shows in their bits.
func TestLayerNorm(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 32))
	for _, n := range []int{1, 7, 8, 9, 16, 17, 384, 389, 768} {
		x, w, b := randVec(rng, n), randVec(rng, n), randVec(rng, n)
		for i := range x {
			x[i] = 3 + float32(math.Ldexp(float64(x[i]), rng.IntN(41)-20))
		}
		if n == 16 {
			// In order the float64 sum loses 2^-30 and the mean is 0; in
			// lanes it keeps it, and with b = 0 the outputs show the mean.
			clear(x)
			x[0], x[1], x[2] = 1<<30, 1.0/(1<<30), -(1 << 30)
			clear(b)
		}
		want := make([]float32, n)
		pathGo.set().LayerNorm(want, x, w, b, 1e-5)
		var sum, sq float64
		for _, v := range x {
			sum += float64(v)
		}
		mean := sum / float64(n)
		for _, v := range x {
			sq += (float64(v) - mean) * (float64(v) - mean)
		}
		scale := 1 / math.Sqrt(sq/float64(n)+1e-5)
		for i := range n {
			f := (float64(x[i])-mean)*scale*float64(w[i]) + float64(b[i])
			checkClose(t, fmt.Sprintf("n%d [%d]", n, i), want[i], f, math.Abs(f)+1, 1e-4)
		}
		eachSet(t, func(t *testing.T, ks Set) {
			got := append([]float32(nil), x...)
			ks.LayerNorm(got, got, w, b, 1e-5) // in place, as the encoder calls it
			for i := range n {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
					t.Fatalf("n%d [%d] = %g, portable %g", n, i, got[i], want[i])
				}
			}
		})
	}
}

func TestSwiGLU(t *testing.T) {
	eachSet(t, func(t *testing.T, ks Set) {
		for _, tc := range []struct{ g, u, want float64 }{
			{0, 3, 0}, {1, 2, 2 / (1 + math.Exp(-1))}, {-2, 1.5, 1.5 * -2 / (1 + math.Exp(2))},
			{-100, 1, 0}, {50, 2, 100},
		} {
			t.Run(fmt.Sprint(tc.g), func(t *testing.T) {
				dst := make([]float32, 1)
				ks.SwiGLU(dst, []float32{float32(tc.g)}, []float32{float32(tc.u)})
				checkClose(t, "silu", dst[0], tc.want, math.Abs(tc.want)+1e-30, 1e-6)
			})
		}
	})
}

func TestSoftmax(t *testing.T) {
	eachSet(t, func(t *testing.T, ks Set) {
		for _, tc := range []struct {
			name string
			x    []float32
		}{
			{"small", []float32{1, 2, 3}},
			{"large", []float32{1000, 1001, 999}},
			{"masked", []float32{0, float32(math.Inf(-1)), 2}},
			{"one", []float32{-7}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				x := append([]float32(nil), tc.x...)
				ks.Softmax(x)
				m := math.Inf(-1)
				for _, v := range tc.x {
					m = math.Max(m, float64(v))
				}
				var s float64
				for _, v := range tc.x {
					s += math.Exp(float64(v) - m)
				}
				for i, v := range tc.x {
					checkClose(t, fmt.Sprintf("[%d]", i), x[i], math.Exp(float64(v)-m)/s, 1, 1e-6)
				}
			})
		}
	})
}

func TestAdd(t *testing.T) {
	dst := []float32{1, 2, 3}
	Add(dst, []float32{0.5, -2, 10, 99})
	for i, want := range []float32{1.5, 0, 13} {
		if dst[i] != want {
			t.Fatalf("dst[%d] = %g, want %g", i, dst[i], want)
		}
	}
}

func TestGeGLU(t *testing.T) {
	gate := []float32{-20, -10, -1.5, -0.25, 0, 0.25, 1, 3.3, 9.99, 10, 42}
	up := []float32{2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2}
	dst := make([]float32, len(gate))
	GeGLU(dst, gate, up)
	for i, g := range gate {
		exact := 0.5 * float64(g) * (1 + math.Tanh(math.Sqrt(2/math.Pi)*float64(g)*(1+0.044715*float64(g)*float64(g))))
		want := 2 * exact
		switch {
		case g <= -10:
			want = 0
		case g >= 10:
			want = 2 * float64(g)
		}
		// the table rounds input and output to half: ~1e-3 relative
		if d := math.Abs(float64(dst[i]) - want); d > 2e-3*math.Abs(want)+1e-3 {
			t.Errorf("GeGLU(%v)*2 = %v, want about %v", g, dst[i], want)
		}
	}
}

func TestSoftCap(t *testing.T) {
	x := []float32{-1000, -5, 0, 5, 1000}
	SoftCap(x, 10)
	for i, want := range []float64{-10, 10 * math.Tanh(-0.5), 0, 10 * math.Tanh(0.5), 10} {
		if math.Abs(float64(x[i])-want) > 1e-5 {
			t.Errorf("SoftCap[%d] = %v, want %v", i, x[i], want)
		}
	}
}

// TestExpKernels checks the AVX2 and AVX-512 exp kernels bitwise against
// math.Exp, over ordinary values and the edges where they hand groups back
// to Go.
func TestExpKernels(t *testing.T) {
	eachSet(t, func(t *testing.T, ks Set) {
		if ks.Portable() {
			t.Skip("the portable set is math.Exp")
		}
		testExpKernels(t, ks)
	})
}

func testExpKernels(t *testing.T, ks Set) {
	rng := rand.New(rand.NewPCG(21, 22))
	x := make([]float32, 4099)
	for i := range x {
		x[i] = float32(rng.NormFloat64() * 8)
	}
	special := []float32{0, float32(math.Copysign(0, -1)), 1e-30, -1e-30, -708, -708.1, 709, 709.5, -745, -746, -800, 800, 88.7, -103.9,
		float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), 1e30, -1e30}
	for i, v := range special {
		x[100+13*i] = v
	}
	same := func(a, b float32) bool {
		return math.Float32bits(a) == math.Float32bits(b) || (a != a && b != b)
	}
	for _, m := range []float32{0, 3.5, -2} {
		got, want := make([]float32, len(x)), make([]float32, len(x))
		ks.expShift(got, x, m)
		expShiftGo(want, x, m)
		for i := range got {
			if !same(got[i], want[i]) {
				t.Fatalf("exp(%g - %g): %s %g (%#x) != math.Exp %g (%#x)", x[i], m, ks, got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
			}
		}
	}
	up := make([]float32, len(x))
	for i := range up {
		up[i] = float32(rng.NormFloat64())
	}
	got, want := make([]float32, len(x)), make([]float32, len(x))
	ks.SwiGLU(got, x, up)
	swiGLUGo(want, x, up)
	for i := range got {
		if !same(got[i], want[i]) {
			t.Fatalf("swiglu(%g, %g): %s %g != go %g", x[i], up[i], ks, got[i], want[i])
		}
	}
}

// TestPageKernels checks DotsF16 and AxpysF16 bitwise against DotF16 and
// AxpyF16 called key by key, for head sizes with and without a tail.
func TestPageKernels(t *testing.T) {
	eachSet(t, func(t *testing.T, ks Set) {
		rng := rand.New(rand.NewPCG(23, 24))
		for _, hd := range []int{8, 64, 72, 96, 128, 256, 20} {
			for _, nk := range []int{1, 3, 4, 7, 8, 16, 23} {
				stride := hd*3 + 8
				q := halves(rng, hd)
				qf := make([]float32, hd)
				ks.F16ToF32s(qf, q)
				k := halves(rng, nk*stride)
				got, want := make([]float32, nk), make([]float32, nk)
				ks.DotsF16(got, q, qf, k, stride, 0.125)
				for j := range want {
					want[j] = ks.DotF16(q, k[j*stride:j*stride+hd]) * 0.125
				}
				for j := range got {
					if math.Float32bits(got[j]) != math.Float32bits(want[j]) {
						t.Fatalf("hd %d nk %d: dots[%d] %g != %g", hd, nk, j, got[j], want[j])
					}
				}
				w := make([]float32, nk)
				for j := range w {
					w[j] = float32(rng.Float64())
				}
				a, b := make([]float32, hd), make([]float32, hd)
				for i := range a {
					a[i] = float32(rng.NormFloat64())
					b[i] = a[i]
				}
				ks.AxpysF16(a, w, k, stride)
				for j := range w {
					ks.AxpyF16(b, w[j], k[j*stride:j*stride+hd])
				}
				for i := range a {
					if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
						t.Fatalf("hd %d nk %d: axpys[%d] %g != %g", hd, nk, i, a[i], b[i])
					}
				}
			}
		}
	})
}

func TestReadBandwidth(t *testing.T) {
	buf := make([]byte, 4<<20)
	for i := range buf {
		buf[i] = byte(i * 7)
	}
	var want uint64
	for i := 0; i < len(buf); i += 8 {
		want += binary.LittleEndian.Uint64(buf[i:])
	}
	var got uint64
	for i := 0; i < len(buf); i += 1 << 16 {
		got += readSum(buf[i : i+1<<16])
	}
	if got != want {
		t.Fatalf("readSum total %d, want %d", got, want)
	}
	p := NewPool(2)
	defer p.Close()
	if bw := p.ReadBandwidth([][]byte{buf[:1<<20], buf[1<<20 : 3<<20], buf[3<<20:], buf[:100]}, 2); bw <= 0 {
		t.Fatalf("bandwidth %g", bw)
	}
}

// TestPageKernels4 checks Dots4F16 and Axpys4F16 bitwise against the one-query
// kernels.
func TestPageKernels4(t *testing.T) {
	eachSet(t, func(t *testing.T, ks Set) {
		rng := rand.New(rand.NewPCG(25, 26))
		for _, hd := range []int{16, 64, 72, 128, 20} {
			for _, nk := range []int{1, 5, 16} {
				stride := hd*2 + 16
				q := halves(rng, 4*hd)
				qf := make([]float32, 4*hd)
				ks.F16ToF32s(qf, q)
				k := halves(rng, nk*stride)
				var got, w, dst [4][]float32
				for i := range got {
					got[i] = make([]float32, nk)
					w[i] = make([]float32, nk)
					dst[i] = make([]float32, hd)
					for j := range w[i] {
						w[i][j] = float32(rng.Float64())
					}
					for x := range dst[i] {
						dst[i][x] = float32(rng.NormFloat64())
					}
				}
				ks.Dots4F16(&got, q, qf, k, stride, 0.125)
				want := make([]float32, nk)
				for i := range got {
					ks.DotsF16(want, q[i*hd:(i+1)*hd], qf[i*hd:(i+1)*hd], k, stride, 0.125)
					for j := range want {
						if math.Float32bits(got[i][j]) != math.Float32bits(want[j]) {
							t.Fatalf("hd %d nk %d: dots4[%d][%d] %g != %g", hd, nk, i, j, got[i][j], want[j])
						}
					}
				}
				var ref [4][]float32
				for i := range ref {
					ref[i] = append([]float32(nil), dst[i]...)
					ks.AxpysF16(ref[i], w[i], k, stride)
				}
				ks.Axpys4F16(&dst, &w, k, stride)
				for i := range dst {
					for x := range dst[i] {
						if math.Float32bits(dst[i][x]) != math.Float32bits(ref[i][x]) {
							t.Fatalf("hd %d nk %d: axpys4[%d][%d] %g != %g", hd, nk, i, x, dst[i][x], ref[i][x])
						}
					}
				}
			}
		}
	})
}

// TestSoftmaxParts checks the vector parts of Softmax on the AVX2 and AVX-512
// paths: the maximum against the scalar loop (NaNs skipped, -Inf when nothing
// else), the float64 sum against the in-order one (and the two paths' sums
// bitwise against each other), Scale bitwise against x*s, and Softmax against
// float64 arithmetic, for lengths around the vector widths.
func TestSoftmaxParts(t *testing.T) {
	if len(asmPaths()) == 0 {
		t.Skipf("this CPU or build has no assembly path (best here: %s)", detectPath())
	}
	for _, kp := range asmPaths() {
		t.Run(kp.String(), func(t *testing.T) { testSoftmaxParts(t, kp) })
	}
}

// lanesSum64 is the eight-lane float64 sum both vector paths compute.
func lanesSum64(x []float32) float64 {
	var l [8]float64
	k := len(x) &^ 7
	for i, v := range x[:k] {
		l[i%8] += float64(v)
	}
	s := ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]))
	for _, v := range x[k:] {
		s += float64(v)
	}
	return s
}

func testSoftmaxParts(t *testing.T, kp path) {
	ks := kp.set()
	rng := rand.New(rand.NewPCG(29, 30))
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	for _, n := range []int{1, 7, 8, 15, 16, 17, 31, 32, 33, 48, 161, 1000} {
		for _, special := range [][]float32{nil, {nan}, {-inf}, {nan, -inf}, {inf}} {
			x := randVec(rng, n)
			for i := range x {
				x[i] *= 8
			}
			for i, v := range special {
				x[(i*7+3)%n] = v
			}
			if len(special) > 0 && rng.IntN(2) == 0 {
				for i := range x {
					x[i] = special[0] // all special: the maximum is the scalar loop's too
				}
			}
			name := fmt.Sprintf("n%d/%v", n, special)
			want := float32(math.Inf(-1))
			for _, v := range x {
				if v > want {
					want = v
				}
			}
			got := want
			width := map[path]int{pathAVX2: 8, pathAVX512: 16, pathAMX: 16}[kp]
			if k := n / width * width; k > 0 {
				if kp == pathAVX2 {
					got = maxF32AVX2(&x[0], k)
				} else {
					got = maxF32AVX512(&x[0], k)
				}
				for _, v := range x[k:] {
					if v > got {
						got = v
					}
				}
			}
			if math.Float32bits(got) != math.Float32bits(want) && !(got == 0 && want == 0) {
				t.Fatalf("%s: max %g, scalar loop %g", name, got, want)
			}
			if len(special) > 0 {
				continue
			}
			var seq, mag float64
			for _, v := range x {
				seq += float64(v)
				mag += math.Abs(float64(v))
			}
			if s := ks.sum64(x); math.Abs(s-seq) > 1e-12*mag {
				t.Fatalf("%s: sum64 %g, in order %g", name, s, seq)
			}
			// Magnitudes 2^-40..2^40 make the float64 sum round, so its
			// order shows.
			wide := make([]float32, n)
			for i, v := range x {
				wide[i] = float32(math.Ldexp(float64(v), rng.IntN(81)-40))
			}
			if s, w := ks.sum64(wide), lanesSum64(wide); math.Float64bits(s) != math.Float64bits(w) {
				t.Fatalf("%s: sum64 %g, eight lanes %g", name, s, w)
			}
			y := append([]float32(nil), x...)
			ks.Scale(y, 0.3)
			for i := range y {
				if w := x[i] * 0.3; math.Float32bits(y[i]) != math.Float32bits(w) {
					t.Fatalf("%s: Scale [%d] %g, want %g", name, i, y[i], w)
				}
			}
			copy(y, x)
			ks.Softmax(y)
			m := float64(want)
			var z float64
			for _, v := range x {
				z += math.Exp(float64(v) - m)
			}
			for i, v := range x {
				checkClose(t, fmt.Sprintf("%s: softmax[%d]", name, i), y[i], math.Exp(float64(v)-m)/z, 1, 1e-6)
			}
		}
	}
}

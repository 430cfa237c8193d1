package kernels

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/bulkhead-ai/bulkhead/models/gguf"
)

// TestMulT checks MulT against plain float64 dot products on every set, for
// shapes with and without remainders (rows not a multiple of 4 or 3, lengths
// not a multiple of 8) and strided rows.
func TestMulT(t *testing.T) {
	eachSet(t, func(t *testing.T, ks Set) {
		rng := rand.New(rand.NewPCG(1, 2))
		for _, sh := range []struct{ na, nb, k, lda, ldb, ldo int }{
			{1, 1, 1, 1, 1, 1}, {3, 4, 8, 8, 8, 4}, {7, 9, 32, 96, 96, 12}, {128, 128, 64, 768, 768, 128},
			{5, 6, 13, 13, 20, 6}, {11, 32, 7, 7, 7, 40}, {2, 3, 100, 100, 100, 3},
		} {
			a := make([]float32, (sh.na-1)*sh.lda+sh.k)
			b := make([]float32, (sh.nb-1)*sh.ldb+sh.k)
			for i := range a {
				a[i] = float32(rng.NormFloat64())
			}
			for i := range b {
				b[i] = float32(rng.NormFloat64())
			}
			out := make([]float32, (sh.na-1)*sh.ldo+sh.nb)
			ks.MulT(out, sh.ldo, a, sh.lda, sh.na, b, sh.ldb, sh.nb, sh.k)
			for i := range sh.na {
				for j := range sh.nb {
					var want float64
					for e := range sh.k {
						want += float64(a[i*sh.lda+e]) * float64(b[j*sh.ldb+e])
					}
					if got := float64(out[i*sh.ldo+j]); math.Abs(got-want) > 1e-4*math.Sqrt(float64(sh.k)) {
						t.Fatalf("%+v: out[%d][%d] = %g, want %g", sh, i, j, got, want)
					}
				}
			}
		}
	})
}

// TestGELU checks the set's GELU bitwise against ggml's tabulated GELU
// computed element by element: the table at x rounded to half, 0 from -10
// down, x from 10 up, NaN kept NaN.
func TestGELU(t *testing.T) {
	eachSet(t, func(t *testing.T, ks Set) {
		rng := rand.New(rand.NewPCG(3, 4))
		x := make([]float32, 1000)
		for i := range x {
			x[i] = float32(rng.NormFloat64() * 6)
		}
		copy(x, []float32{-10, 10, -10.5, 11, 0, float32(math.Copysign(0, -1)), 9.999, -9.999, 65504, 1e-8,
			float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)), -65504, 65520, -1e-8})
		got := make([]float32, len(x))
		ks.GELU(got, x)
		for i, v := range x {
			var want float32
			switch {
			case v <= -10:
				want = 0
			case v >= 10:
				want = v
			default:
				want = gguf.F16ToF32(geluTable()[gguf.F32ToF16(v)])
			}
			if math.Float32bits(got[i]) != math.Float32bits(want) {
				t.Fatalf("gelu(%g) (element %d) = %g, want %g", v, i, got[i], want)
			}
		}
	})
}

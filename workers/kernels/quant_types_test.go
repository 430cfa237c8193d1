package kernels

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/bulkhead-ai/bulkhead/models/gguf"
)

// TestRowEqualsDequantize checks bitwise that an embedding lookup gives what
// gguf.Dequantize (exact to llama.cpp) gives, for every weight type.
func TestRowEqualsDequantize(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	for _, tc := range allTypes {
		t.Run(tc.t.String(), func(t *testing.T) {
			m := randMatrix(t, rng, tc.t, 3, tc.cols)
			rs := m.rowSize()
			got, want := make([]float32, tc.cols), make([]float32, tc.cols)
			for i := range 3 {
				m.Row(i, got)
				if err := gguf.Dequantize(tc.t, m.Data[i*rs:(i+1)*rs], want); err != nil {
					t.Fatal(err)
				}
				for k := range want {
					if math.Float32bits(got[k]) != math.Float32bits(want[k]) {
						t.Fatalf("row %d [%d]: Row %g, Dequantize %g", i, k, got[k], want[k])
					}
				}
			}
		})
	}
}

// TestQuantizeQ8_1 checks the Q8_1 quantizer against GGML's reference rules:
// d = amax/127, q = round(x/d) with ties away from zero, s = f16(d*sum(q)).
func TestQuantizeQ8_1(t *testing.T) {
	for _, tc := range []struct {
		name  string
		x     float32
		want  int8
		wantS float32
	}{
		// amax = 127 gives d = 1, so q = round(x) and s = 127 + q.
		{"half-away", 0.5, 1, 128},
		{"neg-half-away", -0.5, -1, 126},
		{"2.5-away-not-even", 2.5, 3, 130},
		{"below-half", 0.49, 0, 127},
		{"min", -127, -127, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := make([]float32, 32)
			x[0], x[17] = 127, tc.x
			q := make([]byte, 36)
			quantizeQ8_1(q, x)
			if d := gguf.F16ToF32(rd16(q)); d != 1 {
				t.Fatalf("d = %g, want 1", d)
			}
			if got := int8(q[4+17]); got != tc.want {
				t.Fatalf("q = %d, want %d", got, tc.want)
			}
			if s := gguf.F16ToF32(rd16(q[2:])); s != tc.wantS {
				t.Fatalf("s = %g, want %g", s, tc.wantS)
			}
		})
	}
	t.Run("s-rounded-to-half", func(t *testing.T) {
		rng := rand.New(rand.NewPCG(23, 24))
		x := randVec(rng, 64)
		q := make([]byte, 72)
		quantizeQ8_1(q, x)
		for b := range 2 {
			blk := q[b*36 : b*36+36]
			var amax float32
			for _, v := range x[b*32 : b*32+32] {
				amax = max(amax, float32(math.Abs(float64(v))))
			}
			d32 := amax / 127 // s uses d before its rounding to f16
			d := gguf.F16ToF32(rd16(blk))
			var sum int32
			for _, v := range blk[4:] {
				sum += int32(int8(v))
			}
			if want := gguf.F32ToF16(float32(sum) * d32); rd16(blk[2:]) != want {
				t.Fatalf("block %d: s %04x, want f16(%d*%g) = %04x", b, rd16(blk[2:]), sum, d32, want)
			}
			for j, v := range blk[4:] {
				checkClose(t, "dequantized", d*float32(int8(v)), float64(x[b*32+j]), float64(d), 0.5001)
			}
		}
	})
	t.Run("all-zero", func(t *testing.T) {
		q := make([]byte, 36)
		for i := range q {
			q[i] = 0xff
		}
		quantizeQ8_1(q, make([]float32, 32))
		for i, b := range q {
			if b != 0 {
				t.Fatalf("byte %d = %d", i, b)
			}
		}
	})
}

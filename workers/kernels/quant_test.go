package kernels

import (
	"bytes"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/bulkhead-ai/bulkhead/models/gguf"
)

// The activation quantizers (Q8_0, Q8_1, Q8_K) on every path, against the
// portable ones and at the extremes.

func TestQuantizeQ8(t *testing.T) {
	// amax = 127 gives d = 1 exactly, so q = round(x) with ties away from zero.
	for _, tc := range []struct {
		name string
		x    float32
		want int8
	}{
		{"max", 127, 127},
		{"min", -127, -127},
		{"half-away", 0.5, 1},
		{"neg-half-away", -0.5, -1},
		{"2.5-away-not-even", 2.5, 3},
		{"below-half", 0.49, 0},
		{"zero", 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := make([]float32, 32)
			x[0], x[1] = 127, tc.x
			q := make([]byte, 34)
			quantizeQ8(q, x)
			if d := gguf.F16ToF32(rd16(q)); d != 1 {
				t.Fatalf("d = %g, want 1", d)
			}
			if got := int8(q[3]); got != tc.want {
				t.Fatalf("q = %d, want %d", got, tc.want)
			}
		})
	}
	t.Run("all-zero", func(t *testing.T) {
		q := make([]byte, 34)
		for i := range q {
			q[i] = 0xff
		}
		quantizeQ8(q, make([]float32, 32))
		for i, b := range q {
			if b != 0 {
				t.Fatalf("byte %d = %d", i, b)
			}
		}
	})
}

func TestQuantizeQ8K(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	x := randVec(rng, 512)
	x[300] = -9 // largest magnitude of block 1: GGML maps it to -127
	q := make([]q8K, 2)
	quantizeQ8K(q, x)
	if q[1].qs[300-256] != -127 {
		t.Fatalf("largest-magnitude element quantized to %d, want -127", q[1].qs[44])
	}
	for b := range 2 {
		for j := range 16 {
			var s int
			for _, v := range q[b].qs[j*16 : j*16+16] {
				s += int(v)
			}
			if int(q[b].bsums[j]) != s {
				t.Fatalf("block %d bsum %d = %d, want %d", b, j, q[b].bsums[j], s)
			}
		}
		for k := range 256 {
			checkClose(t, "dequantized", q[b].d*float32(q[b].qs[k]), float64(x[b*256+k]), math.Abs(float64(q[b].d)), 0.5001)
		}
	}
}

// TestQuantQ8Vector checks the AVX2 and AVX-512 row quantizers against
// quantizeQ8 and auxRow byte for byte: random rows, ties at every half, zero
// blocks, tiny and huge scales, and nonFinite's blocks.
func TestQuantQ8Vector(t *testing.T) {
	for _, kp := range []path{pathAVX2, pathAVX512} {
		t.Run(kp.String(), func(t *testing.T) {
			if detectPath() < kp {
				t.Skipf("this CPU or build lacks the %s kernels (best here: %s)", kp, detectPath())
			}
			testQuantQ8Vector(t, kp)
		})
	}
}

func testQuantQ8Vector(t *testing.T, kp path) {
	quant := quantQ8AVX512
	if kp == pathAVX2 {
		quant = quantQ8AVX2
	}
	rng := rand.New(rand.NewPCG(13, 14))
	const nb = 24
	x := make([]float32, nb*32)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	for k := range 32 { // block 1: ties, d = 1
		x[32+k] = float32(k-16) + 0.5
	}
	x[32] = 127
	for k := range 32 { // block 2: zero
		x[64+k] = 0
	}
	for k := range 32 { // blocks 3, 4: tiny and huge magnitudes
		x[96+k] = float32(rng.NormFloat64()) * 1e-6
		x[128+k] = float32(rng.NormFloat64()) * 1e4
	}
	x[160+5] = float32(math.Copysign(0, -1))
	nonFinite(x[192:], rng)
	for _, k := range []int32{8, 128} {
		want, got := make([]byte, nb*34), make([]byte, nb*34)
		wa, ga := make([]q8Aux, nb), make([]q8Aux, nb)
		quantizeQ8(want, x)
		j := &matJob{m: Matrix{Type: gguf.TypeQ8_0}}
		if k == 8 {
			j.m.Type = gguf.TypeQ4_0
		}
		j.auxRow(wa, want)
		quant(&got[0], &x[0], nb, &ga[0], k)
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("k %d byte %d (block %d): %s %#x != go %#x", k, i, i/34, kp, got[i], want[i])
			}
		}
		for b := range wa {
			if math.Float32bits(wa[b].d) != math.Float32bits(ga[b].d) || wa[b].c != ga[b].c {
				t.Fatalf("k %d aux %d: %s %+v != go %+v", k, b, kp, ga[b], wa[b])
			}
		}
		quant(&got[0], &x[0], nb, nil, 0)
		if !bytes.Equal(got, want) {
			t.Fatal("without aux: blocks differ")
		}
	}
}

// nonFinite fills eight 32-element blocks of x (random values otherwise)
// with what the quantizers must agree on beyond numbers: a NaN (block 0),
// a negative one (1), a signalling NaN with a payload (2), two NaNs of
// different payloads (3), +Inf (4), -Inf beside a NaN (5), a scale so
// small that its inverse overflows to +Inf (6) and a subnormal one (7).
func nonFinite(x []float32, rng *rand.Rand) {
	for i := range 8 * 32 {
		x[i] = float32(rng.NormFloat64())
	}
	nan := float32(math.NaN())
	x[0*32+3] = nan
	x[1*32+31] = -nan
	x[2*32+0] = math.Float32frombits(0x7f800123)
	x[3*32+7], x[3*32+20] = math.Float32frombits(0x7fc00005), math.Float32frombits(0xffd00000)
	x[4*32+9] = float32(math.Inf(1))
	x[5*32+1], x[5*32+30] = float32(math.Inf(-1)), nan
	for k := range 32 {
		x[6*32+k] = float32(k-16) * 1e-39
		x[7*32+k] = float32(k%5) * 1e-44
	}
}

// TestQuantQ81Vector checks the AVX2 and AVX-512 Q8_1 row quantizers
// against quantizeQ8_1 byte for byte, and the AVX-512 one's side data against
// the halves it wrote: random rows, ties, a zero block, tiny and huge scales,
// nonFinite's blocks.
func TestQuantQ81Vector(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 16))
	const nb = 24
	x := make([]float32, nb*32)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	for k := range 32 {
		x[32+k] = float32(k-16) + 0.5
		x[64+k] = 0
		x[96+k] = float32(rng.NormFloat64()) * 1e-6
		x[128+k] = float32(rng.NormFloat64()) * 1e4
	}
	x[32] = 127
	nonFinite(x[160:], rng)
	want := make([]byte, nb*q81Block)
	quantizeQ8_1(want, x)
	for _, kp := range []path{pathAVX2, pathAVX512} {
		t.Run(kp.String(), func(t *testing.T) {
			if detectPath() < kp {
				t.Skipf("this CPU or build lacks the %s kernels (best here: %s)", kp, detectPath())
			}
			got := make([]byte, len(want))
			aux := make([]q81Aux, nb)
			if kp == pathAVX2 {
				quantQ81AVX2(&got[0], &x[0], nb)
			} else {
				quantQ81AVX512(&got[0], &x[0], nb, &aux[0])
			}
			for i := range want {
				if got[i] != want[i] {
					t.Fatalf("byte %d (block %d): %s %#x != go %#x", i, i/q81Block, kp, got[i], want[i])
				}
			}
			for b := range aux {
				blk := want[b*q81Block:]
				w := q81Aux{d: half(blk[0:2]), s: half(blk[2:4])}
				if kp == pathAVX512 && (math.Float32bits(aux[b].d) != math.Float32bits(w.d) || math.Float32bits(aux[b].s) != math.Float32bits(w.s)) {
					t.Fatalf("aux %d: %+v != %+v", b, aux[b], w)
				}
			}
		})
	}
}

// TestQuantQ8KVector checks the AVX2 and AVX-512 Q8_K row quantizers against
// quantizeQ8K: random rows, halves that round to even, a zero block, the
// largest magnitude twice with both signs (the first sets the sign), a NaN,
// a signalling NaN beside -Inf, +Inf, tiny and huge scales.
func TestQuantQ8KVector(t *testing.T) {
	rng := rand.New(rand.NewPCG(17, 18))
	const nb = 8
	x := make([]float32, (nb+1)*256) // and a block with +Inf
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	for k := range 256 {
		x[256+k] = float32(k%64-32) + 0.5 // block 1: iscale 1, every value a tie
		x[512+k] = 0
		x[1024+k] = float32(rng.NormFloat64()) * 1e-6
		x[1280+k] = float32(rng.NormFloat64()) * 1e4
	}
	x[256+200] = -127
	x[768+40], x[768+190] = 9, -9 // block 3: +9 comes first
	x[1536+77] = float32(math.NaN())
	x[1792+3], x[1792+250] = math.Float32frombits(0x7f800123), float32(math.Inf(-1)) // the NaN's bits win
	x[256*nb+100] = float32(math.Inf(1))
	want := make([]q8K, nb+1)
	quantizeQ8K(want, x)
	for _, kp := range []path{pathAVX2, pathAVX512} {
		t.Run(kp.String(), func(t *testing.T) {
			if detectPath() < kp {
				t.Skipf("this CPU or build lacks the %s kernels (best here: %s)", kp, detectPath())
			}
			got := make([]q8K, nb+1)
			for b := range got {
				got[b].d, got[b].qs[9], got[b].bsums[15] = 5, 7, 9 // every field must be written
			}
			if kp == pathAVX2 {
				quantQ8KAVX2(&got[0], &x[0], nb+1)
			} else {
				quantQ8KAVX512(&got[0], &x[0], nb+1)
			}
			for b := range want {
				if math.Float32bits(got[b].d) != math.Float32bits(want[b].d) || got[b].qs != want[b].qs || got[b].bsums != want[b].bsums {
					t.Fatalf("block %d: %s d %g bsums %v != go d %g bsums %v", b, kp, got[b].d, got[b].bsums, want[b].d, want[b].bsums)
				}
			}
		})
	}
}

// TestRoundAwayAndAbsMax pins the portable quantizers' rules that the
// vector ones follow: ties away from zero, NaN and infinities to 0 (not
// whatever the platform's float-to-int conversion gives), and a NaN above
// every number in a block's largest magnitude.
func TestRoundAwayAndAbsMax(t *testing.T) {
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	for _, c := range []struct {
		v    float32
		want int8
	}{{2.5, 3}, {-2.5, -3}, {0.49999997, 0}, {-127, -127}, {126.5, 127}, {nan, 0}, {-nan, 0}, {inf, 0}, {-inf, 0}} {
		if got := roundAway(c.v); got != c.want {
			t.Errorf("roundAway(%v) = %d, want %d", c.v, got, c.want)
		}
	}
	for _, c := range []struct {
		xs   []float32
		want uint32
	}{
		{[]float32{1, -3, 2}, math.Float32bits(3)},
		{[]float32{-inf, 1e38}, math.Float32bits(inf)},
		{[]float32{1, inf, -nan, 2}, math.Float32bits(nan)},
		{[]float32{math.Float32frombits(0x7f800001), 5}, 0x7f800001},
		{[]float32{float32(math.Copysign(0, -1))}, 0},
	} {
		if got := math.Float32bits(absMax(c.xs)); got != c.want {
			t.Errorf("absMax(%v) = %#x, want %#x", c.xs, got, c.want)
		}
	}
}

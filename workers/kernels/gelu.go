package kernels

import (
	"math"
	"sync"

	"github.com/bulkhead-ai/bulkhead/models/gguf"
)

// geluTable maps every half-precision input to GELU's value rounded to half,
// as ggml's CPU backend tabulates it (GGML_GELU_FP16). Built once, read-only.
var geluTable = sync.OnceValue(func() *[1 << 16]uint16 {
	var t [1 << 16]uint16
	for i := range t {
		t[i] = gguf.F32ToF16(geluF32(gguf.F16ToF32(uint16(i))))
	}
	return &t
})

// geluF32 is GELU's tanh approximation in float32, operation by operation as
// ggml writes it: 0.5*x*(1 + tanh(sqrt(2/pi)*x*(1 + 0.044715*x*x))).
func geluF32(x float32) float32 {
	const coefA, sqrt2OverPi = float32(0.044715), float32(0.79788456080286535587989211986876)
	inner := float32(sqrt2OverPi*x) * (1 + float32(float32(coefA*x)*x))
	return float32(float32(0.5)*x) * (1 + float32(math.Tanh(float64(inner))))
}

// GeGLU writes dst[i] = gelu(gate[i]) * up[i] with ggml's tabulated GELU:
// the gate is rounded to half and looked up, below -10 the result is 0 and
// from 10 up gelu is the identity.
func GeGLU(dst, gate, up []float32) {
	n := len(dst)
	gate, up = gate[:n], up[:n]
	t := geluTable()
	for i, g := range gate {
		switch {
		case g <= -10:
			dst[i] = 0
		case g >= 10:
			dst[i] = g * up[i]
		default:
			dst[i] = gguf.F16ToF32(t[gguf.F32ToF16(g)]) * up[i]
		}
	}
}

// SoftCap replaces each x by cap*tanh(x/cap), as ggml computes it: a multiply
// by the reciprocal, tanh, a multiply by cap.
func SoftCap(x []float32, cap float32) {
	inv := 1 / cap
	for i, v := range x {
		x[i] = float32(math.Tanh(float64(v*inv))) * cap
	}
}

// Scale multiplies x by s in place.
func (ks Set) Scale(x []float32, s float32) {
	k := 0
	switch {
	case ks.path() >= pathAVX512 && len(x) >= 16:
		k = len(x) &^ 15
		scaleAVX512(&x[0], k, s)
	case ks.path() == pathAVX2 && len(x) >= 8:
		k = len(x) &^ 7
		scaleAVX2(&x[0], k, s)
	}
	for i := k; i < len(x); i++ {
		x[i] *= s
	}
}

// geluTableF32 is geluTable with its halves widened to float32, the table the
// GELU kernels gather from. Built once, read-only.
var geluTableF32 = sync.OnceValue(func() *[1 << 16]float32 {
	var f [1 << 16]float32
	for i, h := range geluTable() {
		f[i] = gguf.F16ToF32(h)
	}
	return &f
})

// GELU writes dst[i] = gelu(x[i]) with ggml's tabulated GELU (as GeGLU),
// the plain activation of an encoder's feed-forward layer. dst may be x. The
// vector paths gather from the widened table; the rest takes geluBlocks.
func (ks Set) GELU(dst, x []float32) {
	n := len(dst)
	x = x[:n]
	k := 0
	switch {
	case ks.path() >= pathAVX512 && n >= 16:
		k = n &^ 15
		geluAVX512(&dst[0], &x[0], k, &geluTableF32()[0])
	case ks.path() == pathAVX2 && n >= 8:
		k = n &^ 7
		geluAVX2(&dst[0], &x[0], k, &geluTableF32()[0])
	}
	ks.geluBlocks(dst[k:], x[k:])
}

// geluBlocks is GELU with the roundings to and from half on the set's
// conversion kernels, a block at a time, and the table read element by element.
func (ks Set) geluBlocks(dst, x []float32) {
	const block = 256
	n := len(dst)
	t := geluTable()
	var h [block]uint16
	var g [block]float32
	for lo := 0; lo < n; lo += block {
		hi := min(lo+block, n)
		hb := h[:hi-lo]
		ks.F32ToF16s(hb, x[lo:hi])
		for i, v := range hb {
			hb[i] = t[v]
		}
		gb := g[:hi-lo]
		ks.F16ToF32s(gb, hb)
		for i, v := range x[lo:hi] {
			switch {
			case v <= -10:
				dst[lo+i] = 0
			case v >= 10:
				dst[lo+i] = v
			default:
				dst[lo+i] = gb[i]
			}
		}
	}
}

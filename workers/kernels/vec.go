package kernels

import (
	"math"
	"unsafe"

	"github.com/bulkhead-ai/bulkhead/models/gguf"
)

// DotF32 returns the dot product of a and b[:len(a)], with one 8-lane
// accumulator (the order MatMul uses for F32 weights).
func (ks Set) DotF32(a, b []float32) float32 {
	n := len(a)
	b = b[:n]
	if !ks.asm() || n < 8 {
		return dotF32Go(a, b)
	}
	s := dotF32AVX(&a[0], &b[0], n)
	for k := n &^ 7; k < n; k++ {
		s = s + float32(a[k]*b[k])
	}
	return s
}

// DotF16 returns the dot product of two IEEE half vectors (b[:len(a)]),
// accumulated in float32 in the order MatMul uses for F16 weights.
func (ks Set) DotF16(a, b []uint16) float32 {
	n := len(a)
	b = b[:n]
	if !ks.asm() || n < 8 {
		return dotF16Go(a, b)
	}
	s := dotF16AVX(&a[0], &b[0], n)
	for k := n &^ 7; k < n; k++ {
		s = s + float32(gguf.F16ToF32(a[k])*gguf.F16ToF32(b[k]))
	}
	return s
}

// AxpyF16 adds a*half(x[i]) to dst[i] for i < len(dst).
func (ks Set) AxpyF16(dst []float32, a float32, x []uint16) {
	n := len(dst)
	x = x[:n]
	k := 0
	if ks.asm() && n >= 8 {
		axpyF16AVX(&dst[0], a, &x[0], n)
		k = n &^ 7
	}
	for ; k < n; k++ {
		dst[k] = dst[k] + float32(a*gguf.F16ToF32(x[k]))
	}
}

// AxpyF32 adds a*x[i] to dst[i] for i < len(dst): a fused multiply-add on
// the vector path, a product rounded then added elsewhere. Each element is
// computed the same wherever dst starts.
func (ks Set) AxpyF32(dst []float32, a float32, x []float32) {
	n := len(dst)
	x = x[:n]
	k := 0
	if ks.asm() && n >= 8 {
		axpyF32AVX(&dst[0], a, &x[0], n)
		k = n &^ 7
	}
	for ; k < n; k++ {
		dst[k] = dst[k] + float32(a*x[k])
	}
}

// dotsTBlock is the columns DotsT takes at a time (its accumulators live on
// the stack).
const dotsTBlock = 256

// DotsT sets out[o] to the dot product of column o of w with x, for
// o < len(out): w holds len(x) rows of stride floats. Each is bitwise what
// DotF32 gives for the column's values and x (the same lanes, fused or not
// as the set's DotF32, the same horizontal sum and tail), computed for many
// columns at once: a product by a matrix stored transposed (a LoRA
// adapter's B·t, with B's rank columns as rows).
func (ks Set) DotsT(out []float32, w []float32, stride int, x []float32) {
	n := len(x)
	var acc [8][dotsTBlock]float32
	var pad [dotsTBlock]float32
	for c0 := 0; c0 < len(out); c0 += dotsTBlock {
		c1 := min(c0+dotsTBlock, len(out))
		wd := c1 - c0
		// A block's width rounds up to the vector's, so every column takes
		// the vector path's operations (a ragged end is copied, zero padded).
		wv := (wd + 7) &^ 7
		k := 0
		if n >= 8 {
			for l := range acc {
				clear(acc[l][:wv])
			}
			for ; k+8 <= n; k += 8 {
				for l := range 8 {
					row := w[(k+l)*stride+c0 : (k+l)*stride+c1]
					if wv != wd {
						copy(pad[:], row)
						row = pad[:wv]
					}
					ks.AxpyF32(acc[l][:wv], x[k+l], row)
				}
			}
		}
		o := out[c0:c1]
		if n >= 8 {
			// DotF32's horizontal sum, ((a0+a1)+(a2+a3))+((a4+a5)+(a6+a7)),
			// a vector of columns at a time (Add's sums are the scalar ones).
			for l := 0; l < 8; l += 2 {
				ks.Add(acc[l][:wd], acc[l+1][:wd])
			}
			ks.Add(acc[0][:wd], acc[2][:wd])
			ks.Add(acc[4][:wd], acc[6][:wd])
			ks.Add(acc[0][:wd], acc[4][:wd])
			copy(o, acc[0][:wd])
		} else {
			clear(o)
		}
		for ; k < n; k++ {
			for c := range o {
				o[c] = o[c] + float32(w[k*stride+c0+c]*x[k])
			}
		}
	}
}

// F32ToF16s rounds src[:len(dst)] to IEEE half, to nearest even (as VCVTPS2PH).
func (ks Set) F32ToF16s(dst []uint16, src []float32) {
	n := len(dst)
	src = src[:n]
	k := 0
	if ks.asm() && n >= 8 {
		f32ToF16AVX(&dst[0], &src[0], n)
		k = n &^ 7
	}
	for ; k < n; k++ {
		dst[k] = gguf.F32ToF16(src[k])
	}
}

// F16ToF32s converts IEEE half src[:len(dst)] to float32 exactly.
func (ks Set) F16ToF32s(dst []float32, src []uint16) {
	n := len(dst)
	src = src[:n]
	k := 0
	if ks.asm() && n >= 8 {
		f16ToF32AVX(&dst[0], &src[0], n)
		k = n &^ 7
	}
	for ; k < n; k++ {
		dst[k] = gguf.F16ToF32(src[k])
	}
}

// RMSNorm writes dst[i] = (x[i]*scale)*w[i] with scale = 1/sqrt(mean(x²)+eps);
// squares are summed in float64, scale is computed in float32, as GGML does.
// The squares run in LayerNorm's eight lanes over the first n&^7 elements,
// then the tail in order, so every path gives the same bits. dst may be x.
func (ks Set) RMSNorm(dst, x, w []float32, eps float32) {
	n := len(x)
	dst, w = dst[:n], w[:n]
	k := n &^ 7
	var sum float64
	if ks.path() >= pathAVX2 && k > 0 {
		sum = sqDevF64AVX2(&x[0], k, 0) // x-0 is x
	} else {
		var l [8]float64
		for i, v := range x[:k] {
			l[i%8] += float64(float32(v * v))
		}
		sum = lanes8(&l)
	}
	for _, v := range x[k:] {
		sum += float64(float32(v * v))
	}
	mean := float32(sum / float64(n))
	scale := 1 / float32(math.Sqrt(float64(mean+eps)))
	a := 0
	if ks.path() >= pathAVX2 && k > 0 {
		normScaleAVX2(&dst[0], &x[0], &w[0], k, scale)
		a = k
	}
	for i := a; i < n; i++ {
		dst[i] = float32(x[i]*scale) * w[i]
	}
}

// LayerNorm writes dst[i] = ((x[i]-mean)*scale)*w[i] + b[i] with scale =
// 1/sqrt(variance+eps), as GGML's norm followed by its mul and add: the sum
// and the squared deviations accumulated in float64, mean and scale in
// float32. The sums run in eight lanes over the first n&^7 elements (element
// i into lane i%8, the lanes added as lanes8 adds them), then the tail in
// order: the vector kernels' order, so every path gives the same bits. dst
// may be x.
func (ks Set) LayerNorm(dst, x, w, b []float32, eps float32) {
	n := len(x)
	dst, w, b = dst[:n], w[:n], b[:n]
	k := n &^ 7
	vec := ks.path() >= pathAVX2 && k > 0
	var sum, sq float64
	if vec {
		sum = sumF64AVX2(&x[0], k)
	} else {
		var l [8]float64
		for i, v := range x[:k] {
			l[i%8] += float64(v)
		}
		sum = lanes8(&l)
	}
	for _, v := range x[k:] {
		sum += float64(v)
	}
	mean := float32(sum) / float32(n)
	if vec {
		sq = sqDevF64AVX2(&x[0], k, mean)
	} else {
		var l [8]float64
		for i, v := range x[:k] {
			d := v - mean
			l[i%8] += float64(d * d)
		}
		sq = lanes8(&l)
	}
	for _, v := range x[k:] {
		d := v - mean
		sq += float64(d * d)
	}
	scale := 1 / float32(math.Sqrt(float64(float32(sq/float64(n))+eps)))
	a := 0
	if vec {
		normAffineAVX2(&dst[0], &x[0], &w[0], &b[0], k, mean, scale)
		a = k
	}
	for i := a; i < n; i++ {
		dst[i] = float32(float32((x[i]-mean)*scale)*w[i]) + b[i]
	}
}

// lanes8 adds eight float64 lane sums as the vector sum kernels do.
func lanes8(l *[8]float64) float64 {
	return ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]))
}

// SwiGLU writes dst[i] = silu(gate[i]) * up[i], silu(v) = v/(1+exp(-v)).
func (ks Set) SwiGLU(dst, gate, up []float32) {
	n := len(dst)
	gate, up = gate[:n], up[:n]
	k := 0
	for ks.path() >= pathAVX512 && k+8 <= n {
		k += swigluAVX512(&dst[k], &gate[k], &up[k], (n-k)&^7)
		if k+8 <= n { // a group with an argument beyond the vector range
			swiGLUGo(dst[k:k+8], gate[k:k+8], up[k:k+8])
			k += 8
		}
	}
	for ks.path() == pathAVX2 && k+4 <= n {
		k += swigluAVX2(&dst[k], &gate[k], &up[k], (n-k)&^3)
		if k+4 <= n {
			swiGLUGo(dst[k:k+4], gate[k:k+4], up[k:k+4])
			k += 4
		}
	}
	swiGLUGo(dst[k:], gate[k:], up[k:])
}

func swiGLUGo(dst, gate, up []float32) {
	for i, g := range gate[:len(dst)] {
		e := float32(math.Exp(float64(-g)))
		dst[i] = float32(g/(1+e)) * up[i]
	}
}

// expShift writes dst[i] = exp(src[i]-m) as float32(math.Exp(float64(src[i]-m))).
func (ks Set) expShift(dst, src []float32, m float32) {
	n := len(dst)
	src = src[:n]
	k := 0
	for ks.path() >= pathAVX512 && k+8 <= n {
		k += expShiftAVX512(&dst[k], &src[k], (n-k)&^7, m)
		if k+8 <= n {
			expShiftGo(dst[k:k+8], src[k:k+8], m)
			k += 8
		}
	}
	for ks.path() == pathAVX2 && k+4 <= n {
		k += expShiftAVX2(&dst[k], &src[k], (n-k)&^3, m)
		if k+4 <= n {
			expShiftGo(dst[k:k+4], src[k:k+4], m)
			k += 4
		}
	}
	expShiftGo(dst[k:], src[k:], m)
}

func expShiftGo(dst, src []float32, m float32) {
	for i, v := range src[:len(dst)] {
		dst[i] = float32(math.Exp(float64(v - m)))
	}
}

// Softmax replaces x by its softmax: max subtracted, exponentials summed in
// float64, then scaled by the reciprocal of the sum. On the AVX-512 path the
// sum runs in eight float64 lanes (sum64); the result depends only on x.
func (ks Set) Softmax(x []float32) {
	n := len(x)
	if n == 0 {
		return
	}
	m := float32(math.Inf(-1))
	k := 0
	switch {
	case ks.path() >= pathAVX512 && n >= 16:
		k = n &^ 15
		m = maxF32AVX512(&x[0], k)
	case ks.path() == pathAVX2 && n >= 8:
		k = n &^ 7
		m = maxF32AVX2(&x[0], k)
	}
	// A plain comparison, not the max builtin: max's NaN and signed-zero
	// handling costs more than the rest of the loop.
	for _, v := range x[k:] {
		if v > m {
			m = v
		}
	}
	ks.expShift(x, x, m)
	ks.Scale(x, float32(1/ks.sum64(x)))
}

// sum64 is the sum of x in float64: in order on the portable path, in eight
// lanes then the tail in order on the AVX2 and AVX-512 paths (the same sum).
func (ks Set) sum64(x []float32) float64 {
	var sum float64
	k := 0
	if len(x) >= 8 {
		switch ks.path() {
		case pathAVX512, pathAMX:
			k = len(x) &^ 7
			sum = sumF64AVX512(&x[0], k)
		case pathAVX2:
			k = len(x) &^ 7
			sum = sumF64AVX2(&x[0], k)
		}
	}
	for _, e := range x[k:] {
		sum += float64(e)
	}
	return sum
}

// Add adds x[:len(dst)] into dst.
func Add(dst, x []float32) {
	x = x[:len(dst)]
	for i, v := range x {
		dst[i] += v
	}
}

// Add adds x[:len(dst)] into dst, eight at a time where the set has
// vectors: the same sums as the package's Add.
func (ks Set) Add(dst, x []float32) {
	n := len(dst)
	x = x[:n]
	k := 0
	if ks.asm() && n >= 8 {
		addAVX(&dst[0], &x[0], n)
		k = n &^ 7
	}
	Add(dst[k:], x[k:])
}

// DotsF16 sets out[j] = DotF16(q, k[j*stride:j*stride+len(q)]) * scale for
// j < len(out): one query against a page of keys, bitwise what the calls one
// key at a time would give. qf is q converted to float32 (F16ToF32s).
func (ks Set) DotsF16(out []float32, q []uint16, qf []float32, k []uint16, stride int, scale float32) {
	hd := len(q)
	if len(out) == 0 || hd == 0 {
		return
	}
	_ = k[(len(out)-1)*stride+hd-1]
	if ks.asm() && hd%8 == 0 {
		dotsF16AVX(&out[0], &qf[:hd][0], &k[0], uintptr(stride*2), len(out), hd, scale)
		return
	}
	for j := range out {
		out[j] = ks.DotF16(q, k[j*stride:j*stride+hd]) * scale
	}
}

// AxpysF16 adds w[j]*half(v[j*stride+i]) to dst[i] for i < len(dst), key j
// after key j, for j < len(w): bitwise the AxpyF16 calls one key at a time.
func (ks Set) AxpysF16(dst []float32, w []float32, v []uint16, stride int) {
	hd := len(dst)
	if len(w) == 0 || hd == 0 {
		return
	}
	_ = v[(len(w)-1)*stride+hd-1]
	switch {
	case ks.path() >= pathAVX512 && hd%16 == 0:
		axpysF16Z(&dst[0], &w[0], &v[0], uintptr(stride*2), len(w), hd)
		return
	case ks.asm() && hd%8 == 0:
		axpysF16AVX(&dst[0], &w[0], &v[0], uintptr(stride*2), len(w), hd)
		return
	}
	for j, a := range w {
		ks.AxpyF16(dst, a, v[j*stride:j*stride+hd])
	}
}

// PrefetchRows asks for the first width halves of rows rows of b, stride
// halves apart, to be loaded into cache without waiting for them: the next
// KV page of a head while attention works on the current one. It changes no
// result; on a build without assembly it does nothing.
func (ks Set) PrefetchRows(b []uint16, stride, rows, width int) {
	if rows <= 0 || width <= 0 || !ks.asm() {
		return
	}
	_ = b[(rows-1)*stride+width-1]
	prefetchRows((*byte)(unsafe.Pointer(&b[0])), uintptr(stride*2), rows, width*2)
}

// Dots4F16 is DotsF16 for four queries against the same keys: out[i][j] =
// DotF16(q[i*hd:(i+1)*hd], key j) * scale for j < len(out[0]) (all four the
// same length), bitwise what four DotsF16 calls give; each key is converted
// once for the four. q holds the queries as half, qf the same as float32,
// each 4*hd long.
func (ks Set) Dots4F16(out *[4][]float32, q []uint16, qf []float32, k []uint16, stride int, scale float32) {
	nk, hd := len(out[0]), len(qf)/4
	if len(q) != 4*hd || len(qf) != 4*hd {
		panic("kernels: Dots4F16 queries of different lengths")
	}
	if nk == 0 || hd == 0 {
		return
	}
	_ = k[(nk-1)*stride+hd-1]
	for i := range out {
		if len(out[i]) != nk {
			panic("kernels: Dots4F16 rows of different lengths")
		}
	}
	if ks.asm() && hd%8 == 0 {
		_ = qf[4*hd-1]
		dots4F16AVX(&out[0][0], &out[1][0], &out[2][0], &out[3][0], &qf[0], &k[0], uintptr(stride*2), nk, hd, scale)
		return
	}
	for i := range out {
		ks.DotsF16(out[i], q[i*hd:(i+1)*hd], qf[i*hd:(i+1)*hd], k, stride, scale)
	}
}

// Axpys4F16 is AxpysF16 for four outputs sharing the values: dst[i][x] +=
// w[i][j]*half(v[j*stride+x]), key after key, bitwise four AxpysF16 calls.
func (ks Set) Axpys4F16(dst, w *[4][]float32, v []uint16, stride int) {
	nk, hd := len(w[0]), len(dst[0])
	if nk == 0 || hd == 0 {
		return
	}
	_ = v[(nk-1)*stride+hd-1]
	for i := range dst {
		if len(dst[i]) != hd || len(w[i]) != nk {
			panic("kernels: Axpys4F16 rows of different lengths")
		}
	}
	switch {
	case ks.path() >= pathAVX512 && hd%16 == 0:
		axpys4F16Z(&dst[0][0], &dst[1][0], &dst[2][0], &dst[3][0], &w[0][0], &w[1][0], &w[2][0], &w[3][0], &v[0], uintptr(stride*2), nk, hd)
		return
	case ks.asm() && hd%16 == 0:
		axpys4F16AVX(&dst[0][0], &dst[1][0], &dst[2][0], &dst[3][0], &w[0][0], &w[1][0], &w[2][0], &w[3][0], &v[0], uintptr(stride*2), nk, hd)
		return
	}
	for i := range dst {
		ks.AxpysF16(dst[i], w[i], v, stride)
	}
}

//go:build amd64 && !purego

package kernels

import "golang.org/x/sys/cpu"

// detectPath returns the best kernel path this CPU has.
func detectPath() path {
	x := cpu.X86
	if !x.HasAVX2 || !x.HasFMA || !x.HasF16C {
		return pathGo
	}
	if x.HasAVX512F && x.HasAVX512BW && x.HasAVX512VL && x.HasAVX512VNNI {
		if amx.usable {
			return pathAMX
		}
		return pathAVX512
	}
	return pathAVX2
}

// f16TileF32 is whether the AVX2 F16 tile kernel reads its activations
// already widened to float32 (dot4x3HFAVX: 4 conversions per 12
// multiply-adds, those of the weights) rather than as halves widened where
// they are read (dot4x3HHAVX: 7). The bits are the same: the widened copy
// holds the same half-precision values. On a 2-core AMD EPYC Zen 2 the
// conversions bound the loop: BenchmarkMatMul F16 prefill512-1536x576 one
// thread 46-48 -> 59-60 GFLOP/s, qwen3-0.6b F16 pp512 92 -> 114 tokens/s.
// On a Zen 4 running the AVX2 path the float32 reads were slower (84-90 ->
// 75-81 GFLOP/s at 8192x2048), so a CPU with AVX-512 widens as it reads.
var f16TileF32 = !cpu.X86.HasAVX512F

//go:noescape
func dot4F32AVX(w *byte, wstride uintptr, x *float32, n int, out *[4]float32)

//go:noescape
func dot4F16AVX(w *byte, wstride uintptr, x *float32, n int, out *[4]float32)

//go:noescape
func dotRowsF16AVX(w *byte, wstride uintptr, x *float32, n int, blocks int, out *float32, ahead uintptr)

//go:noescape
func dotRowsF32AVX(w *byte, wstride uintptr, x *float32, n int, blocks int, out *float32, ahead uintptr)

//go:noescape
func dot4BF16AVX(w *byte, wstride uintptr, x *float32, n int, out *[4]float32)

//go:noescape
func dot4x3F32AVX(w *byte, wstride uintptr, x *float32, xstride uintptr, n int, groups int, out *float32, ostride uintptr)

//go:noescape
func dot4x3HHAVX(w *byte, wstride uintptr, x *uint16, xstride uintptr, n int, groups int, out *float32, ostride uintptr)

//go:noescape
func dot4x3HFAVX(w *byte, wstride uintptr, x *float32, xstride uintptr, n int, groups int, out *float32, ostride uintptr)

//go:noescape
func dot4x3BF16AVX(w *byte, wstride uintptr, x *float32, xstride uintptr, n int, groups int, out *float32, ostride uintptr)

//go:noescape
func dot4Q8AVX(w *byte, wstride uintptr, x *byte, nb int, out *[4]float32)

//go:noescape
func dot4Q4AVX(w *byte, wstride uintptr, x *byte, nb int, out *[4]float32)

//go:noescape
func dot4Q5AVX(w *byte, wstride uintptr, x *byte, nb int, out *[4]float32)

//go:noescape
func dot4IQ4NLAVX(w *byte, wstride uintptr, x *byte, nb int, out *[4]float32)

//go:noescape
func dotQ4KAVX2(w *byte, x *q8K, nb int) float32

//go:noescape
func dotQ6KAVX2(w *byte, x *q8K, nb int) float32

//go:noescape
func dotIQ4XSAVX2(w *byte, x *q8K, nb int) float32

//go:noescape
func dotQ3KAVX2(w *byte, x *q8K, nb int) float32

//go:noescape
func dotQ2KAVX2(w *byte, x *q8K, nb int) float32

//go:noescape
func dotQ5KAVX2(w *byte, x *q8K, nb int) float32

//go:noescape
func dotF16AVX(a, b *uint16, n int) float32

//go:noescape
func dotF32AVX(a, b *float32, n int) float32

//go:noescape
func axpyF16AVX(dst *float32, a float32, x *uint16, n int)

//go:noescape
func axpyF32AVX(dst *float32, a float32, x *float32, n int)

//go:noescape
func addAVX(dst, x *float32, n int)

//go:noescape
func f32ToF16AVX(dst *uint16, src *float32, n int)

//go:noescape
func f16ToF32AVX(dst *float32, src *uint16, n int)

// AVX-512 VNNI kernels over packed Q8_0/Q4_0 weights (gemm_avx512_amd64.s):
// 16 weight rows by 4 (P4) or 1 (P1) activation rows.

//go:noescape
func gemmQ8P4(w *byte, nb int, x *byte, xstride uintptr, aux *q8Aux, auxstride uintptr, out *float32, ostride uintptr, pf *byte)

//go:noescape
func gemmQ8P1(w *byte, nb int, x *byte, aux *q8Aux, out *float32)

// gemmQ8AMX and gemmQ4AMX are the tileQ8Kernels of Q8_0 and Q4_0 on AMX
// tiles (gemm_amx_amd64.s); they need the tile data grant (detectAMX).
//
//go:noescape
func gemmQ8AMX(w *byte, nb int, x *byte, xstride uintptr, m int, aux *q8Aux, out *[256]float32)

//go:noescape
func gemmQ4AMX(w *byte, nb int, x *byte, xstride uintptr, m int, aux *q8Aux, out *[256]float32)

// gemmQ4KAMX and gemmQ6KAMX are Q4_K's and Q6_K's tileKKernels on AMX
// tiles.
//
//go:noescape
func gemmQ4KAMX(w *byte, nb int, x *q8K, xstride uintptr, m int, aux *q8KAux, out *[256]float32)

//go:noescape
func gemmQ6KAMX(w *byte, nb int, x *q8K, xstride uintptr, m int, aux *q8KAux, out *[256]float32)

//go:noescape
func gemmQ4P4(w *byte, nb int, x *byte, xstride uintptr, aux *q8Aux, auxstride uintptr, out *float32, ostride uintptr, pf *byte)

//go:noescape
func gemmQ4P1(w *byte, nb int, x *byte, aux *q8Aux, out *float32)

//go:noescape
func gemmIQ4NLP4(w *byte, nb int, x *byte, xstride uintptr, aux *q8Aux, auxstride uintptr, out *float32, ostride uintptr, pf *byte)

//go:noescape
func gemmIQ4NLP1(w *byte, nb int, x *byte, aux *q8Aux, out *float32)

//go:noescape
func quantQ8AVX512(dst *byte, x *float32, nb int, aux *q8Aux, k int32)

//go:noescape
func quantQ8AVX2(dst *byte, x *float32, nb int, aux *q8Aux, k int32)

//go:noescape
func quantQ8KAVX512(dst *q8K, x *float32, nb int)

//go:noescape
func quantQ8KAVX2(dst *q8K, x *float32, nb int)

//go:noescape
func quantQ81AVX512(dst *byte, x *float32, nb int, aux *q81Aux)

//go:noescape
func quantQ81AVX2(dst *byte, x *float32, nb int)

// AVX-512 VNNI kernels over packed Q4_K/Q6_K weights (kquant_avx512_amd64.s).

//go:noescape
func gemmIQ4XSP4(w *byte, nb int, x *q8K, xstride uintptr, aux *q8KAux, auxstride uintptr, out *float32, ostride uintptr, pf *byte)

//go:noescape
func gemmIQ4XSP1(w *byte, nb int, x *q8K, aux *q8KAux, out *float32)

//go:noescape
func gemmQ4KP4(w *byte, nb int, x *q8K, xstride uintptr, aux *q8KAux, auxstride uintptr, out *float32, ostride uintptr, pf *byte)

//go:noescape
func gemmQ4KP1(w *byte, nb int, x *q8K, aux *q8KAux, out *float32)

//go:noescape
func gemmQ6KP4(w *byte, nb int, x *q8K, xstride uintptr, aux *q8KAux, auxstride uintptr, out *float32, ostride uintptr, pf *byte)

//go:noescape
func gemmQ6KP1(w *byte, nb int, x *q8K, aux *q8KAux, out *float32)

// AVX2 kernels over the same packed Q4_K/Q6_K groups (kgemm_avx2_amd64.s):
// half 0 or 1 of a group (8 weight rows) by 4 activation rows (A4), or the
// whole group by one (A1).

//go:noescape
func gemmQ4KA4(w *byte, half int, nb int, x *q8K, xstride uintptr, aux *q8KAux, auxstride uintptr, out *float32, ostride uintptr, pf *byte)

//go:noescape
func gemmQ4KA1(w *byte, nb int, x *q8K, aux *q8KAux, out *float32)

//go:noescape
func gemmQ6KA4(w *byte, half int, nb int, x *q8K, xstride uintptr, aux *q8KAux, auxstride uintptr, out *float32, ostride uintptr, pf *byte)

//go:noescape
func gemmQ6KA1(w *byte, nb int, x *q8K, aux *q8KAux, out *float32)

// AVX2 kernels over packed Q8_0/Q4_0/Q5_0/IQ4_NL/Q4_1/Q5_1 groups
// (gemm_avx2_amd64.s), shaped as
// the Q4_K/Q6_K ones.

//go:noescape
func gemmQ8A4(w *byte, half int, nb int, x *byte, xstride uintptr, aux *q8Aux, auxstride uintptr, out *float32, ostride uintptr, pf *byte)

//go:noescape
func gemmQ8A1(w *byte, nb int, x *byte, aux *q8Aux, out *float32)

//go:noescape
func gemmQ4A4(w *byte, half int, nb int, x *byte, xstride uintptr, aux *q8Aux, auxstride uintptr, out *float32, ostride uintptr, pf *byte)

//go:noescape
func gemmQ4A1(w *byte, nb int, x *byte, aux *q8Aux, out *float32)

//go:noescape
func gemmQ5A4(w *byte, half int, nb int, x *byte, xstride uintptr, aux *q8Aux, auxstride uintptr, out *float32, ostride uintptr, pf *byte)

//go:noescape
func gemmQ5A1(w *byte, nb int, x *byte, aux *q8Aux, out *float32)

//go:noescape
func gemmIQ4NLA4(w *byte, half int, nb int, x *byte, xstride uintptr, aux *q8Aux, auxstride uintptr, out *float32, ostride uintptr, pf *byte)

//go:noescape
func gemmIQ4NLA1(w *byte, nb int, x *byte, aux *q8Aux, out *float32)

//go:noescape
func gemmIQ4XSA4(w *byte, half int, nb int, x *q8K, xstride uintptr, aux *q8KAux, auxstride uintptr, out *float32, ostride uintptr, pf *byte)

//go:noescape
func gemmIQ4XSA1(w *byte, nb int, x *q8K, aux *q8KAux, out *float32)

//go:noescape
func gemmQ41A4(w *byte, half int, nb int, x *byte, xstride uintptr, aux *q81Aux, auxstride uintptr, out *float32, ostride uintptr, pf *byte)

//go:noescape
func gemmQ41A1(w *byte, nb int, x *byte, out *float32)

//go:noescape
func gemmQ51A4(w *byte, half int, nb int, x *byte, xstride uintptr, aux *q81Aux, auxstride uintptr, out *float32, ostride uintptr, pf *byte)

//go:noescape
func gemmQ51A1(w *byte, nb int, x *byte, out *float32)

//go:noescape
func gemmQ2KA4(w *byte, half int, nb int, x *q8K, xstride uintptr, aux *q8KAux, auxstride uintptr, out *float32, ostride uintptr, pf *byte)

//go:noescape
func gemmQ2KA1(w *byte, nb int, x *q8K, aux *q8KAux, out *float32)

//go:noescape
func gemmQ5KA4(w *byte, half int, nb int, x *q8K, xstride uintptr, aux *q8KAux, auxstride uintptr, out *float32, ostride uintptr, pf *byte)

//go:noescape
func gemmQ5KA1(w *byte, nb int, x *q8K, aux *q8KAux, out *float32)

//go:noescape
func gemmQ3KA4(w *byte, half int, nb int, x *q8K, xstride uintptr, aux *q8KAux, auxstride uintptr, out *float32, ostride uintptr, pf *byte)

//go:noescape
func gemmQ3KA1(w *byte, nb int, x *q8K, aux *q8KAux, out *float32)

//go:noescape
func gemmQ2KP1(w *byte, nb int, x *q8K, aux *q8KAux, out *float32)

//go:noescape
func gemmQ2KP4(w *byte, nb int, x *q8K, xstride uintptr, aux *q8KAux, auxstride uintptr, out *float32, ostride uintptr, pf *byte)

//go:noescape
func gemmQ41P4(w *byte, nb int, x *byte, xstride uintptr, aux *q81Aux, auxstride uintptr, out *float32, ostride uintptr, pf *byte)

//go:noescape
func gemmQ51P4(w *byte, nb int, x *byte, xstride uintptr, aux *q81Aux, auxstride uintptr, out *float32, ostride uintptr, pf *byte)

//go:noescape
func gemmQ5P4(w *byte, nb int, x *byte, xstride uintptr, aux *q8Aux, auxstride uintptr, out *float32, ostride uintptr, pf *byte)

//go:noescape
func gemmQ5P1(w *byte, nb int, x *byte, aux *q8Aux, out *float32)

// Vector exp kernels (exp_avx512_amd64.s), bitwise equal to math.Exp.

//go:noescape
func expShiftAVX512(dst, src *float32, n int, m float32) int

//go:noescape
func expShiftAVX2(dst, src *float32, n int, m float32) int

// GELU kernels (gelu_avx2_amd64.s, gelu_avx512_amd64.s).

//go:noescape
func geluAVX2(dst, x *float32, n int, tab *float32)

//go:noescape
func geluAVX512(dst, x *float32, n int, tab *float32)

//go:noescape
func swigluAVX2(dst, gate, up *float32, n int) int

//go:noescape
func swigluAVX512(dst, gate, up *float32, n int) int

// Attention kernels over a page of K or V rows (attn_avx2_amd64.s).

//go:noescape
func dotsF16AVX(out *float32, q *float32, k *uint16, kstride uintptr, nk int, hd int, scale float32)

//go:noescape
func axpysF16AVX(dst *float32, w *float32, v *uint16, vstride uintptr, nk int, hd int)

// AVX-512 F32 kernels with 16-lane accumulators (gemm_avx512_amd64.s).

//go:noescape
func dot4x4F32Z(w *byte, wstride uintptr, x *float32, xstride uintptr, n int, out *[16]float32)

//go:noescape
func dotRowsF32Z(w *byte, wstride uintptr, x *float32, n int, blocks int, out *float32)

//go:noescape
func readSumAVX(p *byte, n int) uint64

// Softmax and Scale parts (softmax_avx512_amd64.s).

//go:noescape
func maxF32AVX512(x *float32, n int) float32

//go:noescape
func sumF64AVX512(x *float32, n int) float64

//go:noescape
func scaleAVX512(x *float32, n int, s float32)

// Softmax and Scale parts on the AVX2 path (softmax_avx2_amd64.s).

//go:noescape
func maxF32AVX2(x *float32, n int) float32

//go:noescape
func sumF64AVX2(x *float32, n int) float64

//go:noescape
func scaleAVX2(x *float32, n int, s float32)

// LayerNorm parts (norm_avx2_amd64.s).

//go:noescape
func sqDevF64AVX2(x *float32, n int, mean float32) float64

//go:noescape
func normAffineAVX2(dst, x, w, b *float32, n int, mean, scale float32)

//go:noescape
func normScaleAVX2(dst, x, w *float32, n int, scale float32)

//go:noescape
func prefetchRows(p *byte, stride uintptr, rows int, width int)

//go:noescape
func dots4F16AVX(o0, o1, o2, o3 *float32, q *float32, k *uint16, kstride uintptr, nk int, hd int, scale float32)

//go:noescape
func axpys4F16AVX(d0, d1, d2, d3 *float32, w0, w1, w2, w3 *float32, v *uint16, vstride uintptr, nk int, hd int)

// AVX-512 forms of the V page kernels (attn_avx512_amd64.s), bitwise
// axpysF16AVX and axpys4F16AVX; hd a multiple of 16.
//
//go:noescape
func axpysF16Z(dst *float32, w *float32, v *uint16, vstride uintptr, nk int, hd int)

//go:noescape
func axpys4F16Z(d0, d1, d2, d3 *float32, w0, w1, w2, w3 *float32, v *uint16, vstride uintptr, nk int, hd int)

// axpysQ8AVX and axpysQ4AVX are AxpysQ8 and AxpysQ4 over nb blocks of nk
// keys, vstride bytes apart (kvquant_avx2_amd64.s).
//
//go:noescape
func axpysQ8AVX(dst *float32, w *float32, v *byte, vstride uintptr, nk int, nb int)

//go:noescape
func axpysQ4AVX(dst *float32, w *float32, v *byte, vstride uintptr, nk int, nb int)

// dots4Q8AVX, dots4Q4AVX, axpys4Q8AVX and axpys4Q4AVX are the four-query
// forms of the KV kernels (kvquant_avx2_amd64.s).
//
//go:noescape
func dots4Q8AVX(out *float32, ostride uintptr, q *byte, k *byte, kstride uintptr, nk int, nb int, scale float32)

//go:noescape
func dots4Q4AVX(out *float32, ostride uintptr, q *byte, k *byte, kstride uintptr, nk int, nb int, scale float32)

//go:noescape
func axpys4Q8AVX(dst *float32, dstride uintptr, w *float32, wstride uintptr, v *byte, vstride uintptr, nk int, nb int)

//go:noescape
func axpys4Q4AVX(dst *float32, dstride uintptr, w *float32, wstride uintptr, v *byte, vstride uintptr, nk int, nb int)

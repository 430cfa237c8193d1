// Package kernels owns Bulkhead's CPU compute kernels: a persistent worker pool,
// matrix-vector and matrix-matrix products over GGML weight formats (F32, F16,
// BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K,
// IQ4_XS), and the small vector operations the engine needs (dot products,
// half-precision conversion, RMSNorm, SwiGLU, softmax).
//
// Four kernel paths, each a Set: a table of the ops that have more than one
// implementation, passed explicitly to each (methods of the Set; a Matrix
// records the Set it was laid out for and MatMul runs it). A serving process
// chooses one at start-up from the CPU and the BULKHEAD_KERNELS override
// (Active, EnvKernels, CheckKernels); tests run every Set the CPU has in one
// process (Available). The paths: amx (the avx512 path, with Q8_0, Q4_0,
// Q4_K and Q6_K products of 16 or more activation rows on AMX tiles where the CPU has them
// and Linux grants tile data: amx.go, AMX), avx512 (AVX-512
// F/BW/VL/VNNI: quantized weights repacked at load into 16-row interleaved
// groups for VPDPBUSD micro-kernels of 16 weight rows by 4 or 1 activation rows,
// 16-lane F32 tiles, a vector exp; unpacked types take the avx2 kernels), avx2
// (AVX2/FMA/F16C assembly: Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, Q2_K, Q3_K,
// Q4_K, Q5_K, Q6_K and IQ4_XS on the same 16-row groups, half a group by 4
// activation rows or a whole group by one per call, VPMADDUBSW/VPMADDWD in
// place of VPDPBUSD (the AVX-512 path runs those it has no kernel of its own
// for); F32, F16 and BF16 in the file's layout) and go
// (portable, the reference; forced by the purego build tag).
// Quantized weights are dotted with activations quantized as GGML does (Q8_0,
// Q8_1 or Q8_K, by weight type); every path's quantized products are bitwise
// equal to the portable ones.
//
// Every output element of MatMul is computed by one fixed sequence of floating
// point operations, whatever the batch size, its position in the batch, the tile
// it falls in or the number of threads; work is split across threads by weight
// row only. An engine computes with one Set, its model's, so its results are
// bitwise reproducible.
//
// Assembly lives in files named for what they compute and the path they need:
// <concern>_<path>_amd64.s (dot, gemm, kgemm, kquant, attn, exp, gelu, norm,
// softmax, kvquant and bandwidth for avx2; gemm, kquant, attn, exp, gelu and
// softmax for avx512; gemm for amx, and gemm_amx_emu, its tile instructions
// emulated, built only with the amxemu tag), declared in asm_amd64.go; macros
// several files share live in avx2_amd64.h, avx512_amd64.h, prefetch_amd64.h
// and amx_amd64.h (the AMX kernels' bodies). Every instruction on a vector
// register is VEX or EVEX encoded (VMOVD, not MOVL, into an X register): a
// legacy SSE one next to live YMM upper halves costs a state transition on
// some CPUs (TestNoLegacySSE).
//
// This package must never allocate per element, start a goroutine per call,
// keep global state beyond the path chosen at start-up and what it found of
// AMX (read only by Active, AMX and the zero Set), read files or import
// anything above models/.
package kernels

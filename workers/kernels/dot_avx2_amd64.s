//go:build amd64 && !purego

#include "textflag.h"

// HSUM4: the 8 lanes of ya, yb, yc, yd (four rows' sums) added pairwise, in
// the fixed order every row kernel here shares, into 4 floats at dst; xa is
// ya's low half, xt scratch.
#define HSUM4(ya, yb, yc, yd, xa, xt, dst) \
	VHADDPS yb, ya, ya \
	VHADDPS yd, yc, yc \
	VHADDPS yc, ya, ya \
	VEXTRACTF128 $1, ya, xt \
	VADDPS xt, xa, xa \
	VMOVUPS xa, dst

// D43ENTER loads the arguments: weight rows SI, R9, R10, R11; activation rows
// DI, R13, R12; BX three activation rows' stride; DX the groups; R8 the
// output, R14 its stride.
#define D43ENTER \
	MOVQ w+0(FP), SI \
	MOVQ wstride+8(FP), BX \
	MOVQ x+16(FP), DI \
	MOVQ xstride+24(FP), R12 \
	MOVQ groups+40(FP), DX \
	MOVQ out+48(FP), R8 \
	MOVQ ostride+56(FP), R14 \
	LEAQ (SI)(BX*1), R9 \
	LEAQ (R9)(BX*1), R10 \
	LEAQ (R10)(BX*1), R11 \
	LEAQ (R12)(R12*2), BX \
	LEAQ (DI)(R12*1), R13 \
	LEAQ (R13)(R12*1), R12

// D43START zeroes the 12 accumulators (Y0-Y3 activation row 0, Y4-Y7 row 1,
// Y8-Y11 row 2) and loads CX with the 8-element steps.
#define D43START \
	VXORPS Y0, Y0, Y0 \
	VXORPS Y1, Y1, Y1 \
	VXORPS Y2, Y2, Y2 \
	VXORPS Y3, Y3, Y3 \
	VXORPS Y4, Y4, Y4 \
	VXORPS Y5, Y5, Y5 \
	VXORPS Y6, Y6, Y6 \
	VXORPS Y7, Y7, Y7 \
	VXORPS Y8, Y8, Y8 \
	VXORPS Y9, Y9, Y9 \
	VXORPS Y10, Y10, Y10 \
	VXORPS Y11, Y11, Y11 \
	MOVQ n+32(FP), CX \
	SHRQ $3, CX

// D43NEXT stores a group's 12 sums and steps to the next group.
#define D43NEXT \
	HSUM4(Y0, Y1, Y2, Y3, X0, X1, (R8)) \
	HSUM4(Y4, Y5, Y6, Y7, X4, X5, (R8)(R14*1)) \
	HSUM4(Y8, Y9, Y10, Y11, X8, X9, (R8)(R14*2)) \
	LEAQ (R8)(R14*2), R8 \
	ADDQ R14, R8 \
	ADDQ BX, DI \
	ADDQ BX, R13 \
	ADDQ BX, R12

// Float kernels: one 8-lane accumulator per output element, FMA over k in steps
// of 8, reduced as ((a0+a1)+(a2+a3)) + ((a4+a5)+(a6+a7)) by VHADDPS. Every kernel
// below uses that order, so an element's bits do not depend on which kernel (or
// how many rows/columns at once) computed it.

// func dot4F32AVX(w *byte, wstride uintptr, x *float32, n int, out *[4]float32)
// Rows w + i*wstride (bytes), i < 4, of F32 weights dotted with x over n&^7 elements.
// Decode streams the weights from memory, 4 rows at a time; while it reads
// 32 bytes of each row it asks for the next 128 bytes of the next 4 rows
// (R12: they follow these in memory), so the next call finds them in cache
// (135M F32 decode, one thread: 13.6-17 -> 17-20 GB/s in BenchmarkMatMul).
TEXT ·dot4F32AVX(SB), NOSPLIT, $0-40
	MOVQ w+0(FP), SI
	MOVQ wstride+8(FP), BX
	MOVQ x+16(FP), DI
	MOVQ n+24(FP), CX
	MOVQ out+32(FP), R8
	LEAQ (SI)(BX*1), R9
	LEAQ (R9)(BX*1), R10
	LEAQ (R10)(BX*1), R11
	LEAQ (R11)(BX*1), R12
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	SHRQ $3, CX
	JZ   d41f32done
	XORQ AX, AX
	XORQ DX, DX
d41f32loop:
	PREFETCHT0 (R12)(DX*4)
	PREFETCHT0 64(R12)(DX*4)
	VMOVUPS (DI)(AX*1), Y4
	VMOVUPS (SI)(DX*1), Y5
	VFMADD231PS Y5, Y4, Y0
	VMOVUPS (R9)(DX*1), Y6
	VFMADD231PS Y6, Y4, Y1
	VMOVUPS (R10)(DX*1), Y7
	VFMADD231PS Y7, Y4, Y2
	VMOVUPS (R11)(DX*1), Y8
	VFMADD231PS Y8, Y4, Y3
	ADDQ $32, AX
	ADDQ $32, DX
	DECQ CX
	JNZ  d41f32loop
d41f32done:
	HSUM4(Y0, Y1, Y2, Y3, X0, X1, (R8))
	VZEROUPPER
	RET

// func dot4F16AVX(w *byte, wstride uintptr, x *float32, n int, out *[4]float32)
// Rows w + i*wstride (bytes), i < 4, of F16 weights dotted with x over n&^7 elements,
// asking for the next 4 rows' next 64 bytes as dot4F32AVX does (135M-shape
// vocabulary product, one thread: 10-12 -> 17-19 GB/s).
TEXT ·dot4F16AVX(SB), NOSPLIT, $0-40
	MOVQ w+0(FP), SI
	MOVQ wstride+8(FP), BX
	MOVQ x+16(FP), DI
	MOVQ n+24(FP), CX
	MOVQ out+32(FP), R8
	LEAQ (SI)(BX*1), R9
	LEAQ (R9)(BX*1), R10
	LEAQ (R10)(BX*1), R11
	LEAQ (R11)(BX*1), R12
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	SHRQ $3, CX
	JZ   d41f16done
	XORQ AX, AX
	XORQ DX, DX
d41f16loop:
	PREFETCHT0 (R12)(DX*4)
	VMOVUPS (DI)(AX*1), Y4
	VCVTPH2PS (SI)(DX*1), Y5
	VFMADD231PS Y5, Y4, Y0
	VCVTPH2PS (R9)(DX*1), Y6
	VFMADD231PS Y6, Y4, Y1
	VCVTPH2PS (R10)(DX*1), Y7
	VFMADD231PS Y7, Y4, Y2
	VCVTPH2PS (R11)(DX*1), Y8
	VFMADD231PS Y8, Y4, Y3
	ADDQ $32, AX
	ADDQ $16, DX
	DECQ CX
	JNZ  d41f16loop
d41f16done:
	HSUM4(Y0, Y1, Y2, Y3, X0, X1, (R8))
	VZEROUPPER
	RET

// ROWS8START starts a block of 8 weight rows of a dotRows kernel: the 8 row
// pointers from SI (stride BX) in SI, R9..R15, their accumulators (Y0..Y3,
// Y10..Y13) zeroed, x in DI and its 8-element steps in CX.
#define ROWS8START \
	MOVQ x+16(FP), DI \
	MOVQ n+24(FP), CX \
	LEAQ (SI)(BX*1), R9 \
	LEAQ (R9)(BX*1), R10 \
	LEAQ (R10)(BX*1), R11 \
	LEAQ (R11)(BX*1), R12 \
	LEAQ (R12)(BX*1), R13 \
	LEAQ (R13)(BX*1), R14 \
	LEAQ (R14)(BX*1), R15 \
	VXORPS Y0, Y0, Y0 \
	VXORPS Y1, Y1, Y1 \
	VXORPS Y2, Y2, Y2 \
	VXORPS Y3, Y3, Y3 \
	VXORPS Y10, Y10, Y10 \
	VXORPS Y11, Y11, Y11 \
	VXORPS Y12, Y12, Y12 \
	VXORPS Y13, Y13, Y13 \
	SHRQ $3, CX

// ROWS8FMA adds one 8-element step of the 8 rows, each widened by VLOAD
// (VMOVUPS for F32, VCVTPH2PS for F16) at offset DX, times x's step in Y4.
#define ROWS8FMA(VLOAD) \
	VLOAD (SI)(DX*1), Y5 \
	VFMADD231PS Y5, Y4, Y0 \
	VLOAD (R9)(DX*1), Y6 \
	VFMADD231PS Y6, Y4, Y1 \
	VLOAD (R10)(DX*1), Y7 \
	VFMADD231PS Y7, Y4, Y2 \
	VLOAD (R11)(DX*1), Y8 \
	VFMADD231PS Y8, Y4, Y3 \
	VLOAD (R12)(DX*1), Y5 \
	VFMADD231PS Y5, Y4, Y10 \
	VLOAD (R13)(DX*1), Y6 \
	VFMADD231PS Y6, Y4, Y11 \
	VLOAD (R14)(DX*1), Y7 \
	VFMADD231PS Y7, Y4, Y12 \
	VLOAD (R15)(DX*1), Y8 \
	VFMADD231PS Y8, Y4, Y13

// ROWS8STORE sums the 8 rows' lanes into out (R8) in HSUM4's order and moves
// SI and R8 to the next block.
#define ROWS8STORE \
	HSUM4(Y0, Y1, Y2, Y3, X0, X1, (R8)) \
	HSUM4(Y10, Y11, Y12, Y13, X10, X1, 16(R8)) \
	LEAQ (R15)(BX*1), SI \
	ADDQ $32, R8

// func dotRowsF16AVX(w *byte, wstride uintptr, x *float32, n int, blocks int, out *float32, ahead uintptr)
// Blocks of 8 rows w + i*wstride of F16 weights, one after another, dotted
// with x over n&^7 elements, their results to out[8b..8b+7]: each row's
// arithmetic is dot4F16AVX's (8 FMA lanes, then the same pairwise sums), so
// its bits are too. Decode streams the rows from memory: 8 rows give 8
// independent FMA chains where dot4F16AVX's 4 wait on the FMA latency, and
// the weights ahead+8*wstride bytes on from the block's start are asked into
// L2 meanwhile (into L1, 32 KiB ahead, it evicted the rows in use; rowsAhead
// sets ahead). BenchmarkMatMul/F16 on one Zen 4 core, against dot4F16AVX a
// block at a time: decode-dram 16-24 -> 25-27 GB/s, decode-vocab 14-16 ->
// 24-26.
TEXT ·dotRowsF16AVX(SB), NOSPLIT, $0-56
	MOVQ w+0(FP), SI
	MOVQ wstride+8(FP), BX
	MOVQ out+40(FP), R8
	CMPQ blocks+32(FP), $0
	JEQ  rf16done
rf16block:
	ROWS8START
	JZ   rf16sum
	LEAQ (R15)(BX*1), AX
	ADDQ ahead+48(FP), AX
	XORQ DX, DX
rf16loop:
	PREFETCHT1 (AX)(DX*8)
	PREFETCHT1 64(AX)(DX*8)
	VMOVUPS (DI)(DX*2), Y4
	ROWS8FMA(VCVTPH2PS)
	ADDQ $16, DX
	DECQ CX
	JNZ  rf16loop
rf16sum:
	ROWS8STORE
	DECQ blocks+32(FP)
	JNZ  rf16block
	VZEROUPPER
rf16done:
	RET

// func dotRowsF32AVX(w *byte, wstride uintptr, x *float32, n int, blocks int, out *float32, ahead uintptr)
// dotRowsF16AVX for F32 weights: each row's arithmetic, and so its bits, is
// dot4F32AVX's, and decode makes one call for many blocks where it made one
// per 4 rows.
TEXT ·dotRowsF32AVX(SB), NOSPLIT, $0-56
	MOVQ w+0(FP), SI
	MOVQ wstride+8(FP), BX
	MOVQ out+40(FP), R8
	CMPQ blocks+32(FP), $0
	JEQ  rf32done
rf32block:
	ROWS8START
	JZ   rf32sum
	LEAQ (R15)(BX*1), AX
	ADDQ ahead+48(FP), AX
	XORQ DX, DX
rf32loop:
	PREFETCHT1 (AX)(DX*8)
	PREFETCHT1 64(AX)(DX*8)
	PREFETCHT1 128(AX)(DX*8)
	PREFETCHT1 192(AX)(DX*8)
	VMOVUPS (DI)(DX*1), Y4
	ROWS8FMA(VMOVUPS)
	ADDQ $32, DX
	DECQ CX
	JNZ  rf32loop
rf32sum:
	ROWS8STORE
	DECQ blocks+32(FP)
	JNZ  rf32block
	VZEROUPPER
rf32done:
	RET

// func dot4BF16AVX(w *byte, wstride uintptr, x *float32, n int, out *[4]float32)
// Rows w + i*wstride (bytes), i < 4, of BF16 weights dotted with x over n&^7 elements,
// asking for the next 4 rows' next 64 bytes as dot4F32AVX does.
TEXT ·dot4BF16AVX(SB), NOSPLIT, $0-40
	MOVQ w+0(FP), SI
	MOVQ wstride+8(FP), BX
	MOVQ x+16(FP), DI
	MOVQ n+24(FP), CX
	MOVQ out+32(FP), R8
	LEAQ (SI)(BX*1), R9
	LEAQ (R9)(BX*1), R10
	LEAQ (R10)(BX*1), R11
	LEAQ (R11)(BX*1), R12
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	SHRQ $3, CX
	JZ   d41bf16done
	XORQ AX, AX
	XORQ DX, DX
d41bf16loop:
	PREFETCHT0 (R12)(DX*4)
	VMOVUPS (DI)(AX*1), Y4
	VPMOVZXWD (SI)(DX*1), Y5
	VPSLLD $16, Y5, Y5
	VFMADD231PS Y5, Y4, Y0
	VPMOVZXWD (R9)(DX*1), Y6
	VPSLLD $16, Y6, Y6
	VFMADD231PS Y6, Y4, Y1
	VPMOVZXWD (R10)(DX*1), Y7
	VPSLLD $16, Y7, Y7
	VFMADD231PS Y7, Y4, Y2
	VPMOVZXWD (R11)(DX*1), Y8
	VPSLLD $16, Y8, Y8
	VFMADD231PS Y8, Y4, Y3
	ADDQ $32, AX
	ADDQ $16, DX
	DECQ CX
	JNZ  d41bf16loop
d41bf16done:
	HSUM4(Y0, Y1, Y2, Y3, X0, X1, (R8))
	VZEROUPPER
	RET

// The 4x3 float kernels: the same 4 weight rows (w + i*wstride bytes) dotted
// with groups*3 activation rows (x + j*xstride bytes), 3 at a time; the 4
// results of activation row j go to out + j*ostride (bytes), weight row i's
// at float i. One call covers a whole tile, so no Go code runs between the
// groups. n is the row length in elements, a multiple of 8.
// func dot4x3...(w *byte, wstride uintptr, x *T, xstride uintptr, n int, groups int, out *float32, ostride uintptr)

// D43FMA: one 8-element step of a 4x3 tile: each weight row's step, widened
// by VLOAD at index WI, times the 3 activation steps in Y12..Y14, into the
// row's 3 accumulators (row 0: Y0, Y4, Y8; row 1: Y1, Y5, Y9; ...).
#define D43FMA(VLOAD, WI) \
	VLOAD (SI)(WI*1), Y15 \
	VFMADD231PS Y15, Y12, Y0 \
	VFMADD231PS Y15, Y13, Y4 \
	VFMADD231PS Y15, Y14, Y8 \
	VLOAD (R9)(WI*1), Y15 \
	VFMADD231PS Y15, Y12, Y1 \
	VFMADD231PS Y15, Y13, Y5 \
	VFMADD231PS Y15, Y14, Y9 \
	VLOAD (R10)(WI*1), Y15 \
	VFMADD231PS Y15, Y12, Y2 \
	VFMADD231PS Y15, Y13, Y6 \
	VFMADD231PS Y15, Y14, Y10 \
	VLOAD (R11)(WI*1), Y15 \
	VFMADD231PS Y15, Y12, Y3 \
	VFMADD231PS Y15, Y13, Y7 \
	VFMADD231PS Y15, Y14, Y11

// func dot4x3F32AVX(w *byte, wstride uintptr, x *float32, xstride uintptr, n int, groups int, out *float32, ostride uintptr)
// F32 weights and activations.
TEXT ·dot4x3F32AVX(SB), NOSPLIT, $0-64
	D43ENTER
	TESTQ DX, DX
	JZ   d43f32end
d43f32group:
	D43START
	JZ   d43f32done
	XORQ AX, AX
d43f32loop:
	VMOVUPS (DI)(AX*1), Y12
	VMOVUPS (R13)(AX*1), Y13
	VMOVUPS (R12)(AX*1), Y14
	D43FMA(VMOVUPS, AX)
	ADDQ $32, AX
	DECQ CX
	JNZ  d43f32loop
d43f32done:
	D43NEXT
	DECQ DX
	JNZ  d43f32group
d43f32end:
	VZEROUPPER
	RET

// func dot4x3HHAVX(w *byte, wstride uintptr, x *uint16, xstride uintptr, n int, groups int, out *float32, ostride uintptr)
// F16 weights and F16 activations, both widened as they are read.
TEXT ·dot4x3HHAVX(SB), NOSPLIT, $0-64
	D43ENTER
	TESTQ DX, DX
	JZ   d43hhend
d43hhgroup:
	D43START
	JZ   d43hhdone
	XORQ AX, AX
d43hhloop:
	VCVTPH2PS (DI)(AX*1), Y12
	VCVTPH2PS (R13)(AX*1), Y13
	VCVTPH2PS (R12)(AX*1), Y14
	D43FMA(VCVTPH2PS, AX)
	ADDQ $16, AX
	DECQ CX
	JNZ  d43hhloop
d43hhdone:
	D43NEXT
	DECQ DX
	JNZ  d43hhgroup
d43hhend:
	VZEROUPPER
	RET

// func dot4x3BF16AVX(w *byte, wstride uintptr, x *float32, xstride uintptr, n int, groups int, out *float32, ostride uintptr)
// BF16 weights (widened by a 16-bit shift) and F32 activations.
TEXT ·dot4x3BF16AVX(SB), NOSPLIT, $0-64
	D43ENTER
	TESTQ DX, DX
	JZ   d43bf16end
d43bf16group:
	D43START
	JZ   d43bf16done
	XORQ AX, AX
	XORQ R15, R15
d43bf16loop:
	VMOVUPS (DI)(AX*1), Y12
	VMOVUPS (R13)(AX*1), Y13
	VMOVUPS (R12)(AX*1), Y14
	VPMOVZXWD (SI)(R15*1), Y15
	VPSLLD $16, Y15, Y15
	VFMADD231PS Y15, Y12, Y0
	VFMADD231PS Y15, Y13, Y4
	VFMADD231PS Y15, Y14, Y8
	VPMOVZXWD (R9)(R15*1), Y15
	VPSLLD $16, Y15, Y15
	VFMADD231PS Y15, Y12, Y1
	VFMADD231PS Y15, Y13, Y5
	VFMADD231PS Y15, Y14, Y9
	VPMOVZXWD (R10)(R15*1), Y15
	VPSLLD $16, Y15, Y15
	VFMADD231PS Y15, Y12, Y2
	VFMADD231PS Y15, Y13, Y6
	VFMADD231PS Y15, Y14, Y10
	VPMOVZXWD (R11)(R15*1), Y15
	VPSLLD $16, Y15, Y15
	VFMADD231PS Y15, Y12, Y3
	VFMADD231PS Y15, Y13, Y7
	VFMADD231PS Y15, Y14, Y11
	ADDQ $32, AX
	ADDQ $16, R15
	DECQ CX
	JNZ  d43bf16loop
d43bf16done:
	D43NEXT
	DECQ DX
	JNZ  d43bf16group
d43bf16end:
	VZEROUPPER
	RET

// func dot4x3HFAVX(w *byte, wstride uintptr, x *float32, xstride uintptr, n int, groups int, out *float32, ostride uintptr)
// F16 weights (widened as they are read) and F32 activations (F16 values
// widened once, before the product).
TEXT ·dot4x3HFAVX(SB), NOSPLIT, $0-64
	D43ENTER
	TESTQ DX, DX
	JZ   d43hfend
d43hfgroup:
	D43START
	JZ   d43hfdone
	XORQ AX, AX
	XORQ R15, R15
d43hfloop:
	VMOVUPS (DI)(AX*1), Y12
	VMOVUPS (R13)(AX*1), Y13
	VMOVUPS (R12)(AX*1), Y14
	D43FMA(VCVTPH2PS, R15)
	ADDQ $32, AX
	ADDQ $16, R15
	DECQ CX
	JNZ  d43hfloop
d43hfdone:
	D43NEXT
	DECQ DX
	JNZ  d43hfgroup
d43hfend:
	VZEROUPPER
	RET

// Quantized kernels: per block, exact int32 sums for 4 weight rows, then
// sum += (d_w*d_x) * float(isum) with separate multiplies and add, in block order.
// This is bitwise what dotQ8Go/dotQ4Go compute.

// QDOT: w (32 int8 in Y1, clobbered) · x (Y0) -> 8 int32 lanes in acc.
// Uses Y2, Y3; Y15 holds 16 words of 1.
#define QDOT(acc) \
	VPABSB Y1, Y2 \
	VPSIGNB Y1, Y0, Y3 \
	VPMADDUBSW Y3, Y2, Y3 \
	VPMADDWD Y15, Y3, acc

// QFINISH: reduce Y4..Y7 to 4 isums, scale by the 4 row scales (f16 at
// (SI),(R9),(R10),(R11)) times the x scale (f16 at (DI)) and add into X14.
#define QFINISH \
	VPHADDD Y5, Y4, Y4 \
	VPHADDD Y7, Y6, Y6 \
	VPHADDD Y6, Y4, Y4 \
	VEXTRACTI128 $1, Y4, X5 \
	VPADDD X5, X4, X4 \
	VCVTDQ2PS X4, X4 \
	VPINSRW $0, (SI), X8, X8 \
	VPINSRW $1, (R9), X8, X8 \
	VPINSRW $2, (R10), X8, X8 \
	VPINSRW $3, (R11), X8, X8 \
	VCVTPH2PS X8, X8 \
	VPBROADCASTW (DI), X9 \
	VCVTPH2PS X9, X9 \
	VMULPS X9, X8, X8 \
	VMULPS X4, X8, X8 \
	VADDPS X8, X14, X14

// func dot4Q8AVX(w *byte, wstride uintptr, x *byte, nb int, out *[4]float32)
TEXT ·dot4Q8AVX(SB), NOSPLIT, $0-40
	MOVQ w+0(FP), SI
	MOVQ wstride+8(FP), BX
	MOVQ x+16(FP), DI
	MOVQ nb+24(FP), CX
	MOVQ out+32(FP), R8
	LEAQ (SI)(BX*1), R9
	LEAQ (R9)(BX*1), R10
	LEAQ (R10)(BX*1), R11
	VXORPS X14, X14, X14
	VPXOR X8, X8, X8
	MOVL $0x00010001, AX
	VMOVD AX, X15
	VPBROADCASTD X15, Y15
	TESTQ CX, CX
	JZ    q8done
q8loop:
	PREFETCHT0 384(SI)
	PREFETCHT0 384(R9)
	PREFETCHT0 384(R10)
	PREFETCHT0 384(R11)
	VMOVDQU 2(DI), Y0
	VMOVDQU 2(SI), Y1
	QDOT(Y4)
	VMOVDQU 2(R9), Y1
	QDOT(Y5)
	VMOVDQU 2(R10), Y1
	QDOT(Y6)
	VMOVDQU 2(R11), Y1
	QDOT(Y7)
	QFINISH
	ADDQ $34, SI
	ADDQ $34, R9
	ADDQ $34, R10
	ADDQ $34, R11
	ADDQ $34, DI
	DECQ CX
	JNZ  q8loop
q8done:
	VMOVUPS X14, (R8)
	VZEROUPPER
	RET

// Q4UNPACK: 16 bytes of nibbles at addr -> 32 int8 (q-8) in Y1; uses Y2.
// Y13 = 0x0F bytes, Y12 = 8 bytes.
#define Q4UNPACK(addr) \
	VMOVDQU addr, X1 \
	VPSRLW $4, X1, X2 \
	VINSERTI128 $1, X2, Y1, Y1 \
	VPAND Y13, Y1, Y1 \
	VPSUBB Y12, Y1, Y1

// func dot4Q4AVX(w *byte, wstride uintptr, x *byte, nb int, out *[4]float32)
TEXT ·dot4Q4AVX(SB), NOSPLIT, $0-40
	MOVQ w+0(FP), SI
	MOVQ wstride+8(FP), BX
	MOVQ x+16(FP), DI
	MOVQ nb+24(FP), CX
	MOVQ out+32(FP), R8
	LEAQ (SI)(BX*1), R9
	LEAQ (R9)(BX*1), R10
	LEAQ (R10)(BX*1), R11
	VXORPS X14, X14, X14
	VPXOR X8, X8, X8
	MOVL $0x00010001, AX
	VMOVD AX, X15
	VPBROADCASTD X15, Y15
	MOVL $0x0f0f0f0f, AX
	VMOVD AX, X13
	VPBROADCASTD X13, Y13
	MOVL $0x08080808, AX
	VMOVD AX, X12
	VPBROADCASTD X12, Y12
	TESTQ CX, CX
	JZ    q4done
q4loop:
	PREFETCHT0 256(SI)
	PREFETCHT0 256(R9)
	PREFETCHT0 256(R10)
	PREFETCHT0 256(R11)
	VMOVDQU 2(DI), Y0
	Q4UNPACK(2(SI))
	QDOT(Y4)
	Q4UNPACK(2(R9))
	QDOT(Y5)
	Q4UNPACK(2(R10))
	QDOT(Y6)
	Q4UNPACK(2(R11))
	QDOT(Y7)
	QFINISH
	ADDQ $18, SI
	ADDQ $18, R9
	ADDQ $18, R10
	ADDQ $18, R11
	ADDQ $34, DI
	DECQ CX
	JNZ  q4loop
q4done:
	VMOVUPS X14, (R8)
	VZEROUPPER
	RET

// func dotF16AVX(a, b *uint16, n int) float32 — n&^7 elements, kernel order.
TEXT ·dotF16AVX(SB), NOSPLIT, $0-28
	MOVQ a+0(FP), SI
	MOVQ b+8(FP), DI
	MOVQ n+16(FP), CX
	VXORPS Y0, Y0, Y0
	SHRQ $3, CX
	JZ   h16done
h16loop:
	VCVTPH2PS (SI), Y1
	VCVTPH2PS (DI), Y2
	VFMADD231PS Y2, Y1, Y0
	ADDQ $16, SI
	ADDQ $16, DI
	DECQ CX
	JNZ  h16loop
h16done:
	VHADDPS Y0, Y0, Y0
	VHADDPS Y0, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDSS X1, X0, X0
	VMOVSS X0, ret+24(FP)
	VZEROUPPER
	RET

// func dotF32AVX(a, b *float32, n int) float32 — n&^7 elements, kernel order.
TEXT ·dotF32AVX(SB), NOSPLIT, $0-28
	MOVQ a+0(FP), SI
	MOVQ b+8(FP), DI
	MOVQ n+16(FP), CX
	VXORPS Y0, Y0, Y0
	SHRQ $3, CX
	JZ   f32done
f32loop:
	VMOVUPS (SI), Y1
	VFMADD231PS (DI), Y1, Y0
	ADDQ $32, SI
	ADDQ $32, DI
	DECQ CX
	JNZ  f32loop
f32done:
	VHADDPS Y0, Y0, Y0
	VHADDPS Y0, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDSS X1, X0, X0
	VMOVSS X0, ret+24(FP)
	VZEROUPPER
	RET

// func axpyF16AVX(dst *float32, a float32, x *uint16, n int) — n&^7 elements.
TEXT ·axpyF16AVX(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	VBROADCASTSS a+8(FP), Y0
	MOVQ x+16(FP), SI
	MOVQ n+24(FP), CX
	SHRQ $3, CX
	JZ   axdone
axloop:
	VCVTPH2PS (SI), Y1
	VFMADD213PS (DI), Y0, Y1
	VMOVUPS Y1, (DI)
	ADDQ $16, SI
	ADDQ $32, DI
	DECQ CX
	JNZ  axloop
axdone:
	VZEROUPPER
	RET

// func axpyF32AVX(dst *float32, a float32, x *float32, n int) — dst[i] += a*x[i]
// (one fused multiply-add), n&^7 elements.
TEXT ·axpyF32AVX(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	VBROADCASTSS a+8(FP), Y0
	MOVQ x+16(FP), SI
	MOVQ n+24(FP), CX
	SHRQ $3, CX
	JZ   ax32done
ax32loop:
	VMOVUPS (SI), Y1
	VFMADD213PS (DI), Y0, Y1
	VMOVUPS Y1, (DI)
	ADDQ $32, SI
	ADDQ $32, DI
	DECQ CX
	JNZ  ax32loop
ax32done:
	VZEROUPPER
	RET

// func addAVX(dst, x *float32, n int) — dst[i] += x[i], n&^7 elements.
TEXT ·addAVX(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $3, CX
	JZ   adddone
addloop:
	VMOVUPS (DI), Y0
	VADDPS  (SI), Y0, Y0
	VMOVUPS Y0, (DI)
	ADDQ $32, SI
	ADDQ $32, DI
	DECQ CX
	JNZ  addloop
adddone:
	VZEROUPPER
	RET

// func f32ToF16AVX(dst *uint16, src *float32, n int) — n&^7 elements, nearest even.
TEXT ·f32ToF16AVX(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $3, CX
	JZ   cvdone
cvloop:
	VMOVUPS (SI), Y0
	VCVTPS2PH $0, Y0, (DI)
	ADDQ $32, SI
	ADDQ $16, DI
	DECQ CX
	JNZ  cvloop
cvdone:
	VZEROUPPER
	RET

// func f16ToF32AVX(dst *float32, src *uint16, n int) — n&^7 elements.
TEXT ·f16ToF32AVX(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $3, CX
	JZ   cwdone
cwloop:
	VCVTPH2PS (SI), Y0
	VMOVUPS Y0, (DI)
	ADDQ $16, SI
	ADDQ $32, DI
	DECQ CX
	JNZ  cwloop
cwdone:
	VZEROUPPER
	RET

// Q5_0 (22-byte blocks: f16 d, 32 fifth bits, 16 bytes of nibbles) against
// Q8_0 activations, 4 weight rows at a time: the weights become q-16 in
// int8 and go through QDOT and QFINISH as Q4_0's do, so the result is
// bitwise dotQ5_0Go's.

// q5shuf spreads the 4 bytes of a broadcast qh word to 8 bytes each (in-lane:
// bytes 0,1 in the low 128 bits, 2,3 in the high); q5bit is each byte's bit.
DATA q5shuf<>+0(SB)/8, $0x0000000000000000
DATA q5shuf<>+8(SB)/8, $0x0101010101010101
DATA q5shuf<>+16(SB)/8, $0x0202020202020202
DATA q5shuf<>+24(SB)/8, $0x0303030303030303
GLOBL q5shuf<>(SB), RODATA|NOPTR, $32
DATA q5bit<>+0(SB)/8, $0x8040201008040201
GLOBL q5bit<>(SB), RODATA|NOPTR, $8

// Q5UNPACK: the block at addr -> 32 int8 (q-16) in Y1; uses Y2. Y13 = 0x0f
// bytes, Y12 = 0x10 bytes, Y11 = q5shuf, Y10 = q5bit in every qword.
#define Q5UNPACK(addr) \
	VMOVDQU 4+addr, X1 \
	VPSRLW $4, X1, X2 \
	VINSERTI128 $1, X2, Y1, Y1 \
	VPAND Y13, Y1, Y1 \
	VPBROADCASTD addr, Y2 \
	VPSHUFB Y11, Y2, Y2 \
	VPAND Y10, Y2, Y2 \
	VPCMPEQB Y10, Y2, Y2 \
	VPAND Y12, Y2, Y2 \
	VPOR Y2, Y1, Y1 \
	VPSUBB Y12, Y1, Y1

// func dot4Q5AVX(w *byte, wstride uintptr, x *byte, nb int, out *[4]float32)
TEXT ·dot4Q5AVX(SB), NOSPLIT, $0-40
	MOVQ w+0(FP), SI
	MOVQ wstride+8(FP), BX
	MOVQ x+16(FP), DI
	MOVQ nb+24(FP), CX
	MOVQ out+32(FP), R8
	LEAQ (SI)(BX*1), R9
	LEAQ (R9)(BX*1), R10
	LEAQ (R10)(BX*1), R11
	VXORPS X14, X14, X14
	VPXOR X8, X8, X8
	MOVL $0x00010001, AX
	VMOVD AX, X15
	VPBROADCASTD X15, Y15
	MOVL $0x0f0f0f0f, AX
	VMOVD AX, X13
	VPBROADCASTD X13, Y13
	MOVL $0x10101010, AX
	VMOVD AX, X12
	VPBROADCASTD X12, Y12
	VMOVDQU q5shuf<>(SB), Y11
	VPBROADCASTQ q5bit<>(SB), Y10
	TESTQ CX, CX
	JZ    q5done
q5loop:
	PREFETCHT0 256(SI)
	PREFETCHT0 256(R9)
	PREFETCHT0 256(R10)
	PREFETCHT0 256(R11)
	VMOVDQU 2(DI), Y0
	Q5UNPACK(2(SI))
	QDOT(Y4)
	Q5UNPACK(2(R9))
	QDOT(Y5)
	Q5UNPACK(2(R10))
	QDOT(Y6)
	Q5UNPACK(2(R11))
	QDOT(Y7)
	QFINISH
	ADDQ $22, SI
	ADDQ $22, R9
	ADDQ $22, R10
	ADDQ $22, R11
	ADDQ $34, DI
	DECQ CX
	JNZ  q5loop
q5done:
	VMOVUPS X14, (R8)
	VZEROUPPER
	RET

// iq4nl is GGML's IQ4_NL codebook (gguf.IQ4NLValues) as 16 int8 bytes.
DATA iq4nl<>+0(SB)/8, $0xF6EADDCFBFAD9881
DATA iq4nl<>+8(SB)/8, $0x7159453526190D01
GLOBL iq4nl<>(SB), RODATA|NOPTR, $16

// IQ4UNPACK: 16 bytes of nibbles at addr -> 32 codebook levels (int8) in Y1,
// low nibbles then high ones as Q4UNPACK; uses Y2. Y13 = 0x0F bytes, Y12 =
// the codebook in both lanes.
#define IQ4UNPACK(addr) \
	VMOVDQU addr, X1 \
	VPSRLW $4, X1, X2 \
	VINSERTI128 $1, X2, Y1, Y1 \
	VPAND Y13, Y1, Y1 \
	VPSHUFB Y1, Y12, Y1

// func dot4IQ4NLAVX(w *byte, wstride uintptr, x *byte, nb int, out *[4]float32)
// dot4Q4AVX with each nibble a codebook level: bitwise dotIQ4NLGo (levels
// within ±127, so QDOT's byte products are exact).
TEXT ·dot4IQ4NLAVX(SB), NOSPLIT, $0-40
	MOVQ w+0(FP), SI
	MOVQ wstride+8(FP), BX
	MOVQ x+16(FP), DI
	MOVQ nb+24(FP), CX
	MOVQ out+32(FP), R8
	LEAQ (SI)(BX*1), R9
	LEAQ (R9)(BX*1), R10
	LEAQ (R10)(BX*1), R11
	VXORPS X14, X14, X14
	VPXOR X8, X8, X8
	MOVL $0x00010001, AX
	VMOVD AX, X15
	VPBROADCASTD X15, Y15
	MOVL $0x0f0f0f0f, AX
	VMOVD AX, X13
	VPBROADCASTD X13, Y13
	VBROADCASTI128 iq4nl<>(SB), Y12
	TESTQ CX, CX
	JZ    iq4done
iq4loop:
	PREFETCHT0 256(SI)
	PREFETCHT0 256(R9)
	PREFETCHT0 256(R10)
	PREFETCHT0 256(R11)
	VMOVDQU 2(DI), Y0
	IQ4UNPACK(2(SI))
	QDOT(Y4)
	IQ4UNPACK(2(R9))
	QDOT(Y5)
	IQ4UNPACK(2(R10))
	QDOT(Y6)
	IQ4UNPACK(2(R11))
	QDOT(Y7)
	QFINISH
	ADDQ $18, SI
	ADDQ $18, R9
	ADDQ $18, R10
	ADDQ $18, R11
	ADDQ $34, DI
	DECQ CX
	JNZ  iq4loop
iq4done:
	VMOVUPS X14, (R8)
	VZEROUPPER
	RET

//go:build amd64 && !purego

#include "textflag.h"

// AVX2 kernels for Q4_K and Q6_K weights in their file layout (no
// repacking), one weight row against one Q8_K activation row (292-byte q8K:
// d, 256 qs, 16 bsums). Per super-block the integer sums are exact and the
// float updates are the portable kernels' (dotQ4KGo, dotQ6KGo), in their
// order, so each result is bitwise equal to them.

// Q4KCHUNK: 32 weight bytes at qoff(SI) (low nibbles: sub-block 2j, high:
// 2j+1) against the activations at xlo(DI) and xhi(DI), times the scales at
// slo(SP) and shi(SP), into Y3. Y15 holds 0x0f bytes.
#define Q4KCHUNK(qoff, xlo, xhi, slo, shi) \
	VMOVDQU qoff(SI), Y4 \
	VPSRLW $4, Y4, Y5 \
	VPAND Y15, Y4, Y4 \
	VPAND Y15, Y5, Y5 \
	VPMADDUBSW xlo(DI), Y4, Y4 \
	VPMADDUBSW xhi(DI), Y5, Y5 \
	MOVBLZX slo(SP), AX \
	MOVL AX, X6 \
	VPBROADCASTW X6, Y6 \
	MOVBLZX shi(SP), AX \
	MOVL AX, X7 \
	VPBROADCASTW X7, Y7 \
	VPMADDWD Y6, Y4, Y4 \
	VPMADDWD Y7, Y5, Y5 \
	VPADDD Y4, Y3, Y3 \
	VPADDD Y5, Y3, Y3

// func dotQ4KAVX2(w *byte, x *q8K, nb int) float32
TEXT ·dotQ4KAVX2(SB), NOSPLIT, $16-28
	MOVQ w+0(FP), SI
	MOVQ x+8(FP), DI
	MOVQ nb+16(FP), CX
	VXORPS X0, X0, X0
	MOVL $0x0f0f0f0f, AX
	MOVL AX, X15
	VPBROADCASTD X15, Y15
	MOVL $0x00010001, AX
	MOVL AX, X14
	VPBROADCASTD X14, Y14
	TESTQ CX, CX
	JZ    q4kdone

q4kloop:
	// The 12 scale bytes at 4(SI) as words u0, u1, u2: scales 0..3 are
	// u0&63, mins 0..3 u1&63, scales 4..7 u2&15 | (u0>>6)<<4, mins 4..7
	// u2>>4 | (u1>>6)<<4, byte by byte (q4KScaleMin). Scales go to 0(SP),
	// mins to 8(SP).
	MOVL 4(SI), AX
	MOVL 8(SI), BX
	MOVL 12(SI), DX
	MOVL AX, R8
	ANDL $0x3f3f3f3f, R8
	MOVL R8, 0(SP)
	MOVL BX, R8
	ANDL $0x3f3f3f3f, R8
	MOVL R8, 8(SP)
	MOVL DX, R8
	ANDL $0x0f0f0f0f, R8
	MOVL AX, R9
	SHRL $6, R9
	ANDL $0x03030303, R9
	SHLL $4, R9
	ORL  R9, R8
	MOVL R8, 4(SP)
	MOVL DX, R8
	SHRL $4, R8
	ANDL $0x0f0f0f0f, R8
	MOVL BX, R9
	SHRL $6, R9
	ANDL $0x03030303, R9
	SHLL $4, R9
	ORL  R9, R8
	MOVL R8, 12(SP)

	// msum lanes: mins times the pair sums of the 16-element bsums.
	VPMOVZXBD 8(SP), Y1
	VPMADDWD  260(DI), Y14, Y2
	VPMULLD   Y1, Y2, Y2

	// isum lanes: 4 chunks of 64 elements.
	VPXOR Y3, Y3, Y3
	Q4KCHUNK(16, 4, 36, 0, 1)
	Q4KCHUNK(48, 68, 100, 2, 3)
	Q4KCHUNK(80, 132, 164, 4, 5)
	Q4KCHUNK(112, 196, 228, 6, 7)

	// X3 = [isum, msum, isum, msum] (exact), then as floats.
	VEXTRACTI128 $1, Y3, X4
	VPADDD       X4, X3, X3
	VEXTRACTI128 $1, Y2, X5
	VPADDD       X5, X2, X2
	VPHADDD      X2, X3, X3
	VPHADDD      X3, X3, X3
	VCVTDQ2PS    X3, X3

	// [d, dmin] * dx, times [isum, msum]; sum += the first, -= the second.
	MOVL         (SI), AX
	MOVL         AX, X4
	VCVTPH2PS    X4, X4
	VBROADCASTSS (DI), X5
	VMULPS       X5, X4, X4
	VMULPS       X3, X4, X4
	VADDSS       X4, X0, X0
	VMOVSHDUP    X4, X4
	VSUBSS       X4, X0, X0

	ADDQ $144, SI
	ADDQ $292, DI
	DECQ CX
	JNZ  q4kloop

q4kdone:
	VMOVSS X0, ret+24(FP)
	VZEROUPPER
	RET

// Q6KQ: 32 six-bit quants (unsigned, 0..63) into zq from the nibbles of zl
// (already shifted and masked) and bits at shift of the qh bytes in Y2.
// Y15 holds 0x0f bytes, Y13 0x03 bytes; Y9 is scratch.
#define Q6KQ(zl, shift, zq) \
	VPSRLW $shift, Y2, Y9 \
	VPAND  Y13, Y9, Y9 \
	VPSLLW $4, Y9, Y9 \
	VPOR   Y9, zl, zq

// Q6KDOT: zq times the 32 activations at xoff(DI), times the signed scales
// at soff(R10) (first 16 elements) and soff+1 (next 16), into Y3.
#define Q6KDOT(zq, xoff, s0, s1) \
	VPMADDUBSW xoff(DI), zq, zq \
	MOVBLSX s0(R10), AX \
	MOVL AX, X6 \
	VPBROADCASTW X6, X6 \
	MOVBLSX s1(R10), AX \
	MOVL AX, X7 \
	VPBROADCASTW X7, X7 \
	VINSERTI128 $1, X7, Y6, Y6 \
	VPMADDWD Y6, zq, zq \
	VPADDD zq, Y3, Y3

// Q6KHALF: the 128 elements of half h: ql at qloff(SI), qh at qhoff(SI),
// scales at soff(R10) .. soff+7, activations from xoff(DI).
#define Q6KHALF(qloff, qhoff, xoff, soff) \
	VMOVDQU qloff(SI), Y0 \
	VMOVDQU qloff+32(SI), Y1 \
	VMOVDQU qhoff(SI), Y2 \
	VPAND   Y15, Y0, Y4 \
	Q6KQ(Y4, 0, Y4) \
	Q6KDOT(Y4, xoff, soff, soff+1) \
	VPAND   Y15, Y1, Y5 \
	Q6KQ(Y5, 2, Y5) \
	Q6KDOT(Y5, xoff+32, soff+2, soff+3) \
	VPSRLW  $4, Y0, Y4 \
	VPAND   Y15, Y4, Y4 \
	Q6KQ(Y4, 4, Y4) \
	Q6KDOT(Y4, xoff+64, soff+4, soff+5) \
	VPSRLW  $4, Y1, Y5 \
	VPAND   Y15, Y5, Y5 \
	Q6KQ(Y5, 6, Y5) \
	Q6KDOT(Y5, xoff+96, soff+6, soff+7)

// func dotQ6KAVX2(w *byte, x *q8K, nb int) float32
// isum = sum over the 16 sub-blocks of scale * (q6·x) - 32 * sum of scale *
// bsum: dotQ6KGo's (q6-32)·x per sub-block, rearranged exactly.
TEXT ·dotQ6KAVX2(SB), NOSPLIT, $0-28
	MOVQ w+0(FP), SI
	MOVQ x+8(FP), DI
	MOVQ nb+16(FP), CX
	VXORPS X8, X8, X8
	MOVL $0x0f0f0f0f, AX
	MOVL AX, X15
	VPBROADCASTD X15, Y15
	MOVL $0x03030303, AX
	MOVL AX, X13
	VPBROADCASTD X13, Y13
	TESTQ CX, CX
	JZ    q6kdone

q6kloop:
	LEAQ 192(SI), R10 // the 16 signed scales
	VPXOR Y3, Y3, Y3
	Q6KHALF(0, 128, 4, 0)
	Q6KHALF(64, 160, 132, 8)

	// Y3 -= 32 * (scales · bsums), 16 pairs.
	VPMOVSXBW (R10), Y10
	VPMADDWD  260(DI), Y10, Y10
	VPSLLD    $5, Y10, Y10
	VPSUBD    Y10, Y3, Y3

	VEXTRACTI128 $1, Y3, X4
	VPADDD       X4, X3, X3
	VPHADDD      X3, X3, X3
	VPHADDD      X3, X3, X3
	VCVTDQ2PS    X3, X3

	MOVWLZX      208(SI), AX
	MOVL         AX, X4
	VCVTPH2PS    X4, X4
	VMULSS       (DI), X4, X4
	VMULSS       X3, X4, X4
	VADDSS       X4, X8, X8

	ADDQ $210, SI
	ADDQ $292, DI
	DECQ CX
	JNZ  q6kloop

q6kdone:
	VMOVSS X8, ret+24(FP)
	VZEROUPPER
	RET

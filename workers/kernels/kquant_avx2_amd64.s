//go:build amd64 && !purego

#include "textflag.h"

// AVX2 kernels for Q4_K, Q5_K and Q6_K weights in their file layout (no
// repacking), one weight row against one Q8_K activation row (292-byte q8K:
// d, 256 qs, 16 bsums). Per super-block the integer sums are exact and the
// float updates are the portable kernels' (dotQ4KGo, dotQ5KGo, dotQ6KGo), in their
// order, so each result is bitwise equal to them.

// KSCALES: the 12 scale bytes of a Q4_K or Q5_K super-block at 4(SI) as
// words u0, u1, u2: scales 0..3 are u0&63, mins 0..3 u1&63, scales 4..7
// u2&15 | (u0>>6)<<4, mins 4..7 u2>>4 | (u1>>6)<<4, byte by byte
// (q4KScaleMin). Scales go to 0(SP), mins to 8(SP); uses AX, BX, DX, R8, R9.
#define KSCALES \
	MOVL 4(SI), AX \
	MOVL 8(SI), BX \
	MOVL 12(SI), DX \
	MOVL AX, R8 \
	ANDL $0x3f3f3f3f, R8 \
	MOVL R8, 0(SP) \
	MOVL BX, R8 \
	ANDL $0x3f3f3f3f, R8 \
	MOVL R8, 8(SP) \
	MOVL DX, R8 \
	ANDL $0x0f0f0f0f, R8 \
	MOVL AX, R9 \
	SHRL $6, R9 \
	ANDL $0x03030303, R9 \
	SHLL $4, R9 \
	ORL  R9, R8 \
	MOVL R8, 4(SP) \
	MOVL DX, R8 \
	SHRL $4, R8 \
	ANDL $0x0f0f0f0f, R8 \
	MOVL BX, R9 \
	SHRL $6, R9 \
	ANDL $0x03030303, R9 \
	SHLL $4, R9 \
	ORL  R9, R8 \
	MOVL R8, 12(SP)

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
	VMOVD AX, X6 \
	VPBROADCASTW X6, Y6 \
	MOVBLZX shi(SP), AX \
	VMOVD AX, X7 \
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
	VMOVD AX, X15
	VPBROADCASTD X15, Y15
	MOVL $0x00010001, AX
	VMOVD AX, X14
	VPBROADCASTD X14, Y14
	TESTQ CX, CX
	JZ    q4kdone

q4kloop:
	KSCALES

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
	VMOVD         AX, X4
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
	VMOVD AX, X6 \
	VPBROADCASTW X6, X6 \
	MOVBLSX s1(R10), AX \
	VMOVD AX, X7 \
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
	VMOVD AX, X15
	VPBROADCASTD X15, Y15
	MOVL $0x03030303, AX
	VMOVD AX, X13
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
	VMOVD         AX, X4
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

// Q5KV: zq's nibbles (masked) or-ed with bit sh of the qh bytes (Y11) at
// bit 4: 32 five-bit quants. Y13 holds 0x01 bytes.
#define Q5KV(zq, sh) \
	VPSRLW $sh, Y11, Y6 \
	VPAND Y13, Y6, Y6 \
	VPSLLW $4, Y6, Y6 \
	VPOR Y6, zq, zq

// Q5KSUB: a sub-block's quants yq times its 32 activations at xoff(DI),
// times its scale at soff(SP): 8 int32 partial sums in yq. Uses AX, Y8.
#define Q5KSUB(yq, xoff, soff) \
	VPMADDUBSW xoff(DI), yq, yq \
	MOVBLZX soff(SP), AX \
	VMOVD AX, X8 \
	VPBROADCASTW X8, Y8 \
	VPMADDWD Y8, yq, yq

// Q5KCHUNK: chunk k's 32 weight bytes at qoff(SI) (low nibbles: sub-block
// 2k, fifth bit 2k of qh; high: 2k+1) against the activations at xlo and
// xhi, scales at slo and shi: the two sub-blocks' partial sums pairwise
// added (VPHADDD) into yd.
#define Q5KCHUNK(qoff, sh1, sh2, xlo, xhi, slo, shi, yd) \
	VMOVDQU qoff(SI), Y4 \
	VPSRLW $4, Y4, Y5 \
	VPAND Y15, Y4, Y4 \
	VPAND Y15, Y5, Y5 \
	Q5KV(Y4, sh1) \
	Q5KV(Y5, sh2) \
	Q5KSUB(Y4, xlo, slo) \
	Q5KSUB(Y5, xhi, shi) \
	VPHADDD Y5, Y4, yd

// LANES8SUM: the partial sums of 8 groups, pairwise added by VPHADDD in
// order (groups 0,1 in Y9; 2,3 in Y10; 4,5 in Y12; 6,7 in Y3), as one sum
// per group in Y3's lanes 0..7; uses Y9, Y10.
#define LANES8SUM \
	VPHADDD Y10, Y9, Y9 \
	VPHADDD Y3, Y12, Y10 \
	VPERM2I128 $0x20, Y10, Y9, Y3 \
	VPERM2I128 $0x31, Y10, Y9, Y9 \
	VPADDD Y9, Y3, Y3

// func dotQ5KAVX2(w *byte, x *q8K, nb int) float32
// Per super-block: lane sums as dotQ5KGo's (lane j: sub-block j),
// acc[l] += (d*dx)*lane[l] in 8 float lanes, sum -= (dmin*dx)*msum; at the
// end sum += acc[0], ..., acc[7].
TEXT ·dotQ5KAVX2(SB), NOSPLIT, $48-28
	MOVQ w+0(FP), SI
	MOVQ x+8(FP), DI
	MOVQ nb+16(FP), CX
	VXORPS X0, X0, X0
	VXORPS Y1, Y1, Y1
	MOVL $0x0f0f0f0f, AX
	VMOVD AX, X15
	VPBROADCASTD X15, Y15
	MOVL $0x00010001, AX
	VMOVD AX, X14
	VPBROADCASTD X14, Y14
	MOVL $0x01010101, AX
	VMOVD AX, X13
	VPBROADCASTD X13, Y13
	TESTQ CX, CX
	JZ    q5kdone

q5kloop:
	KSCALES

	VPMOVZXBD 8(SP), Y2
	VPMADDWD  260(DI), Y14, Y4
	VPMULLD   Y4, Y2, Y2

	VMOVDQU 16(SI), Y11
	Q5KCHUNK(48, 0, 1, 4, 36, 0, 1, Y9)
	Q5KCHUNK(80, 2, 3, 68, 100, 2, 3, Y10)
	Q5KCHUNK(112, 4, 5, 132, 164, 4, 5, Y12)
	Q5KCHUNK(144, 6, 7, 196, 228, 6, 7, Y3)
	LANES8SUM

	// [d, dmin] * dx; acc += d*lanes; sum -= dmin*msum.
	MOVL         (SI), AX
	VMOVD         AX, X4
	VCVTPH2PS    X4, X4
	VBROADCASTSS (DI), X5
	VMULPS       X5, X4, X4
	VBROADCASTSS X4, Y6
	VCVTDQ2PS    Y3, Y3
	VMULPS       Y6, Y3, Y3
	VADDPS       Y3, Y1, Y1
	VEXTRACTI128 $1, Y2, X5
	VPADDD       X5, X2, X2
	VPHADDD      X2, X2, X2
	VPHADDD      X2, X2, X2
	VCVTDQ2PS    X2, X2
	VMOVSHDUP    X4, X4
	VMULSS       X2, X4, X4
	VSUBSS       X4, X0, X0

	ADDQ $176, SI
	ADDQ $292, DI
	DECQ CX
	JNZ  q5kloop

q5kdone:
	VMOVUPS Y1, 16(SP)
	VADDSS  16(SP), X0, X0
	VADDSS  20(SP), X0, X0
	VADDSS  24(SP), X0, X0
	VADDSS  28(SP), X0, X0
	VADDSS  32(SP), X0, X0
	VADDSS  36(SP), X0, X0
	VADDSS  40(SP), X0, X0
	VADDSS  44(SP), X0, X0
	VMOVSS  X0, ret+24(FP)
	VZEROUPPER
	RET

// IQ4XSCHUNK: sub-block ib of an IQ4_XS super-block: 16 bytes of nibbles at
// qoff(SI) as codebook levels (IQ4UNPACK's order: low nibbles then high
// ones) times the 32 activations at xoff(DI), times the sub-block's scale
// (gguf.IQ4XSScale: the nibble at shift4 of byte slo(SI), the two bits at
// shift2 of the word at 2(SI) above it, minus 32), into Y3. Y13 holds 0x0f
// bytes, Y12 the codebook in both lanes; uses AX, DX, Y0-Y2, Y6.
#define IQ4XSCHUNK(qoff, xoff, slo, shift4, shift2) \
	VMOVDQU qoff(SI), X1 \
	VPSRLW $4, X1, X2 \
	VINSERTI128 $1, X2, Y1, Y1 \
	VPAND Y13, Y1, Y1 \
	VPSHUFB Y1, Y12, Y1 \
	VMOVDQU xoff(DI), Y0 \
	VPABSB Y1, Y2 \
	VPSIGNB Y1, Y0, Y0 \
	VPMADDUBSW Y0, Y2, Y0 \
	MOVBLZX slo(SI), AX \
	SHRL $shift4, AX \
	ANDL $15, AX \
	MOVWLZX 2(SI), DX \
	SHRL $shift2, DX \
	ANDL $3, DX \
	SHLL $4, DX \
	ORL DX, AX \
	SUBL $32, AX \
	VMOVD AX, X6 \
	VPBROADCASTW X6, Y6 \
	VPMADDWD Y6, Y0, Y0 \
	VPADDD Y0, Y3, Y3

// func dotIQ4XSAVX2(w *byte, x *q8K, nb int) float32
// Per super-block isum = sum over the 8 sub-blocks of scale * (levels·x),
// exact in int32, then sum += (d*dx)*isum: bitwise dotIQ4XSGo.
TEXT ·dotIQ4XSAVX2(SB), NOSPLIT, $0-28
	MOVQ w+0(FP), SI
	MOVQ x+8(FP), DI
	MOVQ nb+16(FP), CX
	VXORPS X8, X8, X8
	MOVL $0x0f0f0f0f, AX
	VMOVD AX, X13
	VPBROADCASTD X13, Y13
	VBROADCASTI128 iq4xsLevels<>(SB), Y12
	TESTQ CX, CX
	JZ    iq4xsdone

iq4xsloop:
	VPXOR Y3, Y3, Y3
	IQ4XSCHUNK(8, 4, 4, 0, 0)
	IQ4XSCHUNK(24, 36, 4, 4, 2)
	IQ4XSCHUNK(40, 68, 5, 0, 4)
	IQ4XSCHUNK(56, 100, 5, 4, 6)
	IQ4XSCHUNK(72, 132, 6, 0, 8)
	IQ4XSCHUNK(88, 164, 6, 4, 10)
	IQ4XSCHUNK(104, 196, 7, 0, 12)
	IQ4XSCHUNK(120, 228, 7, 4, 14)

	VEXTRACTI128 $1, Y3, X4
	VPADDD       X4, X3, X3
	VPHADDD      X3, X3, X3
	VPHADDD      X3, X3, X3
	VCVTDQ2PS    X3, X3

	MOVWLZX   (SI), AX
	VMOVD     AX, X4
	VCVTPH2PS X4, X4
	VMULSS    (DI), X4, X4
	VMULSS    X3, X4, X4
	VADDSS    X4, X8, X8

	ADDQ $136, SI
	ADDQ $292, DI
	DECQ CX
	JNZ  iq4xsloop

iq4xsdone:
	VMOVSS X8, ret+24(FP)
	VZEROUPPER
	RET

// iq4xsLevels is GGML's IQ4_NL codebook (gguf.IQ4NLValues), as iq4nl in
// dot_avx2_amd64.s.
DATA iq4xsLevels<>+0(SB)/8, $0xF6EADDCFBFAD9881
DATA iq4xsLevels<>+8(SB)/8, $0x7159453526190D01
GLOBL iq4xsLevels<>(SB), RODATA|NOPTR, $16

// Q3KSCALE: scale j of a Q3_K super-block (q3KScales: the nibble at lshift
// of byte loff(SI), the two bits at hshift of byte hoff(SI) above it, minus
// 32) as a word at dst(SP); uses AX, DX.
#define Q3KSCALE(loff, lshift, hoff, hshift, dst) \
	MOVBLZX loff(SI), AX \
	SHRL $lshift, AX \
	ANDL $15, AX \
	MOVBLZX hoff(SI), DX \
	SHRL $hshift, DX \
	ANDL $3, DX \
	SHLL $4, DX \
	ORL DX, AX \
	SUBL $32, AX \
	MOVW AX, dst(SP)

// Q3KCHUNK: 32 elements of a Q3_K super-block: the 2-bit quants at shift
// of the bytes at qoff(SI), less 4 where bit mbit of the hmask bytes (Y11)
// is clear, times the activations at xoff(DI) (GGML's sign trick: VPABSB of
// the value, VPSIGNB of the activation), the word pairs times the scale at
// s0(SP) (elements 0..15) or s1(SP) (16..31): 8 int32 partial sums in yd.
// Y13 holds 0x03 bytes, Y15 0x04 bytes, Y14 zero; uses AX, Y4-Y8.
#define Q3KCHUNK(qoff, shift, mbit, xoff, s0, s1, yd) \
	VMOVDQU qoff(SI), Y4 \
	VPSRLW $shift, Y4, Y4 \
	VPAND Y13, Y4, Y4 \
	MOVL $mbit, AX \
	VMOVD AX, X6 \
	VPBROADCASTB X6, Y6 \
	VPAND Y11, Y6, Y6 \
	VPCMPEQB Y14, Y6, Y6 \
	VPAND Y15, Y6, Y6 \
	VPSUBB Y6, Y4, Y4 \
	VMOVDQU xoff(DI), Y5 \
	VPSIGNB Y4, Y5, Y5 \
	VPABSB Y4, Y4 \
	VPMADDUBSW Y5, Y4, Y4 \
	VPBROADCASTW s0(SP), X7 \
	VPBROADCASTW s1(SP), X8 \
	VINSERTI128 $1, X8, Y7, Y7 \
	VPMADDWD Y7, Y4, yd

// func dotQ3KAVX2(w *byte, x *q8K, nb int) float32
// Per super-block 8 int32 lanes (exact; lane c: the 32-element chunk c),
// then acc[l] += (d*dx)*lane[l] in eight float lanes, summed in lane order at
// the end: bitwise dotQ3KGo.
TEXT ·dotQ3KAVX2(SB), NOSPLIT, $64-28
	MOVQ w+0(FP), SI
	MOVQ x+8(FP), DI
	MOVQ nb+16(FP), CX
	VXORPS Y1, Y1, Y1
	VPXOR  Y14, Y14, Y14
	MOVL $0x03030303, AX
	VMOVD AX, X13
	VPBROADCASTD X13, Y13
	MOVL $0x04040404, AX
	VMOVD AX, X15
	VPBROADCASTD X15, Y15
	TESTQ CX, CX
	JZ    q3kdone

q3kloop:
	Q3KSCALE(96, 0, 104, 0, 0)
	Q3KSCALE(97, 0, 105, 0, 2)
	Q3KSCALE(98, 0, 106, 0, 4)
	Q3KSCALE(99, 0, 107, 0, 6)
	Q3KSCALE(100, 0, 104, 2, 8)
	Q3KSCALE(101, 0, 105, 2, 10)
	Q3KSCALE(102, 0, 106, 2, 12)
	Q3KSCALE(103, 0, 107, 2, 14)
	Q3KSCALE(96, 4, 104, 4, 16)
	Q3KSCALE(97, 4, 105, 4, 18)
	Q3KSCALE(98, 4, 106, 4, 20)
	Q3KSCALE(99, 4, 107, 4, 22)
	Q3KSCALE(100, 4, 104, 6, 24)
	Q3KSCALE(101, 4, 105, 6, 26)
	Q3KSCALE(102, 4, 106, 6, 28)
	Q3KSCALE(103, 4, 107, 6, 30)
	VMOVDQU 0(SI), Y11
	Q3KCHUNK(32, 0, 1, 4, 0, 2, Y3)
	Q3KCHUNK(32, 2, 2, 36, 4, 6, Y12)
	VPHADDD Y12, Y3, Y9
	Q3KCHUNK(32, 4, 4, 68, 8, 10, Y3)
	Q3KCHUNK(32, 6, 8, 100, 12, 14, Y12)
	VPHADDD Y12, Y3, Y10
	Q3KCHUNK(64, 0, 16, 132, 16, 18, Y3)
	Q3KCHUNK(64, 2, 32, 164, 20, 22, Y12)
	VPHADDD Y12, Y3, Y12
	Q3KCHUNK(64, 4, 64, 196, 24, 26, Y3)
	Q3KCHUNK(64, 6, 128, 228, 28, 30, Y2)
	VPHADDD Y2, Y3, Y3
	LANES8SUM

	// d*dx; acc += d*lanes.
	MOVWLZX      108(SI), AX
	VMOVD        AX, X4
	VCVTPH2PS    X4, X4
	VMULSS       (DI), X4, X4
	VBROADCASTSS X4, Y6
	VCVTDQ2PS    Y3, Y3
	VMULPS       Y6, Y3, Y3
	VADDPS       Y3, Y1, Y1

	ADDQ $110, SI
	ADDQ $292, DI
	DECQ CX
	JNZ  q3kloop

q3kdone:
	VMOVUPS Y1, 32(SP)
	VXORPS  X0, X0, X0
	VADDSS  32(SP), X0, X0
	VADDSS  36(SP), X0, X0
	VADDSS  40(SP), X0, X0
	VADDSS  44(SP), X0, X0
	VADDSS  48(SP), X0, X0
	VADDSS  52(SP), X0, X0
	VADDSS  56(SP), X0, X0
	VADDSS  60(SP), X0, X0
	VMOVSS  X0, ret+24(FP)
	VZEROUPPER
	RET

// Q2KCHUNK: 32 elements of a Q2_K super-block: the 2-bit quants at shift of
// the bytes at qoff(SI) times the activations at xoff(DI), summed in pairs,
// times the low nibble of scale byte slo(SI) (elements 0..15) or shi(SI)
// (16..31), into the int32 lanes of Y3. Y13 holds 0x03 bytes; uses AX, Y4,
// Y6, Y7.
#define Q2KCHUNK(qoff, shift, xoff, slo, shi) \
	VMOVDQU qoff(SI), Y4 \
	VPSRLW $shift, Y4, Y4 \
	VPAND Y13, Y4, Y4 \
	VPMADDUBSW xoff(DI), Y4, Y4 \
	MOVBLZX slo(SI), AX \
	ANDL $15, AX \
	VMOVD AX, X6 \
	VPBROADCASTW X6, X6 \
	MOVBLZX shi(SI), AX \
	ANDL $15, AX \
	VMOVD AX, X7 \
	VPBROADCASTW X7, X7 \
	VINSERTI128 $1, X7, Y6, Y6 \
	VPMADDWD Y6, Y4, Y4 \
	VPADDD Y4, Y3, Y3

// func dotQ2KAVX2(w *byte, x *q8K, nb int) float32
// Per super-block isum (quants times activations times scales) and msum
// (the mins times the activations' 16-element sums), exact in int32, then
// sum += (dall*isum - dmin*msum) with dall = dx*d, dmin = dx*dmin: bitwise
// dotQ2KGo.
TEXT ·dotQ2KAVX2(SB), NOSPLIT, $0-28
	MOVQ w+0(FP), SI
	MOVQ x+8(FP), DI
	MOVQ nb+16(FP), CX
	VXORPS X0, X0, X0
	MOVL $0x03030303, AX
	VMOVD AX, X13
	VPBROADCASTD X13, Y13
	TESTQ CX, CX
	JZ    q2kdone

q2kloop:
	// msum lanes: the 16 mins (high nibbles of the scale bytes) times bsums.
	VPMOVZXBW (SI), Y2
	VPSRLW    $4, Y2, Y2
	VPMADDWD  260(DI), Y2, Y2

	VPXOR Y3, Y3, Y3
	Q2KCHUNK(16, 0, 4, 0, 1)
	Q2KCHUNK(16, 2, 36, 2, 3)
	Q2KCHUNK(16, 4, 68, 4, 5)
	Q2KCHUNK(16, 6, 100, 6, 7)
	Q2KCHUNK(48, 0, 132, 8, 9)
	Q2KCHUNK(48, 2, 164, 10, 11)
	Q2KCHUNK(48, 4, 196, 12, 13)
	Q2KCHUNK(48, 6, 228, 14, 15)

	// X3 = [isum, msum, isum, msum] (exact), then as floats.
	VEXTRACTI128 $1, Y3, X4
	VPADDD       X4, X3, X3
	VEXTRACTI128 $1, Y2, X5
	VPADDD       X5, X2, X2
	VPHADDD      X2, X3, X3
	VPHADDD      X3, X3, X3
	VCVTDQ2PS    X3, X3

	// [dx*d, dx*dmin] * [isum, msum]; sum += the first less the second.
	MOVL         80(SI), AX
	VMOVD        AX, X4
	VCVTPH2PS    X4, X4
	VBROADCASTSS (DI), X5
	VMULPS       X4, X5, X4
	VMULPS       X3, X4, X4
	VMOVSHDUP    X4, X5
	VSUBSS       X5, X4, X4
	VADDSS       X4, X0, X0

	ADDQ $84, SI
	ADDQ $292, DI
	DECQ CX
	JNZ  q2kloop

q2kdone:
	VMOVSS X0, ret+24(FP)
	VZEROUPPER
	RET

//go:build amd64 && !purego

#include "textflag.h"
#include "prefetch_amd64.h"
#include "avx512_amd64.h"

// AVX-512 VNNI kernels over interleaved weights (see repack.go): 16 weight rows
// by 1 or 4 activation rows per call. Per block and activation row, VPDPBUSD
// leaves each weight row's exact int32 sum in its lane; the kernel subtracts the
// offset term (aux: per activation block, f32 d then int32 K*sum(x)) and does
// sum += (d_w*d_x) * float(isum) with separate multiplies and add, lane by lane:
// bitwise what dotQ8Go/dotQ4Go compute for each row.
//
// Activation rows are Q8_0 blocks (34 bytes: f16 d, int8 qs[32]).

// QFIN: isum in zi, acc in za, aux row pointer ar; Z16 holds the 16 weight
// scales as f32; Z17 is scratch.
#define QFIN(zi, za, ar) \
	VPSUBD.BCST 4(ar), zi, zi \
	VCVTDQ2PS zi, zi \
	VMULPS.BCST (ar), Z16, Z17 \
	VMULPS zi, Z17, Z17 \
	VADDPS Z17, za, za

// Q8 4-row step for slice s (weights in zw, activation byte offset off): even
// slices into Z4..Z7, odd ones into Z20..Z23 (Q8STEP4B), so each row has two
// dependency chains; ZERO4 clears both and FIN4 adds them first.
#define Q8STEP4(off, zw) \
	VPDPBUSD.BCST off(DI), zw, Z4 \
	VPDPBUSD.BCST off(R8), zw, Z5 \
	VPDPBUSD.BCST off(R9), zw, Z6 \
	VPDPBUSD.BCST off(R10), zw, Z7

#define Q8STEP4B(off, zw) \
	VPDPBUSD.BCST off(DI), zw, Z20 \
	VPDPBUSD.BCST off(R8), zw, Z21 \
	VPDPBUSD.BCST off(R9), zw, Z22 \
	VPDPBUSD.BCST off(R10), zw, Z23

// SETUP4 loads the arguments of a 4-row kernel: SI weights, CX blocks,
// DI/R8/R9/R10 activation rows, DX/R11/R12/R13 aux rows, R14 the bytes to
// prefetch (prefetch_amd64.h).
#define SETUP4 \
	MOVQ w+0(FP), SI \
	MOVQ nb+8(FP), CX \
	MOVQ x+16(FP), DI \
	MOVQ xstride+24(FP), BX \
	LEAQ (DI)(BX*1), R8 \
	LEAQ (R8)(BX*1), R9 \
	LEAQ (R9)(BX*1), R10 \
	MOVQ aux+32(FP), DX \
	MOVQ auxstride+40(FP), BX \
	LEAQ (DX)(BX*1), R11 \
	LEAQ (R11)(BX*1), R12 \
	LEAQ (R12)(BX*1), R13 \
	MOVQ pf+64(FP), R14 \
	VPXORD Z0, Z0, Z0 \
	VPXORD Z1, Z1, Z1 \
	VPXORD Z2, Z2, Z2 \
	VPXORD Z3, Z3, Z3

// FIN4BY: the two chains of each row added, then F (QFIN, MFIN) on the
// sums with the rows' aux pointers.
#define FIN4BY(F) \
	VPADDD Z20, Z4, Z4 \
	VPADDD Z21, Z5, Z5 \
	VPADDD Z22, Z6, Z6 \
	VPADDD Z23, Z7, Z7 \
	F(Z4, Z0, DX) \
	F(Z5, Z1, R11) \
	F(Z6, Z2, R12) \
	F(Z7, Z3, R13)

#define FIN4 FIN4BY(QFIN)

// NEXTX4: the next block: wb weight bytes, xb activation bytes (34 for
// Q8_0, 36 for Q8_1), 8 aux bytes.
#define NEXTX4(wb, xb) \
	ADDQ $wb, SI \
	ADDQ $wb, R14 \
	ADDQ $xb, DI \
	ADDQ $xb, R8 \
	ADDQ $xb, R9 \
	ADDQ $xb, R10 \
	ADDQ $8, DX \
	ADDQ $8, R11 \
	ADDQ $8, R12 \
	ADDQ $8, R13

#define NEXT4(wb) NEXTX4(wb, 34)

#define STORE4 \
	MOVQ out+48(FP), AX \
	MOVQ ostride+56(FP), BX \
	VMOVUPS Z0, (AX) \
	ADDQ BX, AX \
	VMOVUPS Z1, (AX) \
	ADDQ BX, AX \
	VMOVUPS Z2, (AX) \
	ADDQ BX, AX \
	VMOVUPS Z3, (AX) \
	VZEROUPPER

// func gemmQ8P4(w *byte, nb int, x *byte, xstride uintptr, aux *byte, auxstride uintptr, out *float32, ostride uintptr, pf *byte)
TEXT ·gemmQ8P4(SB), NOSPLIT, $0-72
	SETUP4
	TESTQ CX, CX
	JZ    q8p4done
q8p4loop:
	VCVTPH2PS (SI), Z16
	VMOVDQU32 32(SI), Z8
	VMOVDQU32 96(SI), Z9
	VMOVDQU32 160(SI), Z10
	VMOVDQU32 224(SI), Z11
	VMOVDQU32 288(SI), Z12
	VMOVDQU32 352(SI), Z13
	VMOVDQU32 416(SI), Z14
	VMOVDQU32 480(SI), Z15
	ZERO4
	PF5(0)
	PF4(5)
	Q8STEP4(2, Z8)
	Q8STEP4B(6, Z9)
	Q8STEP4(10, Z10)
	Q8STEP4B(14, Z11)
	Q8STEP4(18, Z12)
	Q8STEP4B(22, Z13)
	Q8STEP4(26, Z14)
	Q8STEP4B(30, Z15)
	FIN4
	NEXT4(544)
	DECQ CX
	JNZ  q8p4loop
q8p4done:
	STORE4
	RET

// func gemmQ8P1(w *byte, nb int, x *byte, aux *byte, out *float32)
TEXT ·gemmQ8P1(SB), NOSPLIT, $0-40
	MOVQ w+0(FP), SI
	MOVQ nb+8(FP), CX
	MOVQ x+16(FP), DI
	MOVQ aux+24(FP), DX
	VPXORD Z0, Z0, Z0
	TESTQ CX, CX
	JZ    q8p1done
q8p1loop:
	VCVTPH2PS (SI), Z16
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	VMOVDQU32 32(SI), Z8
	VMOVDQU32 96(SI), Z9
	VMOVDQU32 160(SI), Z10
	VMOVDQU32 224(SI), Z11
	VPDPBUSD.BCST 2(DI), Z8, Z4
	VPDPBUSD.BCST 6(DI), Z9, Z5
	VPDPBUSD.BCST 10(DI), Z10, Z4
	VPDPBUSD.BCST 14(DI), Z11, Z5
	VMOVDQU32 288(SI), Z12
	VMOVDQU32 352(SI), Z13
	VMOVDQU32 416(SI), Z14
	VMOVDQU32 480(SI), Z15
	VPDPBUSD.BCST 18(DI), Z12, Z4
	VPDPBUSD.BCST 22(DI), Z13, Z5
	VPDPBUSD.BCST 26(DI), Z14, Z4
	VPDPBUSD.BCST 30(DI), Z15, Z5
	VPADDD Z5, Z4, Z4
	QFIN(Z4, Z0, DX)
	ADDQ $544, SI
	ADDQ $34, DI
	ADDQ $8, DX
	DECQ CX
	JNZ  q8p1loop
q8p1done:
	MOVQ out+32(FP), AX
	VMOVUPS Z0, (AX)
	VZEROUPPER
	RET

// Q4SPLIT: the 64-byte slice at off(SI) -> low nibbles in zl, high in zh;
// Z18 holds 0x0f bytes.
#define Q4SPLIT(off, zl, zh) \
	VMOVDQU32 off(SI), zl \
	VPSRLW $4, zl, zh \
	VPANDD Z18, zl, zl \
	VPANDD Z18, zh, zh

// Q4SPLIT4: a block's 4 slices from off(SI): low nibbles in Z8..Z11, high
// in Z12..Z15.
#define Q4SPLIT4(off) \
	Q4SPLIT(off, Z8, Z12) \
	Q4SPLIT(off+64, Z9, Z13) \
	Q4SPLIT(off+128, Z10, Z14) \
	Q4SPLIT(off+192, Z11, Z15)

// func gemmQ4P4(w *byte, nb int, x *byte, xstride uintptr, aux *byte, auxstride uintptr, out *float32, ostride uintptr, pf *byte)
TEXT ·gemmQ4P4(SB), NOSPLIT, $0-72
	SETUP4
	MOVL $0x0f0f0f0f, AX
	VPBROADCASTD AX, Z18
	TESTQ CX, CX
	JZ    q4p4done
q4p4loop:
	VCVTPH2PS (SI), Z16
	Q4SPLIT4(32)
	ZERO4
	PF5(0)
	Q8STEP4(2, Z8)
	Q8STEP4B(6, Z9)
	Q8STEP4(10, Z10)
	Q8STEP4B(14, Z11)
	Q8STEP4(18, Z12)
	Q8STEP4B(22, Z13)
	Q8STEP4(26, Z14)
	Q8STEP4B(30, Z15)
	FIN4
	NEXT4(288)
	DECQ CX
	JNZ  q4p4loop
q4p4done:
	STORE4
	RET

// func gemmQ4P1(w *byte, nb int, x *byte, aux *byte, out *float32)
TEXT ·gemmQ4P1(SB), NOSPLIT, $0-40
	MOVQ w+0(FP), SI
	MOVQ nb+8(FP), CX
	MOVQ x+16(FP), DI
	MOVQ aux+24(FP), DX
	MOVL $0x0f0f0f0f, AX
	VPBROADCASTD AX, Z18
	VPXORD Z0, Z0, Z0
	TESTQ CX, CX
	JZ    q4p1done
q4p1loop:
	VCVTPH2PS (SI), Z16
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	Q4SPLIT(32, Z8, Z12)
	Q4SPLIT(96, Z9, Z13)
	VPDPBUSD.BCST 2(DI), Z8, Z4
	VPDPBUSD.BCST 18(DI), Z12, Z5
	VPDPBUSD.BCST 6(DI), Z9, Z4
	VPDPBUSD.BCST 22(DI), Z13, Z5
	Q4SPLIT(160, Z10, Z14)
	Q4SPLIT(224, Z11, Z15)
	VPDPBUSD.BCST 10(DI), Z10, Z4
	VPDPBUSD.BCST 26(DI), Z14, Z5
	VPDPBUSD.BCST 14(DI), Z11, Z4
	VPDPBUSD.BCST 30(DI), Z15, Z5
	VPADDD Z5, Z4, Z4
	QFIN(Z4, Z0, DX)
	ADDQ $288, SI
	ADDQ $34, DI
	ADDQ $8, DX
	DECQ CX
	JNZ  q4p1loop
q4p1done:
	MOVQ out+32(FP), AX
	VMOVUPS Z0, (AX)
	VZEROUPPER
	RET

// IQ4_NL: Q4_0's layout, each nibble selecting a codebook level
// (gguf.IQ4NLValues, -127..113). The kernels look the nibbles up in the
// levels plus 128 (1..241, unsigned for VPDPBUSD) and subtract 128 times the
// block's sum of x (aux, K = 128, as for Q8_0): the exact sum of level times
// x, then Q4_0's float update, bitwise dotIQ4NLGo's.
DATA iq4nlu<>+0(SB)/8, $0x766A5D4F3F2D1801
DATA iq4nlu<>+8(SB)/8, $0xF1D9C5B5A6998D81
GLOBL iq4nlu<>(SB), RODATA|NOPTR, $16

// NLSPLIT: Q4SPLIT, then both halves' nibbles looked up in Z19 (the
// codebook plus 128 in every 128-bit lane).
#define NLSPLIT(off, zl, zh) \
	Q4SPLIT(off, zl, zh) \
	VPSHUFB zl, Z19, zl \
	VPSHUFB zh, Z19, zh

// func gemmIQ4NLP4(w *byte, nb int, x *byte, xstride uintptr, aux *byte, auxstride uintptr, out *float32, ostride uintptr, pf *byte)
TEXT ·gemmIQ4NLP4(SB), NOSPLIT, $0-72
	SETUP4
	MOVL $0x0f0f0f0f, AX
	VPBROADCASTD AX, Z18
	VBROADCASTI32X4 iq4nlu<>(SB), Z19
	TESTQ CX, CX
	JZ    nlp4done
nlp4loop:
	VCVTPH2PS (SI), Z16
	NLSPLIT(32, Z8, Z12)
	NLSPLIT(96, Z9, Z13)
	NLSPLIT(160, Z10, Z14)
	NLSPLIT(224, Z11, Z15)
	ZERO4
	PF5(0)
	Q8STEP4(2, Z8)
	Q8STEP4B(6, Z9)
	Q8STEP4(10, Z10)
	Q8STEP4B(14, Z11)
	Q8STEP4(18, Z12)
	Q8STEP4B(22, Z13)
	Q8STEP4(26, Z14)
	Q8STEP4B(30, Z15)
	FIN4
	NEXT4(288)
	DECQ CX
	JNZ  nlp4loop
nlp4done:
	STORE4
	RET

// func gemmIQ4NLP1(w *byte, nb int, x *byte, aux *byte, out *float32)
TEXT ·gemmIQ4NLP1(SB), NOSPLIT, $0-40
	MOVQ w+0(FP), SI
	MOVQ nb+8(FP), CX
	MOVQ x+16(FP), DI
	MOVQ aux+24(FP), DX
	MOVL $0x0f0f0f0f, AX
	VPBROADCASTD AX, Z18
	VBROADCASTI32X4 iq4nlu<>(SB), Z19
	VPXORD Z0, Z0, Z0
	TESTQ CX, CX
	JZ    nlp1done
nlp1loop:
	VCVTPH2PS (SI), Z16
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	NLSPLIT(32, Z8, Z12)
	NLSPLIT(96, Z9, Z13)
	VPDPBUSD.BCST 2(DI), Z8, Z4
	VPDPBUSD.BCST 18(DI), Z12, Z5
	VPDPBUSD.BCST 6(DI), Z9, Z4
	VPDPBUSD.BCST 22(DI), Z13, Z5
	NLSPLIT(160, Z10, Z14)
	NLSPLIT(224, Z11, Z15)
	VPDPBUSD.BCST 10(DI), Z10, Z4
	VPDPBUSD.BCST 26(DI), Z14, Z5
	VPDPBUSD.BCST 14(DI), Z11, Z4
	VPDPBUSD.BCST 30(DI), Z15, Z5
	VPADDD Z5, Z4, Z4
	QFIN(Z4, Z0, DX)
	ADDQ $288, SI
	ADDQ $34, DI
	ADDQ $8, DX
	DECQ CX
	JNZ  nlp1loop
nlp1done:
	MOVQ out+32(FP), AX
	VMOVUPS Z0, (AX)
	VZEROUPPER
	RET

DATA q8absmask<>+0(SB)/4, $0x7fffffff
GLOBL q8absmask<>(SB), RODATA, $4
DATA q8signmask<>+0(SB)/4, $0x80000000
GLOBL q8signmask<>(SB), RODATA, $4
DATA q8half<>+0(SB)/4, $0x3f000000
GLOBL q8half<>(SB), RODATA, $4
DATA q8one<>+0(SB)/4, $0x3f800000
GLOBL q8one<>(SB), RODATA, $4
DATA q8d127<>+0(SB)/4, $0x42fe0000
GLOBL q8d127<>(SB), RODATA, $4

// ROUNDAWAY: za = round(za) with ties away from zero, as C's roundf: truncate,
// then step one away from zero where the dropped fraction is at least 1/2.
// A NaN or infinite za gives 0, as roundAway (x-x is 0 only where x is
// finite). Z26 abs mask, Z27 sign mask, Z28 0.5, Z29 1.0; uses zt, zs and K1.
#define ROUNDAWAY(za, zt, zs) \
	VRNDSCALEPS $0x0b, za, zt \
	VSUBPS zt, za, zs \
	VANDPS Z26, zs, zs \
	VCMPPS $0x1d, Z28, zs, K1 \
	VANDPS Z27, za, zs \
	VORPS Z29, zs, zs \
	VADDPS zs, zt, K1, zt \
	VSUBPS zt, zt, zs \
	VCMPPS $7, zs, zs, K1 \
	VCVTPS2DQ.Z zt, K1, za

// Q8CONST5 loads the constants Q8ROUND5 and ROUNDAWAY read.
#define Q8CONST5 \
	VPBROADCASTD q8absmask<>(SB), Z26 \
	VPBROADCASTD q8signmask<>(SB), Z27 \
	VPBROADCASTD q8half<>(SB), Z28 \
	VPBROADCASTD q8one<>(SB), Z29 \
	VMOVSS q8d127<>(SB), X30 \
	VMOVSS q8one<>(SB), X31

// Q8ISUM5: X2 = the sum of Q8ROUND5's 32 quants (Z0, Z1). Uses Z2, Z3.
#define Q8ISUM5 \
	VPADDD Z1, Z0, Z2 \
	VEXTRACTI32X8 $1, Z2, Y3 \
	VPADDD Y3, Y2, Y2 \
	VEXTRACTI128 $1, Y2, X3 \
	VPADDD X3, X2, X2 \
	VPSHUFD $0x4e, X2, X3 \
	VPADDD X3, X2, X2 \
	VPSHUFD $0xb1, X2, X3 \
	VPADDD X3, X2, X2

// Q8ROUND5: one block of 32 floats at SI quantized as quantizeQ8 does: Z0
// and Z1 the rounded quants as int32, X4 d = amax/127, X8 d as f16. amax is
// taken on the bits (VPMAXSD), as absMax: a NaN beats every number. Uses
// Z2, Z3, X5-X7, Z10-Z13 and K1; Z26-Z29, X30, X31 as quantQ8AVX512 sets them.
#define Q8ROUND5 \
	VMOVUPS (SI), Z0 \
	VMOVUPS 64(SI), Z1 \
	VANDPS Z26, Z0, Z2 \
	VANDPS Z26, Z1, Z3 \
	VPMAXSD Z3, Z2, Z2 \
	VEXTRACTF32X8 $1, Z2, Y3 \
	VPMAXSD Y3, Y2, Y2 \
	VEXTRACTF128 $1, Y2, X3 \
	VPMAXSD X3, X2, X2 \
	VPERMILPS $0x4e, X2, X3 \
	VPMAXSD X3, X2, X2 \
	VPERMILPS $0xb1, X2, X3 \
	VPMAXSD X3, X2, X2 \
	VDIVSS X30, X2, X4 \
	VDIVSS X4, X31, X5 \
	VXORPS X6, X6, X6 \
	VCMPSS $4, X6, X4, X7 \
	VANDPS X7, X5, X5 \
	VCVTPS2PH $0, X4, X8 \
	VBROADCASTSS X5, Z5 \
	VMULPS Z5, Z0, Z0 \
	VMULPS Z5, Z1, Z1 \
	ROUNDAWAY(Z0, Z10, Z11) \
	ROUNDAWAY(Z1, Z12, Z13)

// Q8KBSUM: the sum of the 16 int32 lanes of z (y and x its low halves, which
// it overwrites) stored as an int16 at off(DI). Uses Y18, X19 and AX.
#define Q8KBSUM(z, y, x, off) \
	VEXTRACTI64X4 $1, z, Y18 \
	VPADDD Y18, y, y \
	VEXTRACTI32X4 $1, y, X19 \
	VPADDD X19, x, x \
	VPSHUFD $0x4e, x, X19 \
	VPADDD X19, x, x \
	VPSHUFD $0xb1, x, X19 \
	VPADDD X19, x, x \
	VMOVD x, AX \
	MOVW AX, off(DI)

// func quantQ8AVX512(dst *byte, x *float32, nb int, aux *q8Aux, k int32)
// Q8_0 blocks of x, bitwise as quantizeQ8; with aux non-nil, also each block's
// f16 scale as f32 and k*sum(q), as matJob.auxRow.
TEXT ·quantQ8AVX512(SB), NOSPLIT, $0-36
	MOVQ dst+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ nb+16(FP), CX
	MOVQ aux+24(FP), DX
	MOVL k+32(FP), R8
	Q8CONST5
	TESTQ CX, CX
	JZ    qq8done
qq8loop:
	Q8ROUND5
	VPEXTRW $0, X8, (DI)
	VPMOVSDB Z0, 2(DI)
	VPMOVSDB Z1, 18(DI)
	TESTQ DX, DX
	JZ    qq8next
	VCVTPH2PS X8, X9
	VMOVSS X9, (DX)
	Q8ISUM5
	VMOVD X2, AX
	IMULL R8, AX
	MOVL AX, 4(DX)
	ADDQ $8, DX
qq8next:
	ADDQ $128, SI
	ADDQ $34, DI
	DECQ CX
	JNZ  qq8loop
qq8done:
	VZEROUPPER
	RET

DATA q5x10<>+0(SB)/4, $0x10101010
GLOBL q5x10<>(SB), RODATA, $4

// Q5HIGH: or the fifth bits into the 8 nibble slices Z8..Z15 (see repack.go:
// the plane at 288(SI) holds lo slice s's bits at bit s, hi slice s's at bit
// 4+s; each is moved to bit 4). Z28 holds 0x10 bytes; uses Z30, Z31.
// Q5HIGHAT is Q5HIGH with the plane at off(SI) (Q5_1's: 320).
#define Q5HIGH Q5HIGHAT(288)

#define Q5HIGHAT(off) \
	VMOVDQU32 off(SI), Z30 \
	VPSLLW $4, Z30, Z31 \
	VPTERNLOGD $0xf8, Z28, Z31, Z8 \
	VPSLLW $3, Z30, Z31 \
	VPTERNLOGD $0xf8, Z28, Z31, Z9 \
	VPSLLW $2, Z30, Z31 \
	VPTERNLOGD $0xf8, Z28, Z31, Z10 \
	VPSLLW $1, Z30, Z31 \
	VPTERNLOGD $0xf8, Z28, Z31, Z11 \
	VPTERNLOGD $0xf8, Z28, Z30, Z12 \
	VPSRLW $1, Z30, Z31 \
	VPTERNLOGD $0xf8, Z28, Z31, Z13 \
	VPSRLW $2, Z30, Z31 \
	VPTERNLOGD $0xf8, Z28, Z31, Z14 \
	VPSRLW $3, Z30, Z31 \
	VPTERNLOGD $0xf8, Z28, Z31, Z15

// func gemmQ5P4(w *byte, nb int, x *byte, xstride uintptr, aux *q8Aux, auxstride uintptr, out *float32, ostride uintptr, pf *byte)
// Q5_0 weights: as gemmQ4P4 with a fifth bit; aux holds 16*sum(x).
TEXT ·gemmQ5P4(SB), NOSPLIT, $0-72
	SETUP4
	MOVL $0x0f0f0f0f, AX
	VPBROADCASTD AX, Z18
	VPBROADCASTD q5x10<>(SB), Z28
	TESTQ CX, CX
	JZ    q5p4done
q5p4loop:
	VCVTPH2PS (SI), Z16
	Q4SPLIT4(32)
	Q5HIGH
	ZERO4
	PF5(0)
	PF1(5)
	Q8STEP4(2, Z8)
	Q8STEP4B(6, Z9)
	Q8STEP4(10, Z10)
	Q8STEP4B(14, Z11)
	Q8STEP4(18, Z12)
	Q8STEP4B(22, Z13)
	Q8STEP4(26, Z14)
	Q8STEP4B(30, Z15)
	FIN4
	NEXT4(352)
	DECQ CX
	JNZ  q5p4loop
q5p4done:
	STORE4
	RET

// func gemmQ5P1(w *byte, nb int, x *byte, aux *q8Aux, out *float32)
TEXT ·gemmQ5P1(SB), NOSPLIT, $0-40
	MOVQ w+0(FP), SI
	MOVQ nb+8(FP), CX
	MOVQ x+16(FP), DI
	MOVQ aux+24(FP), DX
	MOVL $0x0f0f0f0f, AX
	VPBROADCASTD AX, Z18
	VPBROADCASTD q5x10<>(SB), Z28
	VPXORD Z0, Z0, Z0
	TESTQ CX, CX
	JZ    q5p1done
q5p1loop:
	VCVTPH2PS (SI), Z16
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	Q4SPLIT4(32)
	Q5HIGH
	VPDPBUSD.BCST 2(DI), Z8, Z4
	VPDPBUSD.BCST 18(DI), Z12, Z5
	VPDPBUSD.BCST 6(DI), Z9, Z4
	VPDPBUSD.BCST 22(DI), Z13, Z5
	VPDPBUSD.BCST 10(DI), Z10, Z4
	VPDPBUSD.BCST 26(DI), Z14, Z5
	VPDPBUSD.BCST 14(DI), Z11, Z4
	VPDPBUSD.BCST 30(DI), Z15, Z5
	VPADDD Z5, Z4, Z4
	QFIN(Z4, Z0, DX)
	ADDQ $352, SI
	ADDQ $34, DI
	ADDQ $8, DX
	DECQ CX
	JNZ  q5p1loop
q5p1done:
	MOVQ out+32(FP), AX
	VMOVUPS Z0, (AX)
	VZEROUPPER
	RET

// ---- Q4_1 and Q5_1 against Q8_1 activation blocks (36 bytes: f16 d, f16
// s = d*sum(q), 32 int8; no side data). Groups: 16 f16 d at 0, 16 f16 m at
// 32, Q4_0's 4 slices of nibbles at 64 (320 bytes a block), and for Q5_1
// Q5_0's plane of fifth bits at 320 (384 bytes). The quants are unsigned,
// so VPDPBUSD leaves isum itself; per block t = (d_w*d_x)*float(isum) +
// m_w*s_x and sum += t, legacyMinTerm's order, lane by lane, with d_x and
// s_x as f32 from aux (q81Aux). The one-row (decode) kernels are the AVX2
// ones.

// MSTEPS: the 8 slices Z8..Z15 against the 4 Q8_1 rows (quants at 4).
#define MSTEPS \
	Q8STEP4(4, Z8) \
	Q8STEP4B(8, Z9) \
	Q8STEP4(12, Z10) \
	Q8STEP4B(16, Z11) \
	Q8STEP4(20, Z12) \
	Q8STEP4B(24, Z13) \
	Q8STEP4(28, Z14) \
	Q8STEP4B(32, Z15)

// MFIN: za += (d_w*d_x)*float(zi) + m_w*s_x for the aux row at ar (d_x,
// s_x); d_w in Z16, m_w in Z17; Z24, Z25 scratch.
#define MFIN(zi, za, ar) \
	VMULPS.BCST (ar), Z16, Z24 \
	VCVTDQ2PS zi, zi \
	VMULPS zi, Z24, Z24 \
	VMULPS.BCST 4(ar), Z17, Z25 \
	VADDPS Z25, Z24, Z24 \
	VADDPS Z24, za, za

#define MFIN4 FIN4BY(MFIN)

#define NEXTM4(wb) NEXTX4(wb, 36)

// func gemmQ41P4(w *byte, nb int, x *byte, xstride uintptr, aux *q81Aux, auxstride uintptr, out *float32, ostride uintptr, pf *byte)
TEXT ·gemmQ41P4(SB), NOSPLIT, $0-72
	SETUP4
	MOVL $0x0f0f0f0f, AX
	VPBROADCASTD AX, Z18
	TESTQ CX, CX
	JZ    q41p4done
q41p4loop:
	VCVTPH2PS (SI), Z16
	VCVTPH2PS 32(SI), Z17
	Q4SPLIT4(64)
	ZERO4
	PF5(0)
	MSTEPS
	MFIN4
	NEXTM4(320)
	DECQ CX
	JNZ  q41p4loop
q41p4done:
	STORE4
	RET

// func gemmQ51P4(w *byte, nb int, x *byte, xstride uintptr, aux *q81Aux, auxstride uintptr, out *float32, ostride uintptr, pf *byte)
TEXT ·gemmQ51P4(SB), NOSPLIT, $0-72
	SETUP4
	MOVL $0x0f0f0f0f, AX
	VPBROADCASTD AX, Z18
	VPBROADCASTD q5x10<>(SB), Z28
	TESTQ CX, CX
	JZ    q51p4done
q51p4loop:
	VCVTPH2PS (SI), Z16
	VCVTPH2PS 32(SI), Z17
	Q4SPLIT4(64)
	Q5HIGHAT(320)
	ZERO4
	PF5(0)
	PF1(5)
	MSTEPS
	MFIN4
	NEXTM4(384)
	DECQ CX
	JNZ  q51p4loop
q51p4done:
	STORE4
	RET

// F32 kernels with 16-lane accumulators, for rows whose length is a multiple
// of 16: one accumulator per output element, FMA over k in steps of 16, folded
// to 8 lanes (a[i]+a[i+8]) and reduced as ((b0+b1)+(b2+b3)) + ((b4+b5)+(b6+b7)).
// Both kernels use that order, so an element's bits do not depend on which one
// computed it.

// FOLD4(z0, z1, z2, z3, y0.., x0, off): reduce 4 accumulators to 4 floats at off(R8).
#define FOLD4(z0, z1, z2, z3, y0, y1, y2, y3, x0, x1, off) \
	VEXTRACTF32X8 $1, z0, Y28 \
	VADDPS Y28, y0, y0 \
	VEXTRACTF32X8 $1, z1, Y29 \
	VADDPS Y29, y1, y1 \
	VEXTRACTF32X8 $1, z2, Y30 \
	VADDPS Y30, y2, y2 \
	VEXTRACTF32X8 $1, z3, Y31 \
	VADDPS Y31, y3, y3 \
	VHADDPS y1, y0, y0 \
	VHADDPS y3, y2, y2 \
	VHADDPS y2, y0, y0 \
	VEXTRACTF128 $1, y0, x1 \
	VADDPS x1, x0, x0 \
	VMOVUPS x0, off(R8)

// func dot4x4F32Z(w *byte, wstride uintptr, x *float32, xstride uintptr, n int, out *[16]float32)
// 4 F32 weight rows (w + i*wstride bytes) by 4 activation rows (x + j*xstride
// bytes) over n (a multiple of 16) elements; out[4*j+i].
TEXT ·dot4x4F32Z(SB), NOSPLIT, $0-48
	MOVQ w+0(FP), SI
	MOVQ wstride+8(FP), BX
	MOVQ x+16(FP), DI
	MOVQ xstride+24(FP), DX
	MOVQ n+32(FP), CX
	MOVQ out+40(FP), R8
	LEAQ (SI)(BX*1), R9
	LEAQ (R9)(BX*1), R10
	LEAQ (R10)(BX*1), R11
	LEAQ (DI)(DX*1), R12
	LEAQ (R12)(DX*1), R13
	LEAQ (R13)(DX*1), DX
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	VPXORD Z6, Z6, Z6
	VPXORD Z7, Z7, Z7
	VPXORD Z8, Z8, Z8
	VPXORD Z9, Z9, Z9
	VPXORD Z10, Z10, Z10
	VPXORD Z11, Z11, Z11
	VPXORD Z12, Z12, Z12
	VPXORD Z13, Z13, Z13
	VPXORD Z14, Z14, Z14
	VPXORD Z15, Z15, Z15
	SHRQ $4, CX
	JZ   d44zdone
	XORQ AX, AX
d44zloop:
	VMOVUPS (DI)(AX*1), Z16
	VMOVUPS (R12)(AX*1), Z17
	VMOVUPS (R13)(AX*1), Z18
	VMOVUPS (DX)(AX*1), Z19
	VMOVUPS (SI)(AX*1), Z20
	VFMADD231PS Z20, Z16, Z0
	VFMADD231PS Z20, Z17, Z4
	VFMADD231PS Z20, Z18, Z8
	VFMADD231PS Z20, Z19, Z12
	VMOVUPS (R9)(AX*1), Z20
	VFMADD231PS Z20, Z16, Z1
	VFMADD231PS Z20, Z17, Z5
	VFMADD231PS Z20, Z18, Z9
	VFMADD231PS Z20, Z19, Z13
	VMOVUPS (R10)(AX*1), Z20
	VFMADD231PS Z20, Z16, Z2
	VFMADD231PS Z20, Z17, Z6
	VFMADD231PS Z20, Z18, Z10
	VFMADD231PS Z20, Z19, Z14
	VMOVUPS (R11)(AX*1), Z20
	VFMADD231PS Z20, Z16, Z3
	VFMADD231PS Z20, Z17, Z7
	VFMADD231PS Z20, Z18, Z11
	VFMADD231PS Z20, Z19, Z15
	ADDQ $64, AX
	DECQ CX
	JNZ  d44zloop
d44zdone:
	FOLD4(Z0, Z1, Z2, Z3, Y0, Y1, Y2, Y3, X0, X1, 0)
	FOLD4(Z4, Z5, Z6, Z7, Y4, Y5, Y6, Y7, X4, X5, 16)
	FOLD4(Z8, Z9, Z10, Z11, Y8, Y9, Y10, Y11, X8, X9, 32)
	FOLD4(Z12, Z13, Z14, Z15, Y12, Y13, Y14, Y15, X12, X13, 48)
	VZEROUPPER
	RET

// func dotRowsF32Z(w *byte, wstride uintptr, x *float32, n int, blocks int, out *float32)
// blocks consecutive blocks of 4 F32 weight rows (block b's rows at w +
// (4*b+i)*wstride bytes; wstride 0 repeats one row) against one activation
// row over n (a multiple of 16) elements, out[4*b+i]: a decode step's whole
// row range in one call, or one block of a batch's lone rows. Blocks go in
// pairs while two are left (8 independent FMA chains, each row's arithmetic
// the same), the next pair asked into L2 meanwhile (as dotRowsF16AVX does).
// On one Zen 4 core, BenchmarkMatMul/F32 decode-vocab went 14-16 -> 20-22
// GB/s with the hints and 24-25 in pairs (decode-dram 20-22 -> 26-29 ->
// 30-31); smollm2-135m F32 decode, one thread, 27.6-28 -> 35.8-38.5 ->
// 43.8-45.8 tokens/s (llama.cpp 42.3-43.9 beside it).
TEXT ·dotRowsF32Z(SB), NOSPLIT, $0-48
	MOVQ w+0(FP), SI
	MOVQ wstride+8(FP), BX
	MOVQ x+16(FP), DI
	MOVQ out+40(FP), R8
	CMPQ blocks+32(FP), $2
	JLT  drzone
drzpair:
	MOVQ n+24(FP), CX
	LEAQ (SI)(BX*1), R9
	LEAQ (R9)(BX*1), R10
	LEAQ (R10)(BX*1), R11
	LEAQ (R11)(BX*1), R12
	LEAQ (R12)(BX*1), R13
	LEAQ (R13)(BX*1), R14
	LEAQ (R14)(BX*1), R15
	LEAQ (R15)(BX*1), DX
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	VPXORD Z6, Z6, Z6
	VPXORD Z7, Z7, Z7
	SHRQ $4, CX
	JZ   drzpfold
	XORQ AX, AX
drzploop:
	PREFETCHT1 (DX)(AX*8)
	PREFETCHT1 64(DX)(AX*8)
	PREFETCHT1 128(DX)(AX*8)
	PREFETCHT1 192(DX)(AX*8)
	PREFETCHT1 256(DX)(AX*8)
	PREFETCHT1 320(DX)(AX*8)
	PREFETCHT1 384(DX)(AX*8)
	PREFETCHT1 448(DX)(AX*8)
	VMOVUPS (DI)(AX*1), Z16
	VFMADD231PS (SI)(AX*1), Z16, Z0
	VFMADD231PS (R9)(AX*1), Z16, Z1
	VFMADD231PS (R10)(AX*1), Z16, Z2
	VFMADD231PS (R11)(AX*1), Z16, Z3
	VFMADD231PS (R12)(AX*1), Z16, Z4
	VFMADD231PS (R13)(AX*1), Z16, Z5
	VFMADD231PS (R14)(AX*1), Z16, Z6
	VFMADD231PS (R15)(AX*1), Z16, Z7
	ADDQ $64, AX
	DECQ CX
	JNZ  drzploop
drzpfold:
	FOLD4(Z0, Z1, Z2, Z3, Y0, Y1, Y2, Y3, X0, X1, 0)
	FOLD4(Z4, Z5, Z6, Z7, Y4, Y5, Y6, Y7, X4, X5, 16)
	MOVQ DX, SI
	ADDQ $32, R8
	SUBQ $2, blocks+32(FP)
	CMPQ blocks+32(FP), $2
	JGE  drzpair
drzone:
	CMPQ blocks+32(FP), $0
	JEQ  drzend
	MOVQ n+24(FP), CX
	LEAQ (SI)(BX*1), R9
	LEAQ (R9)(BX*1), R10
	LEAQ (R10)(BX*1), R11
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	SHRQ $4, CX
	JZ   drzfold
	XORQ AX, AX
drzloop:
	VMOVUPS (DI)(AX*1), Z16
	VFMADD231PS (SI)(AX*1), Z16, Z0
	VFMADD231PS (R9)(AX*1), Z16, Z1
	VFMADD231PS (R10)(AX*1), Z16, Z2
	VFMADD231PS (R11)(AX*1), Z16, Z3
	ADDQ $64, AX
	DECQ CX
	JNZ  drzloop
drzfold:
	FOLD4(Z0, Z1, Z2, Z3, Y0, Y1, Y2, Y3, X0, X1, 0)
drzend:
	VZEROUPPER
	RET

// func quantQ81AVX512(dst *byte, x *float32, nb int, aux *q81Aux)
// Q8_1 blocks of x, bitwise as quantizeQ8_1: Q8ROUND5's quants and d, and
// s = float32(sum(q))*d as f16; with aux non-nil, also each block's d and s
// as the f32 of their halves (matJob.prepRows's q81Aux).
TEXT ·quantQ81AVX512(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ nb+16(FP), CX
	MOVQ aux+24(FP), DX
	Q8CONST5
	TESTQ CX, CX
	JZ    qq81done
qq81loop:
	Q8ROUND5
	VPEXTRW $0, X8, (DI)
	VPMOVSDB Z0, 4(DI)
	VPMOVSDB Z1, 20(DI)
	Q8ISUM5
	VCVTDQ2PS X2, X2
	VMULSS X4, X2, X2
	VCVTPS2PH $0, X2, X9
	VPEXTRW $0, X9, 2(DI)
	TESTQ DX, DX
	JZ    qq81next
	VCVTPH2PS X8, X10
	VMOVSS X10, (DX)
	VCVTPH2PS X9, X10
	VMOVSS X10, 4(DX)
	ADDQ $8, DX
qq81next:
	ADDQ $128, SI
	ADDQ $36, DI
	DECQ CX
	JNZ  qq81loop
qq81done:
	VZEROUPPER
	RET

// func quantQ8KAVX512(dst *q8K, x *float32, nb int)
// Q8_K blocks of x, bitwise as quantizeQ8K: the first element of largest
// magnitude sets iscale = -127/max; q = round to nearest even of iscale*x
// (VCVTPS2DQ; 0 where that is NaN, as quantizeQ8K), at most 127; d =
// 1/iscale; bsums the sums of each 16 quants, one vector's. A block of
// zeros is written as zeros; a block with a NaN (the largest |x| is taken
// on the bits, VPMAXSD, as absMax, so a NaN beats every number) as zeros
// with d that NaN. x is held in Z0-Z15, one block at a time.
TEXT ·quantQ8KAVX512(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ nb+16(FP), CX
	VPBROADCASTD q8absmask<>(SB), Z16
	MOVL $0xc2fe0000, AX // -127
	VMOVD AX, X24
	MOVL $127, AX
	VPBROADCASTD AX, Z23
	VPXORD Z25, Z25, Z25
	TESTQ CX, CX
	JZ    qq8kdone
qq8kloop:
	VMOVUPS 0(SI), Z0
	VMOVUPS 64(SI), Z1
	VMOVUPS 128(SI), Z2
	VMOVUPS 192(SI), Z3
	VMOVUPS 256(SI), Z4
	VMOVUPS 320(SI), Z5
	VMOVUPS 384(SI), Z6
	VMOVUPS 448(SI), Z7
	VMOVUPS 512(SI), Z8
	VMOVUPS 576(SI), Z9
	VMOVUPS 640(SI), Z10
	VMOVUPS 704(SI), Z11
	VMOVUPS 768(SI), Z12
	VMOVUPS 832(SI), Z13
	VMOVUPS 896(SI), Z14
	VMOVUPS 960(SI), Z15
	VPXORD Z17, Z17, Z17
	VANDPS Z16, Z0, Z18
	VPMAXSD Z18, Z17, Z17
	VANDPS Z16, Z1, Z18
	VPMAXSD Z18, Z17, Z17
	VANDPS Z16, Z2, Z18
	VPMAXSD Z18, Z17, Z17
	VANDPS Z16, Z3, Z18
	VPMAXSD Z18, Z17, Z17
	VANDPS Z16, Z4, Z18
	VPMAXSD Z18, Z17, Z17
	VANDPS Z16, Z5, Z18
	VPMAXSD Z18, Z17, Z17
	VANDPS Z16, Z6, Z18
	VPMAXSD Z18, Z17, Z17
	VANDPS Z16, Z7, Z18
	VPMAXSD Z18, Z17, Z17
	VANDPS Z16, Z8, Z18
	VPMAXSD Z18, Z17, Z17
	VANDPS Z16, Z9, Z18
	VPMAXSD Z18, Z17, Z17
	VANDPS Z16, Z10, Z18
	VPMAXSD Z18, Z17, Z17
	VANDPS Z16, Z11, Z18
	VPMAXSD Z18, Z17, Z17
	VANDPS Z16, Z12, Z18
	VPMAXSD Z18, Z17, Z17
	VANDPS Z16, Z13, Z18
	VPMAXSD Z18, Z17, Z17
	VANDPS Z16, Z14, Z18
	VPMAXSD Z18, Z17, Z17
	VANDPS Z16, Z15, Z18
	VPMAXSD Z18, Z17, Z17
	VEXTRACTF32X8 $1, Z17, Y18
	VPMAXSD Y18, Y17, Y17
	VEXTRACTF32X4 $1, Y17, X18
	VPMAXSD X18, X17, X17
	VPERMILPS $0x4e, X17, X18
	VPMAXSD X18, X17, X17
	VPERMILPS $0xb1, X17, X18
	VPMAXSD X18, X17, X17
	VUCOMISS X17, X17
	JPS   qq8knan
	VUCOMISS X25, X17
	JEQ   qq8kzero
	VBROADCASTSS X17, Z17
	XORL R9, R9
	VANDPS Z16, Z15, Z18
	VCMPPS $0, Z17, Z18, K1
	KMOVW K1, AX
	TZCNTL AX, BX
	ADDL $240, BX
	TESTL AX, AX
	CMOVLNE BX, R9
	VANDPS Z16, Z14, Z18
	VCMPPS $0, Z17, Z18, K1
	KMOVW K1, AX
	TZCNTL AX, BX
	ADDL $224, BX
	TESTL AX, AX
	CMOVLNE BX, R9
	VANDPS Z16, Z13, Z18
	VCMPPS $0, Z17, Z18, K1
	KMOVW K1, AX
	TZCNTL AX, BX
	ADDL $208, BX
	TESTL AX, AX
	CMOVLNE BX, R9
	VANDPS Z16, Z12, Z18
	VCMPPS $0, Z17, Z18, K1
	KMOVW K1, AX
	TZCNTL AX, BX
	ADDL $192, BX
	TESTL AX, AX
	CMOVLNE BX, R9
	VANDPS Z16, Z11, Z18
	VCMPPS $0, Z17, Z18, K1
	KMOVW K1, AX
	TZCNTL AX, BX
	ADDL $176, BX
	TESTL AX, AX
	CMOVLNE BX, R9
	VANDPS Z16, Z10, Z18
	VCMPPS $0, Z17, Z18, K1
	KMOVW K1, AX
	TZCNTL AX, BX
	ADDL $160, BX
	TESTL AX, AX
	CMOVLNE BX, R9
	VANDPS Z16, Z9, Z18
	VCMPPS $0, Z17, Z18, K1
	KMOVW K1, AX
	TZCNTL AX, BX
	ADDL $144, BX
	TESTL AX, AX
	CMOVLNE BX, R9
	VANDPS Z16, Z8, Z18
	VCMPPS $0, Z17, Z18, K1
	KMOVW K1, AX
	TZCNTL AX, BX
	ADDL $128, BX
	TESTL AX, AX
	CMOVLNE BX, R9
	VANDPS Z16, Z7, Z18
	VCMPPS $0, Z17, Z18, K1
	KMOVW K1, AX
	TZCNTL AX, BX
	ADDL $112, BX
	TESTL AX, AX
	CMOVLNE BX, R9
	VANDPS Z16, Z6, Z18
	VCMPPS $0, Z17, Z18, K1
	KMOVW K1, AX
	TZCNTL AX, BX
	ADDL $96, BX
	TESTL AX, AX
	CMOVLNE BX, R9
	VANDPS Z16, Z5, Z18
	VCMPPS $0, Z17, Z18, K1
	KMOVW K1, AX
	TZCNTL AX, BX
	ADDL $80, BX
	TESTL AX, AX
	CMOVLNE BX, R9
	VANDPS Z16, Z4, Z18
	VCMPPS $0, Z17, Z18, K1
	KMOVW K1, AX
	TZCNTL AX, BX
	ADDL $64, BX
	TESTL AX, AX
	CMOVLNE BX, R9
	VANDPS Z16, Z3, Z18
	VCMPPS $0, Z17, Z18, K1
	KMOVW K1, AX
	TZCNTL AX, BX
	ADDL $48, BX
	TESTL AX, AX
	CMOVLNE BX, R9
	VANDPS Z16, Z2, Z18
	VCMPPS $0, Z17, Z18, K1
	KMOVW K1, AX
	TZCNTL AX, BX
	ADDL $32, BX
	TESTL AX, AX
	CMOVLNE BX, R9
	VANDPS Z16, Z1, Z18
	VCMPPS $0, Z17, Z18, K1
	KMOVW K1, AX
	TZCNTL AX, BX
	ADDL $16, BX
	TESTL AX, AX
	CMOVLNE BX, R9
	VANDPS Z16, Z0, Z18
	VCMPPS $0, Z17, Z18, K1
	KMOVW K1, AX
	TZCNTL AX, BX
	ADDL $0, BX
	TESTL AX, AX
	CMOVLNE BX, R9
	VMOVSS (SI)(R9*4), X20   // the first element of largest magnitude
	VDIVSS X20, X24, X21      // iscale = -127/max
	MOVL $0x3f800000, AX
	VMOVD AX, X22
	VDIVSS X21, X22, X22      // d = 1/iscale
	VMOVSS X22, (DI)
	VBROADCASTSS X21, Z21
	VMULPS Z21, Z0, Z0
	VCMPPS $7, Z0, Z0, K2
	VCVTPS2DQ.Z Z0, K2, Z0
	VPMINSD Z23, Z0, Z0
	VPMOVSDB Z0, 4(DI)
	Q8KBSUM(Z0, Y0, X0, 260)
	VMULPS Z21, Z1, Z1
	VCMPPS $7, Z1, Z1, K2
	VCVTPS2DQ.Z Z1, K2, Z1
	VPMINSD Z23, Z1, Z1
	VPMOVSDB Z1, 20(DI)
	Q8KBSUM(Z1, Y1, X1, 262)
	VMULPS Z21, Z2, Z2
	VCMPPS $7, Z2, Z2, K2
	VCVTPS2DQ.Z Z2, K2, Z2
	VPMINSD Z23, Z2, Z2
	VPMOVSDB Z2, 36(DI)
	Q8KBSUM(Z2, Y2, X2, 264)
	VMULPS Z21, Z3, Z3
	VCMPPS $7, Z3, Z3, K2
	VCVTPS2DQ.Z Z3, K2, Z3
	VPMINSD Z23, Z3, Z3
	VPMOVSDB Z3, 52(DI)
	Q8KBSUM(Z3, Y3, X3, 266)
	VMULPS Z21, Z4, Z4
	VCMPPS $7, Z4, Z4, K2
	VCVTPS2DQ.Z Z4, K2, Z4
	VPMINSD Z23, Z4, Z4
	VPMOVSDB Z4, 68(DI)
	Q8KBSUM(Z4, Y4, X4, 268)
	VMULPS Z21, Z5, Z5
	VCMPPS $7, Z5, Z5, K2
	VCVTPS2DQ.Z Z5, K2, Z5
	VPMINSD Z23, Z5, Z5
	VPMOVSDB Z5, 84(DI)
	Q8KBSUM(Z5, Y5, X5, 270)
	VMULPS Z21, Z6, Z6
	VCMPPS $7, Z6, Z6, K2
	VCVTPS2DQ.Z Z6, K2, Z6
	VPMINSD Z23, Z6, Z6
	VPMOVSDB Z6, 100(DI)
	Q8KBSUM(Z6, Y6, X6, 272)
	VMULPS Z21, Z7, Z7
	VCMPPS $7, Z7, Z7, K2
	VCVTPS2DQ.Z Z7, K2, Z7
	VPMINSD Z23, Z7, Z7
	VPMOVSDB Z7, 116(DI)
	Q8KBSUM(Z7, Y7, X7, 274)
	VMULPS Z21, Z8, Z8
	VCMPPS $7, Z8, Z8, K2
	VCVTPS2DQ.Z Z8, K2, Z8
	VPMINSD Z23, Z8, Z8
	VPMOVSDB Z8, 132(DI)
	Q8KBSUM(Z8, Y8, X8, 276)
	VMULPS Z21, Z9, Z9
	VCMPPS $7, Z9, Z9, K2
	VCVTPS2DQ.Z Z9, K2, Z9
	VPMINSD Z23, Z9, Z9
	VPMOVSDB Z9, 148(DI)
	Q8KBSUM(Z9, Y9, X9, 278)
	VMULPS Z21, Z10, Z10
	VCMPPS $7, Z10, Z10, K2
	VCVTPS2DQ.Z Z10, K2, Z10
	VPMINSD Z23, Z10, Z10
	VPMOVSDB Z10, 164(DI)
	Q8KBSUM(Z10, Y10, X10, 280)
	VMULPS Z21, Z11, Z11
	VCMPPS $7, Z11, Z11, K2
	VCVTPS2DQ.Z Z11, K2, Z11
	VPMINSD Z23, Z11, Z11
	VPMOVSDB Z11, 180(DI)
	Q8KBSUM(Z11, Y11, X11, 282)
	VMULPS Z21, Z12, Z12
	VCMPPS $7, Z12, Z12, K2
	VCVTPS2DQ.Z Z12, K2, Z12
	VPMINSD Z23, Z12, Z12
	VPMOVSDB Z12, 196(DI)
	Q8KBSUM(Z12, Y12, X12, 284)
	VMULPS Z21, Z13, Z13
	VCMPPS $7, Z13, Z13, K2
	VCVTPS2DQ.Z Z13, K2, Z13
	VPMINSD Z23, Z13, Z13
	VPMOVSDB Z13, 212(DI)
	Q8KBSUM(Z13, Y13, X13, 286)
	VMULPS Z21, Z14, Z14
	VCMPPS $7, Z14, Z14, K2
	VCVTPS2DQ.Z Z14, K2, Z14
	VPMINSD Z23, Z14, Z14
	VPMOVSDB Z14, 228(DI)
	Q8KBSUM(Z14, Y14, X14, 288)
	VMULPS Z21, Z15, Z15
	VCMPPS $7, Z15, Z15, K2
	VCVTPS2DQ.Z Z15, K2, Z15
	VPMINSD Z23, Z15, Z15
	VPMOVSDB Z15, 244(DI)
	Q8KBSUM(Z15, Y15, X15, 290)
	JMP   qq8knext
qq8knan:
	VMOVD X17, AX // d = amax, the NaN; the rest zero
	JMP   qq8kstore
qq8kzero:
	XORL AX, AX
qq8kstore:
	VMOVDQU64 Z25, (DI)
	VMOVDQU64 Z25, 64(DI)
	VMOVDQU64 Z25, 128(DI)
	VMOVDQU64 Z25, 192(DI)
	VMOVDQU32 Y25, 256(DI)
	MOVL $0, 288(DI)
	MOVL AX, (DI)
qq8knext:
	ADDQ $1024, SI
	ADDQ $292, DI
	DECQ CX
	JNZ  qq8kloop
qq8kdone:
	VZEROUPPER
	RET

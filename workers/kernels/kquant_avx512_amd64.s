//go:build amd64 && !purego

#include "textflag.h"
#include "prefetch_amd64.h"
#include "avx512_amd64.h"

// AVX-512 VNNI kernels for K-quant weights repacked into 16-row groups
// (repack.go), dotted with Q8_K activations (292-byte q8K blocks) and their
// side data (96-byte q8KAux: d, the 32-element sum pairs, 32 times the
// 16-element sums). P4 kernels take 4 activation rows, P1 kernels one: Q4_K,
// Q6_K, IQ4_XS, Q5_K, Q3_K and Q2_K have both; Q3_K has a P8 kernel too. Per super-block every integer sum is exact and the float
// updates are the portable kernels' (dotQ4KGo, dotQ6KGo, ...), lane by lane,
// so each row's result is bitwise equal to them. Sub-blocks are unrolled
// through macros.

DATA kq0f<>+0(SB)/4, $0x0f0f0f0f
GLOBL kq0f<>(SB), RODATA, $4
DATA kq30<>+0(SB)/4, $0x30303030
GLOBL kq30<>(SB), RODATA, $4

// Decode (P1) kernels read each super-block in address order (Q4_K's d,
// dmin and mins first) and ask for nothing ahead: the hardware prefetcher
// then keeps the stream flowing. Q4_K's kernel had read its mins and d after
// the quants, with hints two super-blocks ahead, and drew 12-20 GB/s from
// DRAM on one Zen 4 core; in order and without hints, 19-32
// (BenchmarkMatMul/Q4_K/decode-dram). Q6_K's likewise.

// SETUPK loads a 4-row kernel's arguments: SI weights, CX super-blocks,
// DI/R8/R9/R10 activation rows, DX/R11/R12/R13 their side data. Each 4-row
// kernel then loads R14, the bytes to prefetch (prefetch_amd64.h).
#define SETUPK \
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
	VPXORD Z0, Z0, Z0 \
	VPXORD Z1, Z1, Z1 \
	VPXORD Z2, Z2, Z2 \
	VPXORD Z3, Z3, Z3 \
	VPBROADCASTD kq0f<>(SB), Z18 \
	VPBROADCASTD kq30<>(SB), Z28

#define STOREK \
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

// DP4: the slice in zw times 4 activation bytes at off of each row, into
// Z24..Z27.
#define DP4(off, zw) \
	VPDPBUSD.BCST off(DI), zw, Z24 \
	VPDPBUSD.BCST off(R8), zw, Z25 \
	VPDPBUSD.BCST off(R9), zw, Z26 \
	VPDPBUSD.BCST off(R10), zw, Z27

#define ZP4 \
	VPXORD Z24, Z24, Z24 \
	VPXORD Z25, Z25, Z25 \
	VPXORD Z26, Z26, Z26 \
	VPXORD Z27, Z27, Z27

// SC4: Z4..Z7 += Z19 * Z24..Z27 (int32 lanes).
#define SC4 \
	VPMULLD Z19, Z24, Z24 \
	VPMULLD Z19, Z25, Z25 \
	VPMULLD Z19, Z26, Z26 \
	VPMULLD Z19, Z27, Z27 \
	VPADDD Z24, Z4, Z4 \
	VPADDD Z25, Z5, Z5 \
	VPADDD Z26, Z6, Z6 \
	VPADDD Z27, Z7, Z7

// FADD: za += (zd * d_x) * float(zi); FSUB: za -= ...; d_x is the f32 at 0(ar).
#define FADD(zi, zd, za, ar) \
	VCVTDQ2PS zi, zi \
	VMULPS.BCST (ar), zd, Z29 \
	VMULPS zi, Z29, Z29 \
	VADDPS Z29, za, za

#define FSUB(zi, zd, za, ar) \
	VCVTDQ2PS zi, zi \
	VMULPS.BCST (ar), zd, Z29 \
	VMULPS zi, Z29, Z29 \
	VSUBPS Z29, za, za

#define NEXTK(wb) \
	ADDQ $wb, SI \
	ADDQ $292, DI \
	ADDQ $292, R8 \
	ADDQ $292, R9 \
	ADDQ $292, R10 \
	ADDQ $96, DX \
	ADDQ $96, R11 \
	ADDQ $96, R12 \
	ADDQ $96, R13

// Q4K8: the 8 slices of chunk j's low (Q4K8LO) or high (Q4K8HI) nibbles
// (sub-block 2j or 2j+1) into Z8..Z15.
#define Q4K8LO(j) \
	VPANDD (320+512*j)(SI), Z18, Z8 \
	VPANDD (320+512*j+64)(SI), Z18, Z9 \
	VPANDD (320+512*j+128)(SI), Z18, Z10 \
	VPANDD (320+512*j+192)(SI), Z18, Z11 \
	VPANDD (320+512*j+256)(SI), Z18, Z12 \
	VPANDD (320+512*j+320)(SI), Z18, Z13 \
	VPANDD (320+512*j+384)(SI), Z18, Z14 \
	VPANDD (320+512*j+448)(SI), Z18, Z15
#define Q4K8HI(j) \
	VPSRLW $4, (320+512*j+0)(SI), Z8 \
	VPANDD Z18, Z8, Z8 \
	VPSRLW $4, (320+512*j+64)(SI), Z9 \
	VPANDD Z18, Z9, Z9 \
	VPSRLW $4, (320+512*j+128)(SI), Z10 \
	VPANDD Z18, Z10, Z10 \
	VPSRLW $4, (320+512*j+192)(SI), Z11 \
	VPANDD Z18, Z11, Z11 \
	VPSRLW $4, (320+512*j+256)(SI), Z12 \
	VPANDD Z18, Z12, Z12 \
	VPSRLW $4, (320+512*j+320)(SI), Z13 \
	VPANDD Z18, Z13, Z13 \
	VPSRLW $4, (320+512*j+384)(SI), Z14 \
	VPANDD Z18, Z14, Z14 \
	VPSRLW $4, (320+512*j+448)(SI), Z15 \
	VPANDD Z18, Z15, Z15
// Q4KSUB4: sub-block sub (chunk j, half h) for 4 activation rows, its
// slices already in Z8..Z15: exact dot products, times the scales, into Z4..Z7.
#define Q4KSUB4(j, h, sub) \
	ZP4 \
	DP4((4+64*j+32*h), Z8) \
	DP4((8+64*j+32*h), Z9) \
	DP4((12+64*j+32*h), Z10) \
	DP4((16+64*j+32*h), Z11) \
	DP4((20+64*j+32*h), Z12) \
	DP4((24+64*j+32*h), Z13) \
	DP4((28+64*j+32*h), Z14) \
	DP4((32+64*j+32*h), Z15) \
	VPMOVZXBD (64+16*sub)(SI), Z19 \
	SC4

// Q4KSUB1: the same for one activation row, in two chains, into Z4.
#define Q4KSUB1(j, h, sub) \
	VPXORD Z24, Z24, Z24 \
	VPXORD Z25, Z25, Z25 \
	VPDPBUSD.BCST (4+64*j+32*h)(DI), Z8, Z24 \
	VPDPBUSD.BCST (8+64*j+32*h)(DI), Z9, Z25 \
	VPDPBUSD.BCST (12+64*j+32*h)(DI), Z10, Z24 \
	VPDPBUSD.BCST (16+64*j+32*h)(DI), Z11, Z25 \
	VPDPBUSD.BCST (20+64*j+32*h)(DI), Z12, Z24 \
	VPDPBUSD.BCST (24+64*j+32*h)(DI), Z13, Z25 \
	VPDPBUSD.BCST (28+64*j+32*h)(DI), Z14, Z24 \
	VPDPBUSD.BCST (32+64*j+32*h)(DI), Z15, Z25 \
	VPADDD Z25, Z24, Z24 \
	VPMOVZXBD (64+16*sub)(SI), Z19 \
	VPMULLD Z19, Z24, Z24 \
	VPADDD Z24, Z4, Z4

// func gemmQ4KP4(w *byte, nb int, x *q8K, xstride uintptr, aux *q8KAux, auxstride uintptr, out *float32, ostride uintptr, pf *byte)
TEXT ·gemmQ4KP4(SB), NOSPLIT, $0-72
	SETUPK
	MOVQ pf+64(FP), R14
	TESTQ CX, CX
	JZ    q4kp4done
q4kp4loop:
	ZERO4
	Q4K8LO(0)
	Q4KSUB4(0, 0, 0)
	PF5(0)
	Q4K8HI(0)
	Q4KSUB4(0, 1, 1)
	PF5(5)
	Q4K8LO(1)
	Q4KSUB4(1, 0, 2)
	PF5(10)
	Q4K8HI(1)
	Q4KSUB4(1, 1, 3)
	PF5(15)
	Q4K8LO(2)
	Q4KSUB4(2, 0, 4)
	PF5(20)
	Q4K8HI(2)
	Q4KSUB4(2, 1, 5)
	PF5(25)
	Q4K8LO(3)
	Q4KSUB4(3, 0, 6)
	PF5(30)
	Q4K8HI(3)
	Q4KSUB4(3, 1, 7)
	PF3(35)
	// mins (byte pairs made int16) times the 32-element sums of x (int16 pairs)
	VPMOVZXBW 192(SI), Z19
	VPDPWSSD.BCST 16(DX), Z19, Z20
	VPDPWSSD.BCST 16(R11), Z19, Z21
	VPDPWSSD.BCST 16(R12), Z19, Z22
	VPDPWSSD.BCST 16(R13), Z19, Z23
	VPMOVZXBW 224(SI), Z19
	VPDPWSSD.BCST 20(DX), Z19, Z20
	VPDPWSSD.BCST 20(R11), Z19, Z21
	VPDPWSSD.BCST 20(R12), Z19, Z22
	VPDPWSSD.BCST 20(R13), Z19, Z23
	VPMOVZXBW 256(SI), Z19
	VPDPWSSD.BCST 24(DX), Z19, Z20
	VPDPWSSD.BCST 24(R11), Z19, Z21
	VPDPWSSD.BCST 24(R12), Z19, Z22
	VPDPWSSD.BCST 24(R13), Z19, Z23
	VPMOVZXBW 288(SI), Z19
	VPDPWSSD.BCST 28(DX), Z19, Z20
	VPDPWSSD.BCST 28(R11), Z19, Z21
	VPDPWSSD.BCST 28(R12), Z19, Z22
	VPDPWSSD.BCST 28(R13), Z19, Z23
	VCVTPH2PS (SI), Z16
	VCVTPH2PS 32(SI), Z17
	FADD(Z4, Z16, Z0, DX)
	FSUB(Z20, Z17, Z0, DX)
	FADD(Z5, Z16, Z1, R11)
	FSUB(Z21, Z17, Z1, R11)
	FADD(Z6, Z16, Z2, R12)
	FSUB(Z22, Z17, Z2, R12)
	FADD(Z7, Z16, Z3, R13)
	FSUB(Z23, Z17, Z3, R13)
	NEXTK(2368)
	ADDQ $2368, R14
	DECQ CX
	JNZ  q4kp4loop
q4kp4done:
	STOREK
	RET

// func gemmQ4KP1(w *byte, nb int, x *q8K, aux *q8KAux, out *float32)
TEXT ·gemmQ4KP1(SB), NOSPLIT, $0-40
	MOVQ w+0(FP), SI
	MOVQ nb+8(FP), CX
	MOVQ x+16(FP), DI
	MOVQ aux+24(FP), DX
	VPXORD Z0, Z0, Z0
	VPBROADCASTD kq0f<>(SB), Z18
	TESTQ CX, CX
	JZ    q4kp1done
q4kp1loop:
	VPXORD Z4, Z4, Z4
	VPXORD Z20, Z20, Z20
	VCVTPH2PS (SI), Z16
	VCVTPH2PS 32(SI), Z17
	VPMOVZXBW 192(SI), Z21
	VPMOVZXBW 224(SI), Z22
	VPMOVZXBW 256(SI), Z23
	VPMOVZXBW 288(SI), Z26
	Q4K8LO(0)
	Q4KSUB1(0, 0, 0)
	Q4K8HI(0)
	Q4KSUB1(0, 1, 1)
	Q4K8LO(1)
	Q4KSUB1(1, 0, 2)
	Q4K8HI(1)
	Q4KSUB1(1, 1, 3)
	Q4K8LO(2)
	Q4KSUB1(2, 0, 4)
	Q4K8HI(2)
	Q4KSUB1(2, 1, 5)
	Q4K8LO(3)
	Q4KSUB1(3, 0, 6)
	Q4K8HI(3)
	Q4KSUB1(3, 1, 7)
	VPDPWSSD.BCST 16(DX), Z21, Z20
	VPDPWSSD.BCST 20(DX), Z22, Z20
	VPDPWSSD.BCST 24(DX), Z23, Z20
	VPDPWSSD.BCST 28(DX), Z26, Z20
	FADD(Z4, Z16, Z0, DX)
	FSUB(Z20, Z17, Z0, DX)
	ADDQ $2368, SI
	ADDQ $292, DI
	ADDQ $96, DX
	DECQ CX
	JNZ  q4kp1loop
q4kp1done:
	MOVQ out+32(FP), AX
	VMOVUPS Z0, (AX)
	VZEROUPPER
	RET

// Q6K4: sub-block sb's 16 six-bit quants per row into za, zb, zc, zd (the
// four 4-element slices): two nibble planes, then the 2-bit plane, slice k's
// bits at 2k, moved to bits 4..5 and or-ed in (VPTERNLOGD $0xf8: a | b&c).
// Z18 holds 0x0f bytes, Z28 0x30 bytes; Z30, Z31 are scratch.
#define Q6K4(sb, za, zb, zc, zd) \
	VMOVDQU32 (288+192*sb)(SI), za \
	VPSRLW $4, za, zb \
	VPANDD Z18, za, za \
	VPANDD Z18, zb, zb \
	VMOVDQU32 (288+192*sb+64)(SI), zc \
	VPSRLW $4, zc, zd \
	VPANDD Z18, zc, zc \
	VPANDD Z18, zd, zd \
	VMOVDQU32 (288+192*sb+128)(SI), Z30 \
	VPSLLW $4, Z30, Z31 \
	VPTERNLOGD $0xf8, Z28, Z31, za \
	VPSLLW $2, Z30, Z31 \
	VPTERNLOGD $0xf8, Z28, Z31, zb \
	VPTERNLOGD $0xf8, Z28, Z30, zc \
	VPSRLW $2, Z30, Z31 \
	VPTERNLOGD $0xf8, Z28, Z31, zd

// Q6KSUB4: sub-block sb for 4 activation rows: exact dot products, minus 32
// times the rows' 16-element sums, times the signed scales, into Z4..Z7.
#define Q6KSUB4(sb, za, zb, zc, zd) \
	Q6K4(sb, za, zb, zc, zd) \
	ZP4 \
	DP4((4+16*sb), za) \
	DP4((8+16*sb), zb) \
	DP4((12+16*sb), zc) \
	DP4((16+16*sb), zd) \
	VPSUBD.BCST (32+4*sb)(DX), Z24, Z24 \
	VPSUBD.BCST (32+4*sb)(R11), Z25, Z25 \
	VPSUBD.BCST (32+4*sb)(R12), Z26, Z26 \
	VPSUBD.BCST (32+4*sb)(R13), Z27, Z27 \
	VPMOVSXBD (32+16*sb)(SI), Z19 \
	SC4

// Q6KSUB1: the same for one activation row, into Z4.
#define Q6KSUB1(sb, za, zb, zc, zd, p, q) \
	Q6K4(sb, za, zb, zc, zd) \
	VPXORD p, p, p \
	VPXORD q, q, q \
	VPDPBUSD.BCST (4+16*sb)(DI), za, p \
	VPDPBUSD.BCST (8+16*sb)(DI), zb, q \
	VPDPBUSD.BCST (12+16*sb)(DI), zc, p \
	VPDPBUSD.BCST (16+16*sb)(DI), zd, q \
	VPADDD q, p, p \
	VPSUBD.BCST (32+4*sb)(DX), p, p \
	VPMOVSXBD (32+16*sb)(SI), q \
	VPMULLD q, p, p \
	VPADDD p, Z4, Z4

// Q6KTOUCH: one byte of each line of the group's scales (lines 1 to 4;
// line 0 holds d and the first sub-blocks' scales) before the products.
// Sub-block sb reads its scales at 32+16sb, after the quants of the
// sub-blocks before it: lines 1 to 4 were read out of address order, well
// after the lines around them, and the hardware prefetcher's ascending
// stream skipped them. Touched first, 1B Q6_K decode took about 5% more of
// the machine's measured read bandwidth (bulkhead bench engine's
// decode_share_of_bound, 6 alternated rounds: 0.89 to 0.93), as Q5KTOUCH did
// for Q5_K. The loads go to R15, unused.
#define Q6KTOUCH \
	MOVBLZX 64(SI), R15 \
	MOVBLZX 128(SI), R15 \
	MOVBLZX 192(SI), R15 \
	MOVBLZX 256(SI), R15

// func gemmQ6KP4(w *byte, nb int, x *q8K, xstride uintptr, aux *q8KAux, auxstride uintptr, out *float32, ostride uintptr, pf *byte)
TEXT ·gemmQ6KP4(SB), NOSPLIT, $0-72
	SETUPK
	MOVQ pf+64(FP), R14
	TESTQ CX, CX
	JZ    q6kp4done
q6kp4loop:
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	VPXORD Z6, Z6, Z6
	VPXORD Z7, Z7, Z7
	Q6KSUB4(0, Z8, Z9, Z10, Z11)
	PF4(0)
	Q6KSUB4(1, Z12, Z13, Z14, Z15)
	PF4(4)
	Q6KSUB4(2, Z8, Z9, Z10, Z11)
	PF4(8)
	Q6KSUB4(3, Z12, Z13, Z14, Z15)
	PF4(12)
	Q6KSUB4(4, Z8, Z9, Z10, Z11)
	PF4(16)
	Q6KSUB4(5, Z12, Z13, Z14, Z15)
	PF3(20)
	Q6KSUB4(6, Z8, Z9, Z10, Z11)
	PF3(23)
	Q6KSUB4(7, Z12, Z13, Z14, Z15)
	PF3(26)
	Q6KSUB4(8, Z8, Z9, Z10, Z11)
	PF3(29)
	Q6KSUB4(9, Z12, Z13, Z14, Z15)
	PF3(32)
	Q6KSUB4(10, Z8, Z9, Z10, Z11)
	PF3(35)
	Q6KSUB4(11, Z12, Z13, Z14, Z15)
	PF3(38)
	Q6KSUB4(12, Z8, Z9, Z10, Z11)
	PF3(41)
	Q6KSUB4(13, Z12, Z13, Z14, Z15)
	PF3(44)
	Q6KSUB4(14, Z8, Z9, Z10, Z11)
	PF3(47)
	Q6KSUB4(15, Z12, Z13, Z14, Z15)
	PF3(50)
	VCVTPH2PS (SI), Z16
	FADD(Z4, Z16, Z0, DX)
	FADD(Z5, Z16, Z1, R11)
	FADD(Z6, Z16, Z2, R12)
	FADD(Z7, Z16, Z3, R13)
	NEXTK(3360)
	ADDQ $3360, R14
	DECQ CX
	JNZ  q6kp4loop
q6kp4done:
	STOREK
	RET

// func gemmQ6KP1(w *byte, nb int, x *q8K, aux *q8KAux, out *float32)
TEXT ·gemmQ6KP1(SB), NOSPLIT, $0-40
	MOVQ w+0(FP), SI
	MOVQ nb+8(FP), CX
	MOVQ x+16(FP), DI
	MOVQ aux+24(FP), DX
	VPXORD Z0, Z0, Z0
	VPBROADCASTD kq0f<>(SB), Z18
	VPBROADCASTD kq30<>(SB), Z28
	TESTQ CX, CX
	JZ    q6kp1done
q6kp1loop:
	Q6KTOUCH
	VPXORD Z4, Z4, Z4
	Q6KSUB1(0, Z8, Z9, Z10, Z11, Z24, Z25)
	Q6KSUB1(1, Z12, Z13, Z14, Z15, Z26, Z27)
	Q6KSUB1(2, Z8, Z9, Z10, Z11, Z24, Z25)
	Q6KSUB1(3, Z12, Z13, Z14, Z15, Z26, Z27)
	Q6KSUB1(4, Z8, Z9, Z10, Z11, Z24, Z25)
	Q6KSUB1(5, Z12, Z13, Z14, Z15, Z26, Z27)
	Q6KSUB1(6, Z8, Z9, Z10, Z11, Z24, Z25)
	Q6KSUB1(7, Z12, Z13, Z14, Z15, Z26, Z27)
	Q6KSUB1(8, Z8, Z9, Z10, Z11, Z24, Z25)
	Q6KSUB1(9, Z12, Z13, Z14, Z15, Z26, Z27)
	Q6KSUB1(10, Z8, Z9, Z10, Z11, Z24, Z25)
	Q6KSUB1(11, Z12, Z13, Z14, Z15, Z26, Z27)
	Q6KSUB1(12, Z8, Z9, Z10, Z11, Z24, Z25)
	Q6KSUB1(13, Z12, Z13, Z14, Z15, Z26, Z27)
	Q6KSUB1(14, Z8, Z9, Z10, Z11, Z24, Z25)
	Q6KSUB1(15, Z12, Z13, Z14, Z15, Z26, Z27)
	VCVTPH2PS (SI), Z16
	FADD(Z4, Z16, Z0, DX)
	ADDQ $3360, SI
	ADDQ $292, DI
	ADDQ $96, DX
	DECQ CX
	JNZ  q6kp1loop
q6kp1done:
	MOVQ out+32(FP), AX
	VMOVUPS Z0, (AX)
	VZEROUPPER
	RET

// ---- IQ4_XS (2208 bytes per group and super-block: 16 f16 d at 0, the 8
// signed sub-block scales [sub][row] at 32, then per 32-element sub-block ib
// at 160+256ib 4 slices of 4 bytes per row, low nibbles elements 4s..4s+3,
// high ones 16+4s..16+4s+3). The nibbles are looked up in the codebook plus
// 128 (unsigned for VPDPBUSD), so a sub-block's sum carries 128 times the
// activations' 32-element sum: the kernels subtract 128 times the sum over
// sub-blocks of scale times that sum, taken once per super-block from the
// scales as int16 pairs (VPERMW) and the aux's bs32 pairs (VPDPWSSD). Every
// integer is exact, and the float update is dotIQ4XSGo's, so each row is
// bitwise equal to it. Z28 holds the codebook plus 128, Z30 the pair order.
DATA xsiq4u<>+0(SB)/8, $0x766A5D4F3F2D1801
DATA xsiq4u<>+8(SB)/8, $0xF1D9C5B5A6998D81
GLOBL xsiq4u<>(SB), RODATA|NOPTR, $16
DATA xspairs<>+0(SB)/8, $0x0011000100100000
DATA xspairs<>+8(SB)/8, $0x0013000300120002
DATA xspairs<>+16(SB)/8, $0x0015000500140004
DATA xspairs<>+24(SB)/8, $0x0017000700160006
DATA xspairs<>+32(SB)/8, $0x0019000900180008
DATA xspairs<>+40(SB)/8, $0x001b000b001a000a
DATA xspairs<>+48(SB)/8, $0x001d000d001c000c
DATA xspairs<>+56(SB)/8, $0x001f000f001e000e
GLOBL xspairs<>(SB), RODATA|NOPTR, $64

// XSSPLIT: the 64-byte slice at off(SI), low nibbles looked up into zl,
// high ones into zh (gemm_avx512's NLSPLIT, with this file's table).
#define XSSPLIT(off, zl, zh) \
	VMOVDQU32 off(SI), zl \
	VPSRLW $4, zl, zh \
	VPANDD Z18, zl, zl \
	VPANDD Z18, zh, zh \
	VPSHUFB zl, Z28, zl \
	VPSHUFB zh, Z28, zh
// XS8: sub-block ib's 4 slices, looked up, into Z8..Z11 (low nibbles) and
// Z12..Z15 (high).
#define XS8(ib) \
	XSSPLIT((160+256*ib), Z8, Z12) \
	XSSPLIT((160+256*ib+64), Z9, Z13) \
	XSSPLIT((160+256*ib+128), Z10, Z14) \
	XSSPLIT((160+256*ib+192), Z11, Z15)

// XSSUB4: sub-block ib for 4 activation rows, its slices in Z8..Z15:
// exact sums times the scales, into Z4..Z7.
#define XSSUB4(ib) \
	XS8(ib) \
	ZP4 \
	DP4((4+32*ib), Z8) \
	DP4((8+32*ib), Z9) \
	DP4((12+32*ib), Z10) \
	DP4((16+32*ib), Z11) \
	DP4((20+32*ib), Z12) \
	DP4((24+32*ib), Z13) \
	DP4((28+32*ib), Z14) \
	DP4((32+32*ib), Z15) \
	VPMOVSXBD (32+16*ib)(SI), Z19 \
	SC4

// XSPAIR: scale pair p of the 16 rows as int16 pairs in Z19.
#define XSPAIR(p) \
	VPMOVSXBW (32+32*p)(SI), Z19 \
	VPERMW Z19, Z30, Z19

// XSOFF4: scale pair p times each of 4 activation rows' 32-element sum pair
// p, into Z20..Z23.
#define XSOFF4(p) \
	XSPAIR(p) \
	VPDPWSSD.BCST (16+4*p)(DX), Z19, Z20 \
	VPDPWSSD.BCST (16+4*p)(R11), Z19, Z21 \
	VPDPWSSD.BCST (16+4*p)(R12), Z19, Z22 \
	VPDPWSSD.BCST (16+4*p)(R13), Z19, Z23

// func gemmIQ4XSP4(w *byte, nb int, x *q8K, xstride uintptr, aux *q8KAux, auxstride uintptr, out *float32, ostride uintptr, pf *byte)
TEXT ·gemmIQ4XSP4(SB), NOSPLIT, $0-72
	SETUPK
	MOVQ pf+64(FP), R14
	VBROADCASTI32X4 xsiq4u<>(SB), Z28
	VMOVDQU32 xspairs<>(SB), Z30
	TESTQ CX, CX
	JZ    xsp4done
xsp4loop:
	ZERO4
	XSSUB4(0)
	PF5(0)
	XSSUB4(1)
	PF5(5)
	XSSUB4(2)
	PF5(10)
	XSSUB4(3)
	PF5(15)
	XSSUB4(4)
	PF5(20)
	XSSUB4(5)
	PF5(25)
	XSSUB4(6)
	PF5(30)
	XSSUB4(7)
	XSOFF4(0)
	XSOFF4(1)
	XSOFF4(2)
	XSOFF4(3)
	VPSLLD $7, Z20, Z20
	VPSLLD $7, Z21, Z21
	VPSLLD $7, Z22, Z22
	VPSLLD $7, Z23, Z23
	VPSUBD Z20, Z4, Z4
	VPSUBD Z21, Z5, Z5
	VPSUBD Z22, Z6, Z6
	VPSUBD Z23, Z7, Z7
	VCVTPH2PS (SI), Z16
	FADD(Z4, Z16, Z0, DX)
	FADD(Z5, Z16, Z1, R11)
	FADD(Z6, Z16, Z2, R12)
	FADD(Z7, Z16, Z3, R13)
	NEXTK(2208)
	ADDQ $2208, R14
	DECQ CX
	JNZ  xsp4loop
xsp4done:
	STOREK
	RET

// XSSUB1: sub-block ib for one activation row, in two chains, into Z4.
#define XSSUB1(ib) \
	XS8(ib) \
	VPXORD Z24, Z24, Z24 \
	VPXORD Z25, Z25, Z25 \
	VPDPBUSD.BCST (4+32*ib)(DI), Z8, Z24 \
	VPDPBUSD.BCST (8+32*ib)(DI), Z9, Z25 \
	VPDPBUSD.BCST (12+32*ib)(DI), Z10, Z24 \
	VPDPBUSD.BCST (16+32*ib)(DI), Z11, Z25 \
	VPDPBUSD.BCST (20+32*ib)(DI), Z12, Z24 \
	VPDPBUSD.BCST (24+32*ib)(DI), Z13, Z25 \
	VPDPBUSD.BCST (28+32*ib)(DI), Z14, Z24 \
	VPDPBUSD.BCST (32+32*ib)(DI), Z15, Z25 \
	VPADDD Z25, Z24, Z24 \
	VPMOVSXBD (32+16*ib)(SI), Z19 \
	VPMULLD Z19, Z24, Z24 \
	VPADDD Z24, Z4, Z4

// func gemmIQ4XSP1(w *byte, nb int, x *q8K, aux *q8KAux, out *float32)
TEXT ·gemmIQ4XSP1(SB), NOSPLIT, $0-40
	MOVQ w+0(FP), SI
	MOVQ nb+8(FP), CX
	MOVQ x+16(FP), DI
	MOVQ aux+24(FP), DX
	VPXORD Z0, Z0, Z0
	VPBROADCASTD kq0f<>(SB), Z18
	VBROADCASTI32X4 xsiq4u<>(SB), Z28
	VMOVDQU32 xspairs<>(SB), Z30
	TESTQ CX, CX
	JZ    xsp1done
xsp1loop:
	VCVTPH2PS (SI), Z16
	VPXORD Z4, Z4, Z4
	VPXORD Z20, Z20, Z20
	XSSUB1(0)
	XSSUB1(1)
	XSSUB1(2)
	XSSUB1(3)
	XSSUB1(4)
	XSSUB1(5)
	XSSUB1(6)
	XSSUB1(7)
	XSPAIR(0)
	VPDPWSSD.BCST 16(DX), Z19, Z20
	XSPAIR(1)
	VPDPWSSD.BCST 20(DX), Z19, Z20
	XSPAIR(2)
	VPDPWSSD.BCST 24(DX), Z19, Z20
	XSPAIR(3)
	VPDPWSSD.BCST 28(DX), Z19, Z20
	VPSLLD $7, Z20, Z20
	VPSUBD Z20, Z4, Z4
	FADD(Z4, Z16, Z0, DX)
	ADDQ $2208, SI
	ADDQ $292, DI
	ADDQ $96, DX
	DECQ CX
	JNZ  xsp1loop
xsp1done:
	MOVQ out+32(FP), AX
	VMOVUPS Z0, (AX)
	VZEROUPPER
	RET

// ---- Q2_K (1344 bytes per group and super-block: 16 f16 d at 0, 16 f16
// dmin at 32, the 16 sub-blocks' scale|min<<4 bytes [sub][row] at 64, then
// per half h of 128 elements at 320+512h 8 slices of 4 quant bytes per row:
// bits 2j of byte c of slice s are element 128h+32j+4s+c, of sub-block
// 8h+2j+s/4). The 4-row kernel: a sub-block's 4 slices of 2-bit values by
// VPDPBUSD (at most 16*3*127, so the sum is exact in the low int16 of its
// lane), times the sub-block's scale by VPDPWSSD against the scale as a
// dword (high word zero); the mins as int16 pairs of sub-blocks 2p and 2p+1
// against the activations' 16-element sums (bsums[2p], bsums[2p+1]). Per
// super-block t = (d*dx)*float(isum) - (dmin*dx)*float(msum), then sum +=
// t: dotQ2KGo's order. One activation row takes the AVX2 kernel.

DATA kqw0f<>+0(SB)/4, $0x0000000f
GLOBL kqw0f<>(SB), RODATA, $4

// Q2V4: the 4 slices s0..s0+3 of half h, bits 2j, as values 0..3 into
// Z8..Z11. Z18 holds 0x03 bytes.
#define Q2V4(h, j, s0) \
	VPSRLW $(2*j), (320+512*h+64*s0)(SI), Z8 \
	VPANDD Z18, Z8, Z8 \
	VPSRLW $(2*j), (320+512*h+64*s0+64)(SI), Z9 \
	VPANDD Z18, Z9, Z9 \
	VPSRLW $(2*j), (320+512*h+64*s0+128)(SI), Z10 \
	VPANDD Z18, Z10, Z10 \
	VPSRLW $(2*j), (320+512*h+64*s0+192)(SI), Z11 \
	VPANDD Z18, Z11, Z11

// Q2SUBP4: sub-block sub (half h, bits 2j, slices s0..s0+3) for the 4
// activation rows, times its scales (Z28 holds 0x0000000f dwords), into
// Z4..Z7.
#define Q2SUBP4(h, j, s0, sub) \
	Q2V4(h, j, s0) \
	ZP4 \
	DP4((4+128*h+32*j+4*s0), Z8) \
	DP4((8+128*h+32*j+4*s0), Z9) \
	DP4((12+128*h+32*j+4*s0), Z10) \
	DP4((16+128*h+32*j+4*s0), Z11) \
	VPMOVZXBD (64+16*sub)(SI), Z19 \
	VPANDD Z28, Z19, Z19 \
	VPDPWSSD Z19, Z24, Z4 \
	VPDPWSSD Z19, Z25, Z5 \
	VPDPWSSD Z19, Z26, Z6 \
	VPDPWSSD Z19, Z27, Z7

#define Q2JP4(h, j) \
	Q2SUBP4(h, j, 0, (8*h+2*j)) \
	Q2SUBP4(h, j, 4, (8*h+2*j+1))

// Q2MINS: the mins of sub-blocks 2p and 2p+1 as int16 pairs per row, in Z26.
#define Q2MINS(p) \
	VMOVDQU32 (64+32*p)(SI), X24 \
	VMOVDQU32 (80+32*p)(SI), X25 \
	VPUNPCKLBW X25, X24, X26 \
	VPUNPCKHBW X25, X24, X27 \
	VINSERTI32X4 $1, X27, Y26, Y26 \
	VPMOVZXBW Y26, Z26 \
	VPSRLW $4, Z26, Z26

// Q2MINP4: those mins times (bsums[2p], bsums[2p+1]) of each activation row,
// into Z20..Z23.
#define Q2MINP4(p) \
	Q2MINS(p) \
	VPDPWSSD.BCST (260+4*p)(DI), Z26, Z20 \
	VPDPWSSD.BCST (260+4*p)(R8), Z26, Z21 \
	VPDPWSSD.BCST (260+4*p)(R9), Z26, Z22 \
	VPDPWSSD.BCST (260+4*p)(R10), Z26, Z23

// Q2F: za += (d*dx)*float(zi) - (dmin*dx)*float(zm), the difference first;
// d in Z16, dmin in Z17, dx the f32 at 0(ar).
#define Q2F(zi, zm, za, ar) \
	VCVTDQ2PS zi, zi \
	VMULPS.BCST (ar), Z16, Z29 \
	VMULPS zi, Z29, Z29 \
	VCVTDQ2PS zm, zm \
	VMULPS.BCST (ar), Z17, Z30 \
	VMULPS zm, Z30, Z30 \
	VSUBPS Z30, Z29, Z29 \
	VADDPS Z29, za, za

// func gemmQ2KP4(w *byte, nb int, x *q8K, xstride uintptr, aux *q8KAux, auxstride uintptr, out *float32, ostride uintptr, pf *byte)
TEXT ·gemmQ2KP4(SB), NOSPLIT, $0-72
	SETUPK
	MOVQ pf+64(FP), R14
	VPBROADCASTD kq03<>(SB), Z18
	VPBROADCASTD kqw0f<>(SB), Z28
	TESTQ CX, CX
	JZ    q2kp4done
q2kp4loop:
	ZERO4
	Q2JP4(0, 0)
	PF3(0)
	Q2JP4(0, 1)
	PF3(3)
	Q2JP4(0, 2)
	PF3(6)
	Q2JP4(0, 3)
	PF3(9)
	Q2JP4(1, 0)
	PF3(12)
	Q2JP4(1, 1)
	PF2(15)
	Q2JP4(1, 2)
	PF2(17)
	Q2JP4(1, 3)
	PF2(19)
	Q2MINP4(0)
	Q2MINP4(1)
	Q2MINP4(2)
	Q2MINP4(3)
	Q2MINP4(4)
	Q2MINP4(5)
	Q2MINP4(6)
	Q2MINP4(7)
	VCVTPH2PS (SI), Z16
	VCVTPH2PS 32(SI), Z17
	Q2F(Z4, Z20, Z0, DX)
	Q2F(Z5, Z21, Z1, R11)
	Q2F(Z6, Z22, Z2, R12)
	Q2F(Z7, Z23, Z3, R13)
	NEXTK(1344)
	ADDQ $1344, R14
	DECQ CX
	JNZ  q2kp4loop
q2kp4done:
	STOREK
	RET

// The Q2_K decode kernel takes one activation row as the 4-row kernel takes
// four (sub-blocks by VPDPBUSD, scaled by VPDPWSSD), reading the super-block
// in address order: d and dmin, then the scale and min bytes (the mins'
// products first), then the slices. The integer sums of even sub-blocks
// go to Z4, of odd ones to Z5 (added before the float update), the mins' to
// Z20; the running sum is in Z0.

// Q2SUBP1: sub-block sub (half h, bits 2j, slices s0..s0+3), times its
// scales, into acc.
#define Q2SUBP1(h, j, s0, sub, acc) \
	Q2V4(h, j, s0) \
	VPXORD Z24, Z24, Z24 \
	VPXORD Z25, Z25, Z25 \
	VPDPBUSD.BCST (4+128*h+32*j+4*s0)(DI), Z8, Z24 \
	VPDPBUSD.BCST (8+128*h+32*j+4*s0)(DI), Z9, Z25 \
	VPDPBUSD.BCST (12+128*h+32*j+4*s0)(DI), Z10, Z24 \
	VPDPBUSD.BCST (16+128*h+32*j+4*s0)(DI), Z11, Z25 \
	VPADDD Z25, Z24, Z24 \
	VPMOVZXBD (64+16*sub)(SI), Z19 \
	VPANDD Z28, Z19, Z19 \
	VPDPWSSD Z19, Z24, acc

#define Q2JP1(h, j) \
	Q2SUBP1(h, j, 0, (8*h+2*j), Z4) \
	Q2SUBP1(h, j, 4, (8*h+2*j+1), Z5)

// Q2MINP1: the mins of sub-blocks 2p and 2p+1 times (bsums[2p], bsums[2p+1])
// of the activation row, into Z20.
#define Q2MINP1(p) \
	Q2MINS(p) \
	VPDPWSSD.BCST (260+4*p)(DI), Z26, Z20

// func gemmQ2KP1(w *byte, nb int, x *q8K, aux *q8KAux, out *float32)
TEXT ·gemmQ2KP1(SB), NOSPLIT, $0-40
	MOVQ w+0(FP), SI
	MOVQ nb+8(FP), CX
	MOVQ x+16(FP), DI
	MOVQ aux+24(FP), DX
	VPXORD Z0, Z0, Z0
	VPBROADCASTD kq03<>(SB), Z18
	VPBROADCASTD kqw0f<>(SB), Z28
	TESTQ CX, CX
	JZ    q2kp1done
q2kp1loop:
	VCVTPH2PS (SI), Z16
	VCVTPH2PS 32(SI), Z17
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	VPXORD Z20, Z20, Z20
	Q2MINP1(0)
	Q2MINP1(1)
	Q2MINP1(2)
	Q2MINP1(3)
	Q2MINP1(4)
	Q2MINP1(5)
	Q2MINP1(6)
	Q2MINP1(7)
	Q2JP1(0, 0)
	Q2JP1(0, 1)
	Q2JP1(0, 2)
	Q2JP1(0, 3)
	Q2JP1(1, 0)
	Q2JP1(1, 1)
	Q2JP1(1, 2)
	Q2JP1(1, 3)
	VPADDD Z5, Z4, Z4
	Q2F(Z4, Z20, Z0, DX)
	ADDQ $1344, SI
	ADDQ $292, DI
	ADDQ $96, DX
	DECQ CX
	JNZ  q2kp1loop
q2kp1done:
	MOVQ out+32(FP), AX
	VMOVUPS Z0, (AX)
	VZEROUPPER
	RET

// ---- Q5_K (2880 bytes per group and super-block: Q4_K's d at 0, dmin at
// 32, scales [sub][row] at 64 and mins as byte pairs at 192; per 64-element
// chunk k at 320+640k eight slices, lane s at +64s holding the row's quant
// bytes s, s+8, s+16, s+24 (low nibbles: sub-block 2k, high: 2k+1), then two
// planes of fifth bits at +512 (lanes 0..3) and +576 (lanes 4..7), lane s's
// at bit s%4 (sub-block 2k) and 4+s%4 (2k+1)). The activations come in lane
// order (laneOrder) and the float sums are GGML's generic kernel's eight
// lanes (dotQ5KGo). The decode kernel reads each super-block in address
// order and keeps lane s's integer sums of the 16 rows in Zs (Z0..Z7): the
// 5-bit values times the lane's 4 activation bytes (VPMADDUBSW, int16 pairs
// that cannot saturate: 2*31*128 < 32768), times the sub-block's scale held
// as an int16 pair per row (VPDPWSSD). Lane s's float sum is in Z8+s.
DATA kq10<>+0(SB)/4, $0x10101010
GLOBL kq10<>(SB), RODATA, $4

// Q5KSCP: sub-block sub's scales, one per row, as the int16 pair (s, s).
#define Q5KSCP(sub, z) \
	VPMOVZXBD (64+16*sub)(SI), z \
	VPSLLD $16, z, Z31 \
	VPORD Z31, z, z

// Q5KL: lane s of chunk k into acc: the low nibbles with their fifth bits
// (the plane in Z22 shifted left by lsh) against sub-block 2k, the high ones
// (the fifth bits at bit 4 of hb) against 2k+1; scales in Z21 and Z23.
// Z18 holds 0x0f bytes, Z19 0x10.
#define Q5KL(k, s, acc, lsh, hb) \
	VMOVDQU32 (320+640*k+64*s)(SI), Z25 \
	VPANDD Z18, Z25, Z26 \
	VPSLLW $lsh, Z22, Z28 \
	VPTERNLOGD $0xf8, Z19, Z28, Z26 \
	VPSRLW $4, Z25, Z27 \
	VPANDD Z18, Z27, Z27 \
	VPTERNLOGD $0xf8, Z19, hb, Z27 \
	VPBROADCASTD (4+64*k+4*s)(DI), Z29 \
	VPMADDUBSW Z29, Z26, Z26 \
	VPDPWSSD Z21, Z26, acc \
	VPBROADCASTD (36+64*k+4*s)(DI), Z29 \
	VPMADDUBSW Z29, Z27, Z27 \
	VPDPWSSD Z23, Z27, acc

// Q5KPLANE: lanes 4p..4p+3 of chunk k into za..zd, their plane of fifth
// bits in Z22.
#define Q5KPLANE(k, p, za, zb, zc, zd) \
	VMOVDQU32 (320+640*k+512+64*p)(SI), Z22 \
	Q5KL(k, (4*p), za, 4, Z22) \
	VPSRLW $1, Z22, Z30 \
	Q5KL(k, (4*p+1), zb, 3, Z30) \
	VPSRLW $2, Z22, Z30 \
	Q5KL(k, (4*p+2), zc, 2, Z30) \
	VPSRLW $3, Z22, Z30 \
	Q5KL(k, (4*p+3), zd, 1, Z30)

// Q5KTOUCH: one byte of each of chunk k's 10 lines, in address order,
// before the chunk's products. Those read a plane of fifth bits (the
// chunk's last lines) before its slices, and the hardware prefetcher,
// which follows ascending misses, kept fewer lines in flight: one Zen 4
// core drew 15-23 GB/s from DRAM (BenchmarkMatMul/Q5_K/decode-dram), with
// the lines touched in order first 22-35. The loads go to R15, unused.
#define Q5KTOUCH(k) \
	MOVBLZX (320+640*k+0)(SI), R15 \
	MOVBLZX (320+640*k+64)(SI), R15 \
	MOVBLZX (320+640*k+128)(SI), R15 \
	MOVBLZX (320+640*k+192)(SI), R15 \
	MOVBLZX (320+640*k+256)(SI), R15 \
	MOVBLZX (320+640*k+320)(SI), R15 \
	MOVBLZX (320+640*k+384)(SI), R15 \
	MOVBLZX (320+640*k+448)(SI), R15 \
	MOVBLZX (320+640*k+512)(SI), R15 \
	MOVBLZX (320+640*k+576)(SI), R15

// Q5KCHUNK: chunk k's 64 elements into the lane sums Z0..Z7.
#define Q5KCHUNK(k) \
	Q5KTOUCH(k) \
	Q5KSCP((2*k), Z21) \
	Q5KSCP((2*k+1), Z23) \
	Q5KPLANE(k, 0, Z0, Z1, Z2, Z3) \
	Q5KPLANE(k, 1, Z4, Z5, Z6, Z7)

// LANEF: the float lane sum zf += dd * float(zi), dd in Z16.
#define LANEF(zi, zf) \
	VCVTDQ2PS zi, zi \
	VMULPS zi, Z16, zi \
	VADDPS zi, zf, zf

// LANEF8: the float lane sums Z8..Z15 += dd * float(Z0..Z7).
#define LANEF8 \
	LANEF(Z0, Z8) \
	LANEF(Z1, Z9) \
	LANEF(Z2, Z10) \
	LANEF(Z3, Z11) \
	LANEF(Z4, Z12) \
	LANEF(Z5, Z13) \
	LANEF(Z6, Z14) \
	LANEF(Z7, Z15)

// LANESUM: zs += Z8, Z9, ..., Z15, lane 0 first (the portable kernels'
// final order).
#define LANESUM(zs) \
	VADDPS Z8, zs, zs \
	VADDPS Z9, zs, zs \
	VADDPS Z10, zs, zs \
	VADDPS Z11, zs, zs \
	VADDPS Z12, zs, zs \
	VADDPS Z13, zs, zs \
	VADDPS Z14, zs, zs \
	VADDPS Z15, zs, zs

#define ZERO8(a, b, c, d, e, f, g, h) \
	VPXORD a, a, a \
	VPXORD b, b, b \
	VPXORD c, c, c \
	VPXORD d, d, d \
	VPXORD e, e, e \
	VPXORD f, f, f \
	VPXORD g, g, g \
	VPXORD h, h, h

// func gemmQ5KP1(w *byte, nb int, x *q8K, aux *q8KAux, out *float32)
// The running sum of -dmin*msum in Z24, added to the lane sums, lane 0
// first, at the end.
TEXT ·gemmQ5KP1(SB), NOSPLIT, $0-40
	MOVQ w+0(FP), SI
	MOVQ nb+8(FP), CX
	MOVQ x+16(FP), DI
	MOVQ aux+24(FP), DX
	ZERO8(Z8, Z9, Z10, Z11, Z12, Z13, Z14, Z15)
	VPXORD Z24, Z24, Z24
	VPBROADCASTD kq0f<>(SB), Z18
	VPBROADCASTD kq10<>(SB), Z19
	TESTQ CX, CX
	JZ    q5kp1done
q5kp1loop:
	ZERO8(Z0, Z1, Z2, Z3, Z4, Z5, Z6, Z7)
	VPXORD Z20, Z20, Z20
	VCVTPH2PS (SI), Z16
	VMULPS.BCST (DX), Z16, Z16
	VCVTPH2PS 32(SI), Z17
	VPMOVZXBW 192(SI), Z25
	VPDPWSSD.BCST 16(DX), Z25, Z20
	VPMOVZXBW 224(SI), Z26
	VPDPWSSD.BCST 20(DX), Z26, Z20
	VPMOVZXBW 256(SI), Z27
	VPDPWSSD.BCST 24(DX), Z27, Z20
	VPMOVZXBW 288(SI), Z28
	VPDPWSSD.BCST 28(DX), Z28, Z20
	FSUB(Z20, Z17, Z24, DX)
	Q5KCHUNK(0)
	Q5KCHUNK(1)
	Q5KCHUNK(2)
	Q5KCHUNK(3)
	LANEF8
	ADDQ $2880, SI
	ADDQ $292, DI
	ADDQ $96, DX
	DECQ CX
	JNZ  q5kp1loop
q5kp1done:
	LANESUM(Z24)
	MOVQ out+32(FP), AX
	VMOVUPS Z24, (AX)
	VZEROUPPER
	RET


// The 4-row Q5_K kernel walks the super-block lane by lane: lane s of each
// chunk is decoded once (Q5KV4) and taken against the 4 activation rows,
// row r's products summed in Zr (exact integers; chunk 0's VPMADDWD starts
// the sum, so nothing is zeroed). The 8 sub-blocks' scale
// pairs stay in Z8..Z15 for the super-block, d*dx of row r in Z16+r. The
// float lane sums of row r (lane s at 512r+64s) and its running sum of
// -dmin*msum (at 2048+64r) live on the stack: 4 rows x 8 lanes would take
// every register. Per row the float updates are gemmQ5KP1's, in its order.

// Q5KV4: lane s of chunk k as 5-bit values, the low nibbles (sub-block 2k)
// in Z22 and the high ones (2k+1) in Z23; the lane's fifth bits are bits b
// and 4+b of plane p. Z20 holds 0x0f bytes, Z21 0x10.
#define Q5KV4(k, s, p, b) \
	VPANDD (320+640*k+64*s)(SI), Z20, Z22 \
	VPSRLW $4, (320+640*k+64*s)(SI), Z23 \
	VPANDD Z20, Z23, Z23 \
	VPSLLW $(4-b), (320+640*k+512+64*p)(SI), Z24 \
	VPTERNLOGD $0xf8, Z21, Z24, Z22 \
	VPSRLW $b, (320+640*k+512+64*p)(SI), Z25 \
	VPTERNLOGD $0xf8, Z21, Z25, Z23

// Q5KR4: the values in Z22 and Z23 against lane s of chunk k of the
// activation row at xr, times the scale pairs slo and shi, into acc: Vop
// VPMADDWD sets acc, VPDPWSSD adds to it.
#define Q5KR4(k, s, xr, slo, shi, acc, Vop) \
	VPBROADCASTD (4+64*k+4*s)(xr), Z26 \
	VPMADDUBSW Z26, Z22, Z28 \
	Vop slo, Z28, acc \
	VPBROADCASTD (36+64*k+4*s)(xr), Z27 \
	VPMADDUBSW Z27, Z23, Z29 \
	VPDPWSSD shi, Z29, acc

#define Q5KC4(k, s, p, b, slo, shi, Vop) \
	Q5KV4(k, s, p, b) \
	Q5KR4(k, s, DI, slo, shi, Z0, Vop) \
	Q5KR4(k, s, R8, slo, shi, Z1, Vop) \
	Q5KR4(k, s, R9, slo, shi, Z2, Vop) \
	Q5KR4(k, s, R10, slo, shi, Z3, Vop)

// Q5KF: the float lane sum at off(SP) += dd * float(lo).
#define Q5KF(lo, dd, off) \
	VCVTDQ2PS lo, lo \
	VMULPS lo, dd, lo \
	VADDPS off(SP), lo, lo \
	VMOVUPS lo, off(SP)

// Q5KLANE4: lane s (bits b and 4+b of plane p) over the super-block's 4
// chunks, then into the 4 rows' float sums of lane s.
#define Q5KLANE4(s, p, b) \
	Q5KC4(0, s, p, b, Z8, Z9, VPMADDWD) \
	Q5KC4(1, s, p, b, Z10, Z11, VPDPWSSD) \
	Q5KC4(2, s, p, b, Z12, Z13, VPDPWSSD) \
	Q5KC4(3, s, p, b, Z14, Z15, VPDPWSSD) \
	Q5KF(Z0, Z16, (64*s)) \
	Q5KF(Z1, Z17, (512+64*s)) \
	Q5KF(Z2, Z18, (1024+64*s)) \
	Q5KF(Z3, Z19, (1536+64*s))

// Q5KM: the running sum at off(SP) -= (dmin*dx) * float(zi); dmin in Z23,
// dx the f32 at 0(ar).
#define Q5KM(zi, ar, off) \
	VCVTDQ2PS zi, zi \
	VMULPS.BCST (ar), Z23, Z29 \
	VMULPS zi, Z29, Z29 \
	VMOVUPS off(SP), Z30 \
	VSUBPS Z29, Z30, Z30 \
	VMOVUPS Z30, off(SP)

// Q5KMIN4: the mins (byte pairs made int16) times the activations'
// 32-element sum pairs, into the 4 rows' running sums.
#define Q5KMIN4 \
	ZERO4Z(Z24, Z25, Z26, Z27) \
	VPMOVZXBW 192(SI), Z22 \
	VPDPWSSD.BCST 16(DX), Z22, Z24 \
	VPDPWSSD.BCST 16(R11), Z22, Z25 \
	VPDPWSSD.BCST 16(R12), Z22, Z26 \
	VPDPWSSD.BCST 16(R13), Z22, Z27 \
	VPMOVZXBW 224(SI), Z22 \
	VPDPWSSD.BCST 20(DX), Z22, Z24 \
	VPDPWSSD.BCST 20(R11), Z22, Z25 \
	VPDPWSSD.BCST 20(R12), Z22, Z26 \
	VPDPWSSD.BCST 20(R13), Z22, Z27 \
	VPMOVZXBW 256(SI), Z22 \
	VPDPWSSD.BCST 24(DX), Z22, Z24 \
	VPDPWSSD.BCST 24(R11), Z22, Z25 \
	VPDPWSSD.BCST 24(R12), Z22, Z26 \
	VPDPWSSD.BCST 24(R13), Z22, Z27 \
	VPMOVZXBW 288(SI), Z22 \
	VPDPWSSD.BCST 28(DX), Z22, Z24 \
	VPDPWSSD.BCST 28(R11), Z22, Z25 \
	VPDPWSSD.BCST 28(R12), Z22, Z26 \
	VPDPWSSD.BCST 28(R13), Z22, Z27 \
	VCVTPH2PS 32(SI), Z23 \
	Q5KM(Z24, DX, 2048) \
	Q5KM(Z25, R11, 2112) \
	Q5KM(Z26, R12, 2176) \
	Q5KM(Z27, R13, 2240)

#define ZERO4Z(a, b, c, d) \
	VPXORD a, a, a \
	VPXORD b, b, b \
	VPXORD c, c, c \
	VPXORD d, d, d

// ZST8: zero the 8 stack sums from off on (Z22 is zero).
#define ZST8(off) \
	VMOVUPS Z22, (off)(SP) \
	VMOVUPS Z22, (off+64)(SP) \
	VMOVUPS Z22, (off+128)(SP) \
	VMOVUPS Z22, (off+192)(SP) \
	VMOVUPS Z22, (off+256)(SP) \
	VMOVUPS Z22, (off+320)(SP) \
	VMOVUPS Z22, (off+384)(SP) \
	VMOVUPS Z22, (off+448)(SP)

// ADDLANES8: Z0 += the 8 float lane sums at off(SP) (64 bytes apart), lane 0
// first: how the whole-group K-quant kernels finish a row.
#define ADDLANES8(off) \
	VADDPS (off)(SP), Z0, Z0 \
	VADDPS (off+64)(SP), Z0, Z0 \
	VADDPS (off+128)(SP), Z0, Z0 \
	VADDPS (off+192)(SP), Z0, Z0 \
	VADDPS (off+256)(SP), Z0, Z0 \
	VADDPS (off+320)(SP), Z0, Z0 \
	VADDPS (off+384)(SP), Z0, Z0 \
	VADDPS (off+448)(SP), Z0, Z0

// Q5KOUT: row r's result, its running sum plus lanes 0..7 (gemmQ5KP1's
// LANESUM order), to (AX).
#define Q5KOUT(r) \
	VMOVUPS (2048+64*r)(SP), Z0 \
	ADDLANES8(512*r) \
	VMOVUPS Z0, (AX)

// func gemmQ5KP4(w *byte, nb int, x *q8K, xstride uintptr, aux *q8KAux, auxstride uintptr, out *float32, ostride uintptr, pf *byte)
TEXT ·gemmQ5KP4(SB), $2304-72
	SETUPK
	MOVQ pf+64(FP), R14
	VPBROADCASTD kq0f<>(SB), Z20
	VPBROADCASTD kq10<>(SB), Z21
	VPXORD Z22, Z22, Z22
	ZST8(0)
	ZST8(512)
	ZST8(1024)
	ZST8(1536)
	VMOVUPS Z22, 2048(SP)
	VMOVUPS Z22, 2112(SP)
	VMOVUPS Z22, 2176(SP)
	VMOVUPS Z22, 2240(SP)
	TESTQ CX, CX
	JZ    q5kp4done
q5kp4loop:
	VCVTPH2PS (SI), Z22
	VMULPS.BCST (DX), Z22, Z16
	VMULPS.BCST (R11), Z22, Z17
	VMULPS.BCST (R12), Z22, Z18
	VMULPS.BCST (R13), Z22, Z19
	Q5KMIN4
	PF5(0)
	Q5KSCP(0, Z8)
	Q5KSCP(1, Z9)
	Q5KSCP(2, Z10)
	Q5KSCP(3, Z11)
	Q5KSCP(4, Z12)
	Q5KSCP(5, Z13)
	Q5KSCP(6, Z14)
	Q5KSCP(7, Z15)
	Q5KLANE4(0, 0, 0)
	PF5(5)
	Q5KLANE4(1, 0, 1)
	PF5(10)
	Q5KLANE4(2, 0, 2)
	PF5(15)
	Q5KLANE4(3, 0, 3)
	PF5(20)
	Q5KLANE4(4, 1, 0)
	PF5(25)
	Q5KLANE4(5, 1, 1)
	PF5(30)
	Q5KLANE4(6, 1, 2)
	PF5(35)
	Q5KLANE4(7, 1, 3)
	PF5(40)
	NEXTK(2880)
	ADDQ $2880, R14
	DECQ CX
	JNZ  q5kp4loop
q5kp4done:
	MOVQ out+48(FP), AX
	MOVQ ostride+56(FP), BX
	Q5KOUT(0)
	ADDQ BX, AX
	Q5KOUT(1)
	ADDQ BX, AX
	Q5KOUT(2)
	ADDQ BX, AX
	Q5KOUT(3)
	VZEROUPPER
	RET

// ---- Q3_K (1824 bytes per group and super-block: 16 f16 d at 0; the
// signed scales of sub-blocks 2c and 2c+1 as byte pairs [c][row][2] at
// 32+32c, c a 32-element chunk; per lane s at 288+64s the row's hmask bytes
// s, s+8, s+16, s+24, inverted, chunk c's bit at c; per half h (chunks
// 4h..4h+3) and lane s at 800+512h+64s the row's quant bytes 32h+s, +8, +16,
// +24, chunk 4h+j's two bits at 2j). The activations come in Q5_K's lane
// order and the float sums are dotQ3KGo's eight lanes. The values -4..3 are
// taken 4 higher (0..7: the two low bits, bit 2 set unless the inverted
// hmask bit is), unsigned for VPMADDUBSW; the stack holds, per chunk and
// lane, -4 times the activations' two pair sums, which VPDPWSSD against
// the scale pairs takes back off. Lane s's integer sums of the 16 rows are
// in Zs (Z0..Z7), its float sum in Z8+s.
DATA kq03<>+0(SB)/4, $0x03030303
GLOBL kq03<>(SB), RODATA, $4
DATA kq04<>+0(SB)/4, $0x04040404
GLOBL kq04<>(SB), RODATA, $4

// Q3KNEG: at off(SP), -4 times the pair sums of the activations' 64 bytes
// at 4+off(DI) (chunk c's lane s at 32c+4s). Z18 holds 0x04 bytes, Z31 zero.
#define Q3KNEG(off) \
	VMOVDQU32 (4+off)(DI), Z30 \
	VPMADDUBSW Z30, Z18, Z30 \
	VPSUBW Z30, Z31, Z30 \
	VMOVDQU32 Z30, off(SP)

// Q3KJ: chunk c (the j-th of its half) of lane s into acc, the lane's quant
// bytes in Z24, its hmask bytes in hm (Z23; chunk c's bit moved to bit 2 in
// ht, Z27, by `sh $n`), the chunk's scale pairs in sc. Z17 holds 0x03 bytes.
#define Q3KJ(c, j, s, acc, sc, sh, n, hm, ht) \
	VPSRLW $(2*j), Z24, Z25 \
	VPTERNLOGD $0xea, Z18, Z17, Z25 \
	sh $n, hm, ht \
	VPTERNLOGD $0x78, Z18, Z27, Z25 \
	VPBROADCASTD (4+32*c+4*s)(DI), Z28 \
	VPMADDUBSW Z28, Z25, Z25 \
	VPDPWSSD sc, Z25, acc \
	VPDPWSSD.BCST (32*c+4*s)(SP), sc, acc

// Q3KC0, Q3KC1: chunk j of half 0 or 1 for all 8 lanes into Z0..Z7, the
// chunk's bit of the hmask moved to bit 2 by `sh $n`: lane s's hmask and
// quant bytes are read again for each chunk (from L1 after the first), so
// that consecutive products go to different lane sums.
#define Q3KS(h, c, j, s, acc, sc, sh, n) \
	VMOVDQU32 (288+64*s)(SI), Z23 \
	VMOVDQU32 (800+512*h+64*s)(SI), Z24 \
	Q3KJ(c, j, s, acc, sc, sh, n, Z23, Z27)
#define Q3KC(h, c, j, sc, sh, n) \
	Q3KS(h, c, j, 0, Z0, sc, sh, n) \
	Q3KS(h, c, j, 1, Z1, sc, sh, n) \
	Q3KS(h, c, j, 2, Z2, sc, sh, n) \
	Q3KS(h, c, j, 3, Z3, sc, sh, n) \
	Q3KS(h, c, j, 4, Z4, sc, sh, n) \
	Q3KS(h, c, j, 5, Z5, sc, sh, n) \
	Q3KS(h, c, j, 6, Z6, sc, sh, n) \
	Q3KS(h, c, j, 7, Z7, sc, sh, n)

// func gemmQ3KP1(w *byte, nb int, x *q8K, aux *q8KAux, out *float32)
TEXT ·gemmQ3KP1(SB), $256-40
	MOVQ w+0(FP), SI
	MOVQ nb+8(FP), CX
	MOVQ x+16(FP), DI
	MOVQ aux+24(FP), DX
	ZERO8(Z8, Z9, Z10, Z11, Z12, Z13, Z14, Z15)
	VPXORD Z31, Z31, Z31
	VPBROADCASTD kq03<>(SB), Z17
	VPBROADCASTD kq04<>(SB), Z18
	TESTQ CX, CX
	JZ    q3kp1done
q3kp1loop:
	ZERO8(Z0, Z1, Z2, Z3, Z4, Z5, Z6, Z7)
	Q3KNEG(0)
	Q3KNEG(64)
	Q3KNEG(128)
	Q3KNEG(192)
	VCVTPH2PS (SI), Z16
	VMULPS.BCST (DX), Z16, Z16
	VPMOVSXBW 32(SI), Z19
	VPMOVSXBW 64(SI), Z20
	VPMOVSXBW 96(SI), Z21
	VPMOVSXBW 128(SI), Z22
	Q3KC(0, 0, 0, Z19, VPSLLW, 2)
	Q3KC(0, 1, 1, Z20, VPSLLW, 1)
	Q3KC(0, 2, 2, Z21, VPSRLW, 0)
	Q3KC(0, 3, 3, Z22, VPSRLW, 1)
	VPMOVSXBW 160(SI), Z19
	VPMOVSXBW 192(SI), Z20
	VPMOVSXBW 224(SI), Z21
	VPMOVSXBW 256(SI), Z22
	Q3KC(1, 4, 0, Z19, VPSRLW, 2)
	Q3KC(1, 5, 1, Z20, VPSRLW, 3)
	Q3KC(1, 6, 2, Z21, VPSRLW, 4)
	Q3KC(1, 7, 3, Z22, VPSRLW, 5)
	LANEF8
	ADDQ $1824, SI
	ADDQ $292, DI
	ADDQ $96, DX
	DECQ CX
	JNZ  q3kp1loop
q3kp1done:
	LANESUM(Z31)
	MOVQ out+32(FP), AX
	VMOVUPS Z31, (AX)
	VZEROUPPER
	RET

// The 4-row Q3_K kernel takes the values signed (-4..3) and the activations
// 128 higher (unsigned, a copy on the stack at 256r per row r, in lane
// order), so VPMADDUBSW can take them; the surplus, 128 times the sum over
// the super-block of scale times value per row and lane, is the weights'
// alone and is taken once for the 4 rows (Z24, per lane). As Q5_K's 4-row
// kernel it walks the super-block lane by lane: chunk c's scale pairs in
// Z8+c, row r's integer sums of chunks 0..3 in Zr and of 4..7 in Z4+r, d*dx
// of row r in Z16+r, the float lane sums of row r on the stack at
// 1024+512r+64s. Per row the float updates are gemmQ3KP1's, in its order.
DATA kq01<>+0(SB)/4, $0x01010101
GLOBL kq01<>(SB), RODATA, $4
DATA kq80<>+0(SB)/4, $0x80808080
GLOBL kq80<>(SB), RODATA, $4

// Q3KX4: the 64 activation bytes at off of the q8K block at xr, plus 128, to
// soff(SP). Z31 holds 0x80 bytes.
#define Q3KX4(xr, off, soff) \
	VPXORD (4+off)(xr), Z31, Z25 \
	VMOVDQU32 Z25, soff(SP)

// Q3KC4: chunk c (the j-th of its half, its quant bytes in Z22) of lane s
// for the 4 rows; the lane's inverted hmask bytes in hm (Z23), chunk c's bit
// moved to bit 2 in ht (Z31) by `sh $n`. The value is made as gemmQ3KP1
// makes it (0..7), then 4 lower. Z20 holds 0x03 bytes, Z21 0x04, Z30 0x01.
// Vop VPMADDWD starts the rows' sums (chunks 0 and 4), VPDPWSSD adds.
#define Q3KC4(c, j, s, sc, a0, a1, a2, a3, sh, n, hm, ht, Vop) \
	VPSRLW $(2*j), Z22, Z25 \
	VPTERNLOGD $0xea, Z21, Z20, Z25 \
	sh $n, hm, ht \
	VPTERNLOGD $0x78, Z21, ht, Z25 \
	VPSUBB Z21, Z25, Z25 \
	VPMADDUBSW Z25, Z30, Z29 \
	VPDPWSSD sc, Z29, Z24 \
	VPBROADCASTD (32*c+4*s)(SP), Z26 \
	VPMADDUBSW Z25, Z26, Z28 \
	Vop sc, Z28, a0 \
	VPBROADCASTD (256+32*c+4*s)(SP), Z27 \
	VPMADDUBSW Z25, Z27, Z29 \
	Vop sc, Z29, a1 \
	VPBROADCASTD (512+32*c+4*s)(SP), Z26 \
	VPMADDUBSW Z25, Z26, Z28 \
	Vop sc, Z28, a2 \
	VPBROADCASTD (768+32*c+4*s)(SP), Z27 \
	VPMADDUBSW Z25, Z27, Z29 \
	Vop sc, Z29, a3

// Q3KF: row r's float lane sum at off(SP) += dd * float(a + b - Z24), Z24
// holding 128 times the lane's surplus.
#define Q3KF(a, b, dd, off) \
	VPADDD b, a, a \
	VPSUBD Z24, a, a \
	VCVTDQ2PS a, a \
	VMULPS a, dd, a \
	VADDPS off(SP), a, a \
	VMOVUPS a, off(SP)

// Q3KLANE4: lane s over the super-block's 8 chunks, then into the 4 rows'
// float sums of lane s.
#define Q3KLANE4(s) \
	VPXORD Z24, Z24, Z24 \
	VMOVDQU32 (288+64*s)(SI), Z23 \
	VMOVDQU32 (800+64*s)(SI), Z22 \
	Q3KC4(0, 0, s, Z8, Z0, Z1, Z2, Z3, VPSLLW, 2, Z23, Z31, VPMADDWD) \
	Q3KC4(1, 1, s, Z9, Z0, Z1, Z2, Z3, VPSLLW, 1, Z23, Z31, VPDPWSSD) \
	Q3KC4(2, 2, s, Z10, Z0, Z1, Z2, Z3, VPSRLW, 0, Z23, Z31, VPDPWSSD) \
	Q3KC4(3, 3, s, Z11, Z0, Z1, Z2, Z3, VPSRLW, 1, Z23, Z31, VPDPWSSD) \
	VMOVDQU32 (1312+64*s)(SI), Z22 \
	Q3KC4(4, 0, s, Z12, Z4, Z5, Z6, Z7, VPSRLW, 2, Z23, Z31, VPMADDWD) \
	Q3KC4(5, 1, s, Z13, Z4, Z5, Z6, Z7, VPSRLW, 3, Z23, Z31, VPDPWSSD) \
	Q3KC4(6, 2, s, Z14, Z4, Z5, Z6, Z7, VPSRLW, 4, Z23, Z31, VPDPWSSD) \
	Q3KC4(7, 3, s, Z15, Z4, Z5, Z6, Z7, VPSRLW, 5, Z23, Z31, VPDPWSSD) \
	VPSLLD $7, Z24, Z24 \
	Q3KF(Z0, Z4, Z16, (1024+64*s)) \
	Q3KF(Z1, Z5, Z17, (1536+64*s)) \
	Q3KF(Z2, Z6, Z18, (2048+64*s)) \
	Q3KF(Z3, Z7, Z19, (2560+64*s))

// Q3KOUT: row r's result, zero plus lanes 0..7 (gemmQ3KP1's LANESUM
// order), to (AX). Z1 is zero.
#define Q3KOUT(r) \
	VMOVAPS Z1, Z0 \
	ADDLANES8(1024+512*r) \
	VMOVUPS Z0, (AX)

// func gemmQ3KP4(w *byte, nb int, x *q8K, xstride uintptr, aux *q8KAux, auxstride uintptr, out *float32, ostride uintptr, pf *byte)
TEXT ·gemmQ3KP4(SB), $3072-72
	SETUPK
	MOVQ pf+64(FP), R14
	VPBROADCASTD kq03<>(SB), Z20
	VPBROADCASTD kq04<>(SB), Z21
	VPBROADCASTD kq01<>(SB), Z30
	VPXORD Z22, Z22, Z22
	ZST8(1024)
	ZST8(1536)
	ZST8(2048)
	ZST8(2560)
	TESTQ CX, CX
	JZ    q3kp4done
q3kp4loop:
	VPBROADCASTD kq80<>(SB), Z31
	Q3KX4(DI, 0, 0)
	Q3KX4(DI, 64, 64)
	Q3KX4(DI, 128, 128)
	Q3KX4(DI, 192, 192)
	Q3KX4(R8, 0, 256)
	Q3KX4(R8, 64, 320)
	Q3KX4(R8, 128, 384)
	Q3KX4(R8, 192, 448)
	Q3KX4(R9, 0, 512)
	Q3KX4(R9, 64, 576)
	Q3KX4(R9, 128, 640)
	Q3KX4(R9, 192, 704)
	Q3KX4(R10, 0, 768)
	Q3KX4(R10, 64, 832)
	Q3KX4(R10, 128, 896)
	Q3KX4(R10, 192, 960)
	VCVTPH2PS (SI), Z22
	VMULPS.BCST (DX), Z22, Z16
	VMULPS.BCST (R11), Z22, Z17
	VMULPS.BCST (R12), Z22, Z18
	VMULPS.BCST (R13), Z22, Z19
	VPMOVSXBW 32(SI), Z8
	VPMOVSXBW 64(SI), Z9
	VPMOVSXBW 96(SI), Z10
	VPMOVSXBW 128(SI), Z11
	VPMOVSXBW 160(SI), Z12
	VPMOVSXBW 192(SI), Z13
	VPMOVSXBW 224(SI), Z14
	VPMOVSXBW 256(SI), Z15
	Q3KLANE4(0)
	PF4(0)
	Q3KLANE4(1)
	PF4(4)
	Q3KLANE4(2)
	PF4(8)
	Q3KLANE4(3)
	PF4(12)
	Q3KLANE4(4)
	PF4(16)
	Q3KLANE4(5)
	PF4(20)
	Q3KLANE4(6)
	PF4(24)
	Q3KLANE4(7)
	PF1(28)
	NEXTK(1824)
	ADDQ $1824, R14
	DECQ CX
	JNZ  q3kp4loop
q3kp4done:
	MOVQ out+48(FP), AX
	MOVQ ostride+56(FP), BX
	VPXORD Z1, Z1, Z1
	Q3KOUT(0)
	ADDQ BX, AX
	Q3KOUT(1)
	ADDQ BX, AX
	Q3KOUT(2)
	ADDQ BX, AX
	Q3KOUT(3)
	VZEROUPPER
	RET

// The 8-row Q3_K kernel: Q3_K's 4-row kernel for 8 activation rows, so each
// lane's values and surplus are made once for 8. Row r's integer sums in Zr;
// on the stack its activations 128 higher at 256r, its d*dx at 2048+64r and
// its float lane sums at 2560+512r+64s. The row pointers are the base (AX,
// R8) advanced by the strides (BX, R9) as the activations are copied.

// Q3KXR: row r's activations, 128 higher, and d*dx (d in Z16) to the stack;
// Z31 holds 0x80 bytes.
#define Q3KXR(r) \
	VPXORD 4(AX), Z31, Z25 \
	VMOVDQU32 Z25, (256*r)(SP) \
	VPXORD 68(AX), Z31, Z25 \
	VMOVDQU32 Z25, (256*r+64)(SP) \
	VPXORD 132(AX), Z31, Z25 \
	VMOVDQU32 Z25, (256*r+128)(SP) \
	VPXORD 196(AX), Z31, Z25 \
	VMOVDQU32 Z25, (256*r+192)(SP) \
	VMULPS.BCST (R8), Z16, Z25 \
	VMOVUPS Z25, (2048+64*r)(SP) \
	ADDQ BX, AX \
	ADDQ R9, R8

// Q3KR8: the value in Z25 against row r's lane s of chunk c, times the
// scale pairs sc, into acc.
#define Q3KR8(c, s, r, sc, acc, Vop, zx, zp) \
	VPBROADCASTD (256*r+32*c+4*s)(SP), zx \
	VPMADDUBSW Z25, zx, zp \
	Vop sc, zp, acc

// Q3KC8: chunk c (the j-th of its half) of lane s for the 8 rows, as Q3KC4.
#define Q3KC8(c, j, s, sc, sh, n, hm, ht, Vop) \
	VPSRLW $(2*j), Z22, Z25 \
	VPTERNLOGD $0xea, Z21, Z20, Z25 \
	sh $n, hm, ht \
	VPTERNLOGD $0x78, Z21, ht, Z25 \
	VPSUBB Z21, Z25, Z25 \
	VPMADDUBSW Z25, Z30, Z29 \
	VPDPWSSD sc, Z29, Z24 \
	Q3KR8(c, s, 0, sc, Z0, Vop, Z26, Z28) \
	Q3KR8(c, s, 1, sc, Z1, Vop, Z27, Z29) \
	Q3KR8(c, s, 2, sc, Z2, Vop, Z17, Z18) \
	Q3KR8(c, s, 3, sc, Z3, Vop, Z19, Z16) \
	Q3KR8(c, s, 4, sc, Z4, Vop, Z26, Z28) \
	Q3KR8(c, s, 5, sc, Z5, Vop, Z27, Z29) \
	Q3KR8(c, s, 6, sc, Z6, Vop, Z17, Z18) \
	Q3KR8(c, s, 7, sc, Z7, Vop, Z19, Z16)

// Q3KF8: row r's float lane sum of lane s += dd * float(a - Z24).
#define Q3KF8(a, r, s) \
	VPSUBD Z24, a, a \
	VCVTDQ2PS a, a \
	VMULPS (2048+64*r)(SP), a, a \
	VADDPS (2560+512*r+64*s)(SP), a, a \
	VMOVUPS a, (2560+512*r+64*s)(SP)

#define Q3KLANE8(s) \
	VPXORD Z24, Z24, Z24 \
	VMOVDQU32 (288+64*s)(SI), Z23 \
	VMOVDQU32 (800+64*s)(SI), Z22 \
	Q3KC8(0, 0, s, Z8, VPSLLW, 2, Z23, Z31, VPMADDWD) \
	Q3KC8(1, 1, s, Z9, VPSLLW, 1, Z23, Z31, VPDPWSSD) \
	Q3KC8(2, 2, s, Z10, VPSRLW, 0, Z23, Z31, VPDPWSSD) \
	Q3KC8(3, 3, s, Z11, VPSRLW, 1, Z23, Z31, VPDPWSSD) \
	VMOVDQU32 (1312+64*s)(SI), Z22 \
	Q3KC8(4, 0, s, Z12, VPSRLW, 2, Z23, Z31, VPDPWSSD) \
	Q3KC8(5, 1, s, Z13, VPSRLW, 3, Z23, Z31, VPDPWSSD) \
	Q3KC8(6, 2, s, Z14, VPSRLW, 4, Z23, Z31, VPDPWSSD) \
	Q3KC8(7, 3, s, Z15, VPSRLW, 5, Z23, Z31, VPDPWSSD) \
	VPSLLD $7, Z24, Z24 \
	Q3KF8(Z0, 0, s) \
	Q3KF8(Z1, 1, s) \
	Q3KF8(Z2, 2, s) \
	Q3KF8(Z3, 3, s) \
	Q3KF8(Z4, 4, s) \
	Q3KF8(Z5, 5, s) \
	Q3KF8(Z6, 6, s) \
	Q3KF8(Z7, 7, s)

// Q3KOUT8: row r's result, zero plus lanes 0..7, to (AX). Z1 is zero.
#define Q3KOUT8(r) \
	VMOVAPS Z1, Z0 \
	ADDLANES8(2560+512*r) \
	VMOVUPS Z0, (AX) \
	ADDQ BX, AX

// func gemmQ3KP8(w *byte, nb int, x *q8K, xstride uintptr, aux *q8KAux, auxstride uintptr, out *float32, ostride uintptr, pf *byte)
TEXT ·gemmQ3KP8(SB), $6656-72
	MOVQ w+0(FP), SI
	MOVQ nb+8(FP), CX
	MOVQ x+16(FP), DI
	MOVQ xstride+24(FP), BX
	MOVQ aux+32(FP), DX
	MOVQ auxstride+40(FP), R9
	MOVQ pf+64(FP), R14
	VPBROADCASTD kq03<>(SB), Z20
	VPBROADCASTD kq04<>(SB), Z21
	VPBROADCASTD kq01<>(SB), Z30
	VPXORD Z22, Z22, Z22
	ZST8(2560)
	ZST8(3072)
	ZST8(3584)
	ZST8(4096)
	ZST8(4608)
	ZST8(5120)
	ZST8(5632)
	ZST8(6144)
	TESTQ CX, CX
	JZ    q3kp8done
q3kp8loop:
	VPBROADCASTD kq80<>(SB), Z31
	VCVTPH2PS (SI), Z16
	MOVQ DI, AX
	MOVQ DX, R8
	Q3KXR(0)
	Q3KXR(1)
	Q3KXR(2)
	Q3KXR(3)
	Q3KXR(4)
	Q3KXR(5)
	Q3KXR(6)
	Q3KXR(7)
	VPMOVSXBW 32(SI), Z8
	VPMOVSXBW 64(SI), Z9
	VPMOVSXBW 96(SI), Z10
	VPMOVSXBW 128(SI), Z11
	VPMOVSXBW 160(SI), Z12
	VPMOVSXBW 192(SI), Z13
	VPMOVSXBW 224(SI), Z14
	VPMOVSXBW 256(SI), Z15
	Q3KLANE8(0)
	PF4(0)
	Q3KLANE8(1)
	PF4(4)
	Q3KLANE8(2)
	PF4(8)
	Q3KLANE8(3)
	PF4(12)
	Q3KLANE8(4)
	PF4(16)
	Q3KLANE8(5)
	PF4(20)
	Q3KLANE8(6)
	PF4(24)
	Q3KLANE8(7)
	PF1(28)
	ADDQ $1824, SI
	ADDQ $292, DI
	ADDQ $96, DX
	ADDQ $1824, R14
	DECQ CX
	JNZ  q3kp8loop
q3kp8done:
	MOVQ out+48(FP), AX
	MOVQ ostride+56(FP), BX
	VPXORD Z1, Z1, Z1
	Q3KOUT8(0)
	Q3KOUT8(1)
	Q3KOUT8(2)
	Q3KOUT8(3)
	Q3KOUT8(4)
	Q3KOUT8(5)
	Q3KOUT8(6)
	Q3KOUT8(7)
	VZEROUPPER
	RET

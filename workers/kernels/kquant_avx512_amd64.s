//go:build amd64 && !purego

#include "textflag.h"
#include "prefetch_amd64.h"
#include "avx512_amd64.h"

// AVX-512 VNNI kernels for K-quant weights repacked into 16-row groups
// (repack.go), dotted with Q8_K activations (292-byte q8K blocks) and their
// side data (96-byte q8KAux: d, the 32-element sum pairs, 32 times the
// 16-element sums). P4 kernels take 4 activation rows, P1 kernels one: Q4_K,
// Q6_K, IQ4_XS and Q2_K have both (Q3_K and Q5_K run the AVX2 kernels of
// kgemm_avx2_amd64.s on this path too). Per super-block every integer sum is
// exact and the float
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
// decode_share_of_bound, 6 alternated rounds: 0.89 to 0.93), as the same
// touch did for the AVX-512 Q5_K kernel this path once had. The loads go to
// R15, unused.
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

DATA kq03<>+0(SB)/4, $0x03030303
GLOBL kq03<>(SB), RODATA, $4

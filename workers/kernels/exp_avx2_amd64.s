//go:build amd64 && !purego

#include "textflag.h"

// Vector exp for the AVX2 path, bitwise equal to math.Exp on amd64 with FMA
// as the AVX-512 kernel (exp_avx512_amd64.s) is: the same reduction,
// polynomial and operation order, 4 float64 lanes at a time. AVX2 has 16
// vector registers and no broadcast operands, so the constants are read
// from memory, each stored four times. Lanes outside [-708, 709] are left
// to the caller, as there.

#define C4(off, v) \
	DATA expc4<>+(off+0)(SB)/8, v \
	DATA expc4<>+(off+8)(SB)/8, v \
	DATA expc4<>+(off+16)(SB)/8, v \
	DATA expc4<>+(off+24)(SB)/8, v

C4(0, $1.4426950408889634073599246810018920)   // log2(e)
C4(32, $0.69314718055966295651160180568695068359375) // ln2, upper
C4(64, $0.28235290563031577122588448175013436025525412068e-12) // ln2, lower
C4(96, $0.0625)
C4(128, $2.4801587301587301587e-5)
C4(160, $1.9841269841269841270e-4)
C4(192, $1.3888888888888888889e-3)
C4(224, $8.3333333333333333333e-3)
C4(256, $4.1666666666666666667e-2)
C4(288, $1.6666666666666666667e-1)
C4(320, $0.5)
C4(352, $1.0)
C4(384, $2.0)
C4(416, $-708.0)
C4(448, $709.0)
C4(480, $1023)
GLOBL expc4<>(SB), RODATA, $512

// EXPRANGE4: jump to fail unless every lane of Y0 (float64) is within
// [-708, 709]; uses AX, Y1, Y2.
#define EXPRANGE4(fail) \
	VCMPPD $0x1d, expc4<>+416(SB), Y0, Y1 \
	VCMPPD $0x12, expc4<>+448(SB), Y0, Y2 \
	VANDPD Y2, Y1, Y1 \
	VMOVMSKPD Y1, AX \
	CMPL AX, $15 \
	JNE  fail

// EXPPD4: Y0 = exp(Y0), 4 float64 lanes, math.Exp's arithmetic; uses Y1,
// Y2, Y3 (Y13 = 1.0, Y14 = 2.0 as float64s).
#define EXPPD4 \
	VMULPD expc4<>+0(SB), Y0, Y1 \
	VCVTPD2DQY Y1, X2 \
	VCVTDQ2PD X2, Y1 \
	VFNMADD231PD expc4<>+32(SB), Y1, Y0 \
	VFNMADD231PD expc4<>+64(SB), Y1, Y0 \
	VMULPD expc4<>+96(SB), Y0, Y0 \
	VMOVUPD expc4<>+128(SB), Y1 \
	VFMADD213PD expc4<>+160(SB), Y0, Y1 \
	VFMADD213PD expc4<>+192(SB), Y0, Y1 \
	VFMADD213PD expc4<>+224(SB), Y0, Y1 \
	VFMADD213PD expc4<>+256(SB), Y0, Y1 \
	VFMADD213PD expc4<>+288(SB), Y0, Y1 \
	VFMADD213PD expc4<>+320(SB), Y0, Y1 \
	VFMADD213PD Y13, Y0, Y1 \
	VMULPD Y1, Y0, Y0 \
	VADDPD Y14, Y0, Y1 \
	VMULPD Y1, Y0, Y0 \
	VADDPD Y14, Y0, Y1 \
	VMULPD Y1, Y0, Y0 \
	VADDPD Y14, Y0, Y1 \
	VMULPD Y1, Y0, Y0 \
	VADDPD Y14, Y0, Y1 \
	VFMADD213PD Y13, Y1, Y0 \
	VPMOVSXDQ X2, Y3 \
	VPADDQ expc4<>+480(SB), Y3, Y3 \
	VPSLLQ $52, Y3, Y3 \
	VMULPD Y3, Y0, Y0

// func expShiftAVX2(dst, src *float32, n int, m float32) int
// dst[i] = float32(math.Exp(float64(src[i] - m))) for i < n (a multiple of
// 4), stopping before the first group of 4 with a lane outside [-708, 709];
// returns how many elements it finished.
TEXT ·expShiftAVX2(SB), NOSPLIT, $0-40
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	VBROADCASTSS m+24(FP), X15
	VMOVUPD expc4<>+384(SB), Y14 // 2.0
	VMOVUPD expc4<>+352(SB), Y13 // 1.0
	XORQ DX, DX
e2loop:
	CMPQ DX, CX
	JGE  e2done
	VMOVUPS (SI)(DX*4), X0
	VSUBPS X15, X0, X0
	VCVTPS2PD X0, Y0
	EXPRANGE4(e2done)
	EXPPD4
	VCVTPD2PSY Y0, X0
	VMOVUPS X0, (DI)(DX*4)
	ADDQ $4, DX
	JMP  e2loop
e2done:
	MOVQ DX, ret+32(FP)
	VZEROUPPER
	RET

// func swigluAVX2(dst, gate, up *float32, n int) int
// dst[i] = float32(g/(1+e)) * up[i], e = float32(math.Exp(float64(-g))), for
// i < n (a multiple of 4), stopping before the first group of 4 whose
// argument is outside [-708, 709]; returns how many elements it finished.
TEXT ·swigluAVX2(SB), NOSPLIT, $0-40
	MOVQ dst+0(FP), DI
	MOVQ gate+8(FP), SI
	MOVQ up+16(FP), BX
	MOVQ n+24(FP), CX
	VMOVUPD expc4<>+384(SB), Y14 // 2.0
	VMOVUPD expc4<>+352(SB), Y13 // 1.0
	MOVL $0x80000000, AX
	VMOVD AX, X12
	VPBROADCASTD X12, X12 // the float32 sign bit
	MOVL $0x3f800000, AX
	VMOVD AX, X11
	VPBROADCASTD X11, X11 // float32 1.0
	XORQ DX, DX
sg2loop:
	CMPQ DX, CX
	JGE  sg2done
	VMOVUPS (SI)(DX*4), X4
	VXORPS X12, X4, X0
	VCVTPS2PD X0, Y0
	EXPRANGE4(sg2done)
	EXPPD4
	VCVTPD2PSY Y0, X0
	VADDPS X11, X0, X0
	VDIVPS X0, X4, X4
	VMULPS (BX)(DX*4), X4, X4
	VMOVUPS X4, (DI)(DX*4)
	ADDQ $4, DX
	JMP  sg2loop
sg2done:
	MOVQ DX, ret+32(FP)
	VZEROUPPER
	RET

//go:build amd64 && !purego

#include "textflag.h"

// Vector exp, bitwise equal to math.Exp on amd64 with FMA (the path the
// runtime takes on every CPU with the AVX2 kernels): the same Shibata
// reduction and Taylor polynomial, the same fused operations in the same
// order, 8 float64 lanes at a time, from AVX-512. Lanes outside
// [-708, 709] (where math.Exp goes through its denormal, overflow or
// non-finite branches) are left to the caller: a kernel stops at the first
// group of 8 holding one and returns how many elements it finished.

DATA expc<>+0(SB)/8, $1.4426950408889634073599246810018920   // log2(e)
DATA expc<>+8(SB)/8, $0.69314718055966295651160180568695068359375 // ln2, upper
DATA expc<>+16(SB)/8, $0.28235290563031577122588448175013436025525412068e-12 // ln2, lower
DATA expc<>+24(SB)/8, $0.0625
DATA expc<>+32(SB)/8, $2.4801587301587301587e-5
DATA expc<>+40(SB)/8, $1.9841269841269841270e-4
DATA expc<>+48(SB)/8, $1.3888888888888888889e-3
DATA expc<>+56(SB)/8, $8.3333333333333333333e-3
DATA expc<>+64(SB)/8, $4.1666666666666666667e-2
DATA expc<>+72(SB)/8, $1.6666666666666666667e-1
DATA expc<>+80(SB)/8, $0.5
DATA expc<>+88(SB)/8, $1.0
DATA expc<>+96(SB)/8, $2.0
DATA expc<>+104(SB)/8, $-708.0
DATA expc<>+112(SB)/8, $709.0
DATA expc<>+120(SB)/8, $1023
GLOBL expc<>(SB), RODATA, $128

DATA expf32<>+0(SB)/4, $0x80000000 // sign
DATA expf32<>+4(SB)/4, $0x3f800000 // 1.0
GLOBL expf32<>(SB), RODATA, $8

#define EXPCONSTS \
	VBROADCASTSD expc<>+0(SB), Z20 \
	VBROADCASTSD expc<>+8(SB), Z21 \
	VBROADCASTSD expc<>+16(SB), Z22 \
	VBROADCASTSD expc<>+24(SB), Z23 \
	VBROADCASTSD expc<>+32(SB), Z24 \
	VBROADCASTSD expc<>+40(SB), Z25 \
	VBROADCASTSD expc<>+48(SB), Z26 \
	VBROADCASTSD expc<>+56(SB), Z27 \
	VBROADCASTSD expc<>+64(SB), Z28 \
	VBROADCASTSD expc<>+72(SB), Z29 \
	VBROADCASTSD expc<>+80(SB), Z30 \
	VBROADCASTSD expc<>+88(SB), Z31 \
	VBROADCASTSD expc<>+96(SB), Z19 \
	VBROADCASTSD expc<>+104(SB), Z18 \
	VBROADCASTSD expc<>+112(SB), Z17 \
	VPBROADCASTQ expc<>+120(SB), Z16

// EXPRANGE: K1 = lanes of Z0 within [-708, 709]; jumps to bad unless all 8 are.
#define EXPRANGE(bad) \
	VCMPPD $0x1d, Z18, Z0, K1 \
	VCMPPD $0x12, Z17, Z0, K1, K1 \
	KMOVB K1, AX \
	CMPB AL, $0xff \
	JNE bad

// EXPPD: Z0 = exp(Z0) for 8 in-range float64 lanes; uses Z1..Z3, Y2.
#define EXPPD \
	VMULPD Z20, Z0, Z1 \
	VCVTPD2DQ Z1, Y2 \
	VCVTDQ2PD Y2, Z1 \
	VFNMADD231PD Z21, Z1, Z0 \
	VFNMADD231PD Z22, Z1, Z0 \
	VMULPD Z23, Z0, Z0 \
	VMOVAPD Z24, Z1 \
	VFMADD213PD Z25, Z0, Z1 \
	VFMADD213PD Z26, Z0, Z1 \
	VFMADD213PD Z27, Z0, Z1 \
	VFMADD213PD Z28, Z0, Z1 \
	VFMADD213PD Z29, Z0, Z1 \
	VFMADD213PD Z30, Z0, Z1 \
	VFMADD213PD Z31, Z0, Z1 \
	VMULPD Z1, Z0, Z0 \
	VADDPD Z19, Z0, Z1 \
	VMULPD Z1, Z0, Z0 \
	VADDPD Z19, Z0, Z1 \
	VMULPD Z1, Z0, Z0 \
	VADDPD Z19, Z0, Z1 \
	VMULPD Z1, Z0, Z0 \
	VADDPD Z19, Z0, Z1 \
	VFMADD213PD Z31, Z1, Z0 \
	VPMOVSXDQ Y2, Z3 \
	VPADDQ Z16, Z3, Z3 \
	VPSLLQ $52, Z3, Z3 \
	VMULPD Z3, Z0, Z0

// func expShiftAVX512(dst, src *float32, n int, m float32) int
// dst[i] = float32(math.Exp(float64(src[i] - m))) for i < n (a multiple of 8).
TEXT ·expShiftAVX512(SB), NOSPLIT, $0-40
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	VBROADCASTSS m+24(FP), Y15
	EXPCONSTS
	XORQ DX, DX
esloop:
	CMPQ DX, CX
	JGE  esdone
	VMOVUPS (SI)(DX*4), Y0
	VSUBPS Y15, Y0, Y0
	VCVTPS2PD Y0, Z0
	EXPRANGE(esdone)
	EXPPD
	VCVTPD2PS Z0, Y0
	VMOVUPS Y0, (DI)(DX*4)
	ADDQ $8, DX
	JMP  esloop
esdone:
	MOVQ DX, ret+32(FP)
	VZEROUPPER
	RET

// func swigluAVX512(dst, gate, up *float32, n int) int
// dst[i] = float32(g/(1+e)) * up[i], e = float32(math.Exp(float64(-g))), for
// i < n (a multiple of 8).
TEXT ·swigluAVX512(SB), NOSPLIT, $0-40
	MOVQ dst+0(FP), DI
	MOVQ gate+8(FP), SI
	MOVQ up+16(FP), BX
	MOVQ n+24(FP), CX
	VBROADCASTSS expf32<>+0(SB), Y14
	VBROADCASTSS expf32<>+4(SB), Y13
	EXPCONSTS
	XORQ DX, DX
sgloop:
	CMPQ DX, CX
	JGE  sgdone
	VMOVUPS (SI)(DX*4), Y4
	VXORPS Y14, Y4, Y0
	VCVTPS2PD Y0, Z0
	EXPRANGE(sgdone)
	EXPPD
	VCVTPD2PS Z0, Y0
	VADDPS Y13, Y0, Y0
	VDIVPS Y0, Y4, Y4
	VMULPS (BX)(DX*4), Y4, Y4
	VMOVUPS Y4, (DI)(DX*4)
	ADDQ $8, DX
	JMP  sgloop
sgdone:
	MOVQ DX, ret+32(FP)
	VZEROUPPER
	RET

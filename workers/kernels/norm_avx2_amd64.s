//go:build amd64 && !purego

#include "textflag.h"
#include "avx2_amd64.h"

// The vector parts of LayerNorm, on the AVX2 and AVX-512 paths alike.

// func sqDevF64AVX2(x *float32, n int, mean float32) float64
// The sum over x[:n] (n a multiple of 8) of float64(d*d), d = x[i]-mean and
// d*d in float32: element i into lane i%8 in order, the lanes then added as
// sumF64AVX2 adds them.
TEXT ·sqDevF64AVX2(SB), NOSPLIT, $0-32
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	VBROADCASTSS mean+16(FP), Y4
	VXORPD Y0, Y0, Y0
	VXORPD Y1, Y1, Y1
	XORQ DX, DX
	TESTQ CX, CX
	JZ    sqdred
sqdloop:
	VMOVUPS (SI)(DX*4), Y2
	VSUBPS Y4, Y2, Y2
	VMULPS Y2, Y2, Y2
	VCVTPS2PD X2, Y3
	VEXTRACTF128 $1, Y2, X2
	VCVTPS2PD X2, Y2
	VADDPD Y3, Y0, Y0
	VADDPD Y2, Y1, Y1
	ADDQ $8, DX
	CMPQ DX, CX
	JLT  sqdloop
sqdred:
	SUMF64LANES(ret+24(FP))
	VZEROUPPER
	RET

// func normAffineAVX2(dst, x, w, b *float32, n int, mean, scale float32)
// dst[i] = ((x[i]-mean)*scale)*w[i] + b[i] for i < n (a multiple of 8), each
// operation rounded on its own (no FMA). dst may be x.
TEXT ·normAffineAVX2(SB), NOSPLIT, $0-48
	MOVQ dst+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ w+16(FP), R8
	MOVQ b+24(FP), R9
	MOVQ n+32(FP), CX
	VBROADCASTSS mean+40(FP), Y4
	VBROADCASTSS scale+44(FP), Y5
	XORQ DX, DX
	TESTQ CX, CX
	JZ    nadone
naloop:
	VMOVUPS (SI)(DX*4), Y2
	VSUBPS Y4, Y2, Y2
	VMULPS Y5, Y2, Y2
	VMULPS (R8)(DX*4), Y2, Y2
	VADDPS (R9)(DX*4), Y2, Y2
	VMOVUPS Y2, (DI)(DX*4)
	ADDQ $8, DX
	CMPQ DX, CX
	JLT  naloop
nadone:
	VZEROUPPER
	RET

// func normScaleAVX2(dst, x, w *float32, n int, scale float32)
// dst[i] = (x[i]*scale)*w[i] for i < n (a multiple of 8), each product
// rounded on its own (RMSNorm's second pass). dst may be x.
TEXT ·normScaleAVX2(SB), NOSPLIT, $0-36
	MOVQ dst+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ w+16(FP), R8
	MOVQ n+24(FP), CX
	VBROADCASTSS scale+32(FP), Y5
	XORQ DX, DX
	TESTQ CX, CX
	JZ    nsdone
nsloop:
	VMULPS (SI)(DX*4), Y5, Y2
	VMULPS (R8)(DX*4), Y2, Y2
	VMOVUPS Y2, (DI)(DX*4)
	ADDQ $8, DX
	CMPQ DX, CX
	JLT  nsloop
nsdone:
	VZEROUPPER
	RET

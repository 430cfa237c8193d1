//go:build amd64 && !purego

#include "textflag.h"

// The vector parts of Softmax and Scale on the AVX-512 path.

// func maxF32AVX512(x *float32, n int) float32
// The largest of x[:n] (n a multiple of 16), NaNs skipped, -Inf when all are
// NaN: what the scalar loop `if v > m { m = v }` from -Inf gives.
TEXT ·maxF32AVX512(SB), NOSPLIT, $0-20
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	MOVL $0xff800000, AX
	VPBROADCASTD AX, Z0
	VMOVAPS Z0, Z1
	XORQ DX, DX
	CMPQ CX, $32
	JLT  mx16
mx32:
	VMOVUPS (SI)(DX*4), Z2
	VMOVUPS 64(SI)(DX*4), Z3
	VMAXPS Z0, Z2, Z0 // x > m ? x : m (a NaN x keeps m)
	VMAXPS Z1, Z3, Z1
	ADDQ $32, DX
	LEAQ 32(DX), BX
	CMPQ BX, CX
	JLE  mx32
mx16:
	CMPQ DX, CX
	JGE  mxred
	VMOVUPS (SI)(DX*4), Z2
	VMAXPS Z0, Z2, Z0
	ADDQ $16, DX
mxred:
	VMAXPS Z0, Z1, Z0
	VEXTRACTF64X4 $1, Z0, Y1
	VMAXPS Y0, Y1, Y0
	VEXTRACTF128 $1, Y0, X1
	VMAXPS X0, X1, X0
	VPERMILPS $0x4e, X0, X1
	VMAXPS X0, X1, X0
	VPERMILPS $0xb1, X0, X1
	VMAXPS X0, X1, X0
	VMOVSS X0, ret+16(FP)
	VZEROUPPER
	RET

// func sumF64AVX512(x *float32, n int) float64
// The sum of x[:n] (n a multiple of 8) in float64: eight lanes, element i
// into lane i%8 in order, the lanes then added pairwise.
TEXT ·sumF64AVX512(SB), NOSPLIT, $0-24
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	VXORPD Z0, Z0, Z0
	XORQ DX, DX
	TESTQ CX, CX
	JZ    smred
smloop:
	VCVTPS2PD (SI)(DX*4), Z1
	VADDPD Z1, Z0, Z0
	ADDQ $8, DX
	CMPQ DX, CX
	JLT  smloop
smred:
	VEXTRACTF64X4 $1, Z0, Y1
	VADDPD Y1, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPD X1, X0, X0
	VPERMILPD $1, X0, X1
	VADDSD X1, X0, X0
	VMOVSD X0, ret+16(FP)
	VZEROUPPER
	RET

// func scaleAVX512(x *float32, n int, s float32)
// x[i] *= s for i < n (a multiple of 16).
TEXT ·scaleAVX512(SB), NOSPLIT, $0-20
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	VBROADCASTSS s+16(FP), Z1
	XORQ DX, DX
	TESTQ CX, CX
	JZ    scdone
scloop:
	VMULPS (SI)(DX*4), Z1, Z0
	VMOVUPS Z0, (SI)(DX*4)
	ADDQ $16, DX
	CMPQ DX, CX
	JLT  scloop
scdone:
	VZEROUPPER
	RET

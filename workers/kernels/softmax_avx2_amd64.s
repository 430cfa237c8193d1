//go:build amd64 && !purego

#include "textflag.h"
#include "avx2_amd64.h"

// The vector parts of Softmax and Scale on the AVX2 path, the AVX-512 ones
// (softmax_avx512_amd64.s) at half the width: the same maximum, the same
// eight float64 lanes added in the same order, the same products.

// func maxF32AVX2(x *float32, n int) float32
// The largest of x[:n] (n a multiple of 8), NaNs skipped, -Inf when all are
// NaN: what the scalar loop `if v > m { m = v }` from -Inf gives.
TEXT ·maxF32AVX2(SB), NOSPLIT, $0-20
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	MOVL $0xff800000, AX
	VMOVD AX, X0
	VPBROADCASTD X0, Y0
	VMOVAPS Y0, Y1
	XORQ DX, DX
	CMPQ CX, $16
	JLT  mx8
mx16:
	VMOVUPS (SI)(DX*4), Y2
	VMOVUPS 32(SI)(DX*4), Y3
	VMAXPS Y0, Y2, Y0 // x > m ? x : m (a NaN x keeps m)
	VMAXPS Y1, Y3, Y1
	ADDQ $16, DX
	LEAQ 16(DX), BX
	CMPQ BX, CX
	JLE  mx16
mx8:
	CMPQ DX, CX
	JGE  mxred
	VMOVUPS (SI)(DX*4), Y2
	VMAXPS Y0, Y2, Y0
	ADDQ $8, DX
mxred:
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

// func sumF64AVX2(x *float32, n int) float64
// The sum of x[:n] (n a multiple of 8) in float64: eight lanes (0..3 in Y0,
// 4..7 in Y1), element i into lane i%8 in order, the lanes then added
// pairwise as sumF64AVX512 adds them.
TEXT ·sumF64AVX2(SB), NOSPLIT, $0-24
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	VXORPD Y0, Y0, Y0
	VXORPD Y1, Y1, Y1
	XORQ DX, DX
	TESTQ CX, CX
	JZ    smred
smloop:
	VCVTPS2PD (SI)(DX*4), Y2
	VCVTPS2PD 16(SI)(DX*4), Y3
	VADDPD Y2, Y0, Y0
	VADDPD Y3, Y1, Y1
	ADDQ $8, DX
	CMPQ DX, CX
	JLT  smloop
smred:
	SUMF64LANES(ret+16(FP))
	VZEROUPPER
	RET

// func scaleAVX2(x *float32, n int, s float32)
// x[i] *= s for i < n (a multiple of 8).
TEXT ·scaleAVX2(SB), NOSPLIT, $0-20
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	VBROADCASTSS s+16(FP), Y1
	XORQ DX, DX
	TESTQ CX, CX
	JZ    scdone
scloop:
	VMULPS (SI)(DX*4), Y1, Y0
	VMOVUPS Y0, (SI)(DX*4)
	ADDQ $8, DX
	CMPQ DX, CX
	JLT  scloop
scdone:
	VZEROUPPER
	RET

//go:build amd64 && !purego

#include "textflag.h"

// func geluAVX512(dst, x *float32, n int, tab *float32)
// geluAVX2 (gelu_avx2_amd64.s) 16 elements at a time, n a multiple of 16.
TEXT ·geluAVX512(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ n+16(FP), CX
	MOVQ tab+24(FP), DX
	MOVL $0xc1200000, AX // -10
	VPBROADCASTD AX, Z14
	MOVL $0x41200000, AX // 10
	VPBROADCASTD AX, Z15
	VPXORD Z13, Z13, Z13
	SHRQ $4, CX
	JZ   geluavx512done
geluavx512loop:
	VMOVUPS (SI), Z0
	VCVTPS2PH $0, Z0, Y1
	VPMOVZXWD Y1, Z1
	KXNORW K1, K1, K1
	VPGATHERDD (DX)(Z1*4), K1, Z3
	VCMPPS $0x1d, Z15, Z0, K2 // x >= 10
	VMOVAPS Z0, K2, Z3
	VCMPPS $0x12, Z14, Z0, K3 // x <= -10
	VMOVAPS Z13, K3, Z3
	VMOVUPS Z3, (DI)
	ADDQ $64, SI
	ADDQ $64, DI
	DECQ CX
	JNZ  geluavx512loop
geluavx512done:
	VZEROUPPER
	RET

//go:build amd64 && !purego

#include "textflag.h"

// func geluAVX2(dst, x *float32, n int, tab *float32)
// GELU of x[:n] (n a multiple of 8) into dst, as the portable GELU computes
// it: x rounded to half (VCVTPS2PH, to nearest even) indexes tab, the table of
// ggml's half-rounded GELU as float32; 0 from -10 down, x from 10 up (NaN
// fails both tests and takes the table's entry). dst may be x.
TEXT ·geluAVX2(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ n+16(FP), CX
	MOVQ tab+24(FP), DX
	MOVL $0xc1200000, AX // -10
	VMOVD AX, X14
	VPBROADCASTD X14, Y14
	MOVL $0x41200000, AX // 10
	VMOVD AX, X15
	VPBROADCASTD X15, Y15
	SHRQ $3, CX
	JZ   geluavx2done
geluavx2loop:
	VMOVUPS (SI), Y0
	VCVTPS2PH $0, Y0, X1
	VPMOVZXWD X1, Y1
	VPCMPEQD Y2, Y2, Y2
	VPGATHERDD Y2, (DX)(Y1*4), Y3
	VCMPPS $0x1d, Y15, Y0, Y4 // x >= 10
	VBLENDVPS Y4, Y0, Y3, Y3
	VCMPPS $0x12, Y14, Y0, Y5 // x <= -10
	VANDNPS Y3, Y5, Y3
	VMOVUPS Y3, (DI)
	ADDQ $32, SI
	ADDQ $32, DI
	DECQ CX
	JNZ  geluavx2loop
geluavx2done:
	VZEROUPPER
	RET

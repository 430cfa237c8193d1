//go:build amd64 && !purego

#include "textflag.h"

// AMX kernel for Q8_0 (amx.go): per 32-element block, TDPBSUD multiplies a
// tile of up to 16 activation rows (tmm1: m rows of 32 signed bytes, read in
// place from the Q8_0 rows) by the packed group block (tmm2: 8 rows of 64
// unsigned bytes, the 16 weight rows' sign-flipped quants, 4 bytes a row per
// slice: repack.go's layout is the tile's) into tmm0 (m rows of 16 int32:
// each weight row's exact block sum plus 128*sum(x)). The sums go to the
// stack and take the AVX-512 kernels' float steps (QFIN in
// gemm_avx512_amd64.s), so each output is bitwise dotQ8Go's.
//
// Go's assembler does not know the AMX instructions; they are spelt as
// bytes, each with the registers it was assembled for (GNU as, Intel syntax).

// ldtilecfg [rax]
#define LDTILECFG_AX \
	BYTE $0xc4; BYTE $0xe2; BYTE $0x78; BYTE $0x49; BYTE $0x00

// tilezero tmm0
#define TILEZERO_T0 \
	BYTE $0xc4; BYTE $0xe2; BYTE $0x7b; BYTE $0x49; BYTE $0xc0

// tileloadd tmm1, [r8+r9*1]
#define TILELOADD_T1_R8_R9 \
	BYTE $0xc4; BYTE $0x82; BYTE $0x7b; BYTE $0x4b; BYTE $0x0c; BYTE $0x08

// tileloadd tmm2, [r10+r11*1]
#define TILELOADD_T2_R10_R11 \
	BYTE $0xc4; BYTE $0x82; BYTE $0x7b; BYTE $0x4b; BYTE $0x14; BYTE $0x1a

// tdpbsud tmm0, tmm1, tmm2: tmm0 += signed bytes of tmm1 x unsigned bytes of tmm2
#define TDPBSUD_T0_T1_T2 \
	BYTE $0xc4; BYTE $0xe2; BYTE $0x6a; BYTE $0x5e; BYTE $0xc1

// tilestored [r12+r11*1], tmm0
#define TILESTORED_R12_R11_T0 \
	BYTE $0xc4; BYTE $0x82; BYTE $0x7a; BYTE $0x4b; BYTE $0x04; BYTE $0x1c

// tilerelease
#define TILERELEASE \
	BYTE $0xc4; BYTE $0xe2; BYTE $0x78; BYTE $0x49; BYTE $0xc0

// QT: activation row r's block sums (row r of the C tile at 64*r(SP)) into
// its 16 outputs za, as QFIN: aux entry r of the block at 8*r(DX) (f32 d_x,
// int32 128*sum(x)); Z16 holds the 16 weight scales as f32.
#define QT(r, za) \
	VMOVDQU32 (64*r)(SP), Z17 \
	VPSUBD.BCST (8*r+4)(DX), Z17, Z17 \
	VCVTDQ2PS Z17, Z17 \
	VMULPS.BCST (8*r)(DX), Z16, Z18 \
	VMULPS Z17, Z18, Z18 \
	VADDPS Z18, za, za

// func gemmQ8AMX(w *byte, nb int, x *byte, xstride uintptr, m int, aux *q8Aux, out *[256]float32)
// Frame: the C tile's 16 rows of 64 bytes at 0(SP), the tile config at 1024(SP).
TEXT ·gemmQ8AMX(SB), $1088-56
	MOVQ w+0(FP), SI
	MOVQ nb+8(FP), CX
	MOVQ x+16(FP), R8
	MOVQ xstride+24(FP), R9
	MOVQ m+32(FP), BX
	MOVQ aux+40(FP), DX
	// The config: palette 1; colsb (uint16 at 16+2t) and rows (byte at
	// 48+t) of tmm0 (m x 64), tmm1 (m x 32) and tmm2 (8 x 64); the rest 0.
	VPXORD    Z16, Z16, Z16
	VMOVDQU64 Z16, 1024(SP)
	MOVB      $1, 1024(SP)
	MOVW      $64, 1040(SP)
	MOVW      $32, 1042(SP)
	MOVW      $64, 1044(SP)
	MOVB      BX, 1072(SP)
	MOVB      BX, 1073(SP)
	MOVB      $8, 1074(SP)
	LEAQ      1024(SP), AX
	LDTILECFG_AX
	LEAQ      0(SP), R12
	MOVQ      $64, R11
	ADDQ      $2, R8 // the first block's quants
	VPXORD    Z0, Z0, Z0
	VPXORD    Z1, Z1, Z1
	VPXORD    Z2, Z2, Z2
	VPXORD    Z3, Z3, Z3
	VPXORD    Z4, Z4, Z4
	VPXORD    Z5, Z5, Z5
	VPXORD    Z6, Z6, Z6
	VPXORD    Z7, Z7, Z7
	VPXORD    Z8, Z8, Z8
	VPXORD    Z9, Z9, Z9
	VPXORD    Z10, Z10, Z10
	VPXORD    Z11, Z11, Z11
	VPXORD    Z12, Z12, Z12
	VPXORD    Z13, Z13, Z13
	VPXORD    Z14, Z14, Z14
	VPXORD    Z15, Z15, Z15
	TESTQ     CX, CX
	JZ        q8amxdone

q8amxloop:
	TILEZERO_T0
	TILELOADD_T1_R8_R9
	LEAQ 32(SI), R10
	TILELOADD_T2_R10_R11
	TDPBSUD_T0_T1_T2
	TILESTORED_R12_R11_T0
	VCVTPH2PS (SI), Z16
	QT(0, Z0)
	QT(1, Z1)
	QT(2, Z2)
	QT(3, Z3)
	QT(4, Z4)
	QT(5, Z5)
	QT(6, Z6)
	QT(7, Z7)
	QT(8, Z8)
	QT(9, Z9)
	QT(10, Z10)
	QT(11, Z11)
	QT(12, Z12)
	QT(13, Z13)
	QT(14, Z14)
	QT(15, Z15)
	ADDQ $544, SI
	ADDQ $34, R8
	ADDQ $128, DX
	DECQ CX
	JNZ  q8amxloop

q8amxdone:
	TILERELEASE
	MOVQ      out+48(FP), AX
	VMOVUPS   Z0, (AX)
	VMOVUPS   Z1, 64(AX)
	VMOVUPS   Z2, 128(AX)
	VMOVUPS   Z3, 192(AX)
	VMOVUPS   Z4, 256(AX)
	VMOVUPS   Z5, 320(AX)
	VMOVUPS   Z6, 384(AX)
	VMOVUPS   Z7, 448(AX)
	VMOVUPS   Z8, 512(AX)
	VMOVUPS   Z9, 576(AX)
	VMOVUPS   Z10, 640(AX)
	VMOVUPS   Z11, 704(AX)
	VMOVUPS   Z12, 768(AX)
	VMOVUPS   Z13, 832(AX)
	VMOVUPS   Z14, 896(AX)
	VMOVUPS   Z15, 960(AX)
	VZEROUPPER
	RET

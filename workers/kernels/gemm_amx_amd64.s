//go:build amd64 && !purego && !amxemu

#include "textflag.h"

// AMX kernels for Q8_0 and Q4_0 (amx.go): per 32-element block, TDPBSUD multiplies a
// tile of up to 16 activation rows (tmm1: m rows of 32 signed bytes, read in
// place from the Q8_0 rows) by the packed group block (tmm2: 8 rows of 64
// unsigned bytes, the 16 weight rows' sign-flipped quants, 4 bytes a row per
// slice: repack.go's layout is the tile's) into tmm0 (m rows of 16 int32:
// each weight row's exact block sum plus 128*sum(x)). The sums go to the
// stack and take the AVX-512 kernels' float steps (QFIN in
// gemm_avx512_amd64.s), so each output is bitwise dotQ8Go's. Q4_0's packed
// block (4 slices of nibble bytes) is made a B tile on the stack first: the
// low nibbles are its rows 0..3 (elements 0..15), the high ones rows 4..7.
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

#define AMXFRAMEQ8 1088
#define AMXFRAMEQ4 1600
#define AMXFRAMEQ4K 3136
#define AMXFRAMEQ6K 3136

#include "amx_amd64.h"

//go:build amd64 && !purego && amxemu

#include "textflag.h"

// The AMX kernels (amx_amd64.h) with each tile instruction carried out by
// AVX-512 on tile images in the frame: tmm0 at 2048(SP), tmm1 at 3072(SP),
// tmm2 at 4096(SP), 64 bytes a row. Built only with the amxemu tag, for
// TestTileKernelAMX on CPUs without AMX: it checks everything around the
// tile instructions (config, pointers, strides, Q4_0's B tile, the float
// steps) but not the instructions themselves, which only a CPU with AMX
// runs. The emulation uses DI, R13..R15 and Z22..Z31, which the kernels
// leave free; the row count m is in BX throughout.

#define AMXFRAMEQ8 4608
#define AMXFRAMEQ4 4608

// The config is built but not read: the images' shapes are fixed.
#define LDTILECFG_AX

#define TILEZERO_T0 \
	VPXORD    Z31, Z31, Z31 \
	LEAQ      2048(SP), R13 \
	MOVQ      $16, R15 \
emuzero: \
	VMOVDQU64 Z31, (R13) \
	ADDQ      $64, R13 \
	DECQ      R15 \
	JNZ       emuzero

// tmm1: m rows of 32 bytes from R8, R9 apart.
#define TILELOADD_T1_R8_R9 \
	MOVQ    R8, R13 \
	LEAQ    3072(SP), R14 \
	MOVQ    BX, R15 \
emuloada: \
	VMOVDQU32 (R13), Y30 \
	VMOVDQU32 Y30, (R14) \
	ADDQ    R9, R13 \
	ADDQ    $64, R14 \
	DECQ    R15 \
	JNZ     emuloada

// tmm2: 8 rows of 64 bytes from R10, R11 apart.
#define TILELOADD_T2_R10_R11 \
	MOVQ      R10, R13 \
	LEAQ      4096(SP), R14 \
	MOVQ      $8, R15 \
emuloadb: \
	VMOVDQU64 (R13), Z30 \
	VMOVDQU64 Z30, (R14) \
	ADDQ      R11, R13 \
	ADDQ      $64, R14 \
	DECQ      R15 \
	JNZ       emuloadb

// tmm0 row r += over k4 < 8: tmm1 row r's signed bytes 4k4..4k4+3 times
// tmm2 row k4's unsigned bytes, column n's 4 at 4n: VPDPBUSD with the
// activation dword broadcast, as the AVX-512 kernels do.
#define TDPBSUD_T0_T1_T2 \
	VMOVDQU64 4096(SP), Z22 \
	VMOVDQU64 4160(SP), Z23 \
	VMOVDQU64 4224(SP), Z24 \
	VMOVDQU64 4288(SP), Z25 \
	VMOVDQU64 4352(SP), Z26 \
	VMOVDQU64 4416(SP), Z27 \
	VMOVDQU64 4480(SP), Z28 \
	VMOVDQU64 4544(SP), Z29 \
	LEAQ      3072(SP), R13 \
	LEAQ      2048(SP), R14 \
	MOVQ      BX, R15 \
emudot: \
	VMOVDQU32 (R14), Z30 \
	VPDPBUSD.BCST (R13), Z22, Z30 \
	VPDPBUSD.BCST 4(R13), Z23, Z30 \
	VPDPBUSD.BCST 8(R13), Z24, Z30 \
	VPDPBUSD.BCST 12(R13), Z25, Z30 \
	VPDPBUSD.BCST 16(R13), Z26, Z30 \
	VPDPBUSD.BCST 20(R13), Z27, Z30 \
	VPDPBUSD.BCST 24(R13), Z28, Z30 \
	VPDPBUSD.BCST 28(R13), Z29, Z30 \
	VMOVDQU32 Z30, (R14) \
	ADDQ      $64, R13 \
	ADDQ      $64, R14 \
	DECQ      R15 \
	JNZ       emudot

// m rows of tmm0 to R12, R11 apart.
#define TILESTORED_R12_R11_T0 \
	LEAQ      2048(SP), R13 \
	MOVQ      R12, R14 \
	MOVQ      BX, R15 \
emustore: \
	VMOVDQU64 (R13), Z30 \
	VMOVDQU64 Z30, (R14) \
	ADDQ      $64, R13 \
	ADDQ      R11, R14 \
	DECQ      R15 \
	JNZ       emustore

#define TILERELEASE

#include "amx_amd64.h"

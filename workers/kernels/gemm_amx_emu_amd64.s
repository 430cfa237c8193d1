//go:build amd64 && !purego && amxemu

#include "textflag.h"

// The AMX kernels (amx_amd64.h) with each tile instruction carried out by
// AVX-512 on tile images in the kernel's frame (tmm0 at 4096(SP), tmm1 at
// 5120(SP), tmm2 at 6144(SP), 64 bytes a row, the config at 6656(SP)): each
// instruction is a call to an amxEmu function below, which finds the images
// at DI. Built only with
// the amxemu tag, for TestTileKernelAMX and the amx path on CPUs without
// AMX: it checks everything around the tile instructions (config, pointers,
// strides, the B tiles built on the stack, the float steps) but not the
// instructions themselves, which only a CPU with AMX runs. The emulation
// uses DI, R13..R15 and Z22..Z31, which the kernels leave free around the
// tile instructions.

#define AMXFRAMEQ8 6784
#define AMXFRAMEQ4 6784
#define AMXFRAMEQ4K 6784
#define AMXFRAMEQ6K 6784

// The config (at AX) is copied to DI+2560; the emulation takes tmm0's and
// tmm1's row counts (bytes 48, 49), tmm1's bytes a row (16 or 32: the
// uint16 at 18) and tmm2's rows (byte 50) from it.
#define LDTILECFG_AX \
	LEAQ 4096(SP), DI \
	CALL ·amxEmuConfig(SB)

#define TILEZERO_T0 \
	LEAQ 4096(SP), DI \
	CALL ·amxEmuZero(SB)

#define TILELOADD_T1_R8_R9 \
	LEAQ 4096(SP), DI \
	CALL ·amxEmuLoadA(SB)

#define TILELOADD_T2_R10_R11 \
	LEAQ 4096(SP), DI \
	CALL ·amxEmuLoadB(SB)

#define TDPBSUD_T0_T1_T2 \
	LEAQ 4096(SP), DI \
	CALL ·amxEmuDot(SB)

#define TILESTORED_R12_R11_T0 \
	LEAQ 4096(SP), DI \
	CALL ·amxEmuStore(SB)

#define TILERELEASE

#include "amx_amd64.h"

// func amxEmuConfig(): the config at AX to DI+2560.
TEXT ·amxEmuConfig(SB), NOSPLIT, $0-0
	VMOVDQU64 (AX), Z31
	VMOVDQU64 Z31, 2560(DI)
	RET

// func amxEmuZero(): tmm0 (DI) = 0, all 16 rows.
TEXT ·amxEmuZero(SB), NOSPLIT, $0-0
	VPXORD    Z31, Z31, Z31
	MOVQ      DI, R13
	MOVQ      $16, R15
emuzero:
	VMOVDQU64 Z31, (R13)
	ADDQ      $64, R13
	DECQ      R15
	JNZ       emuzero
	RET

// func amxEmuLoadA(): tmm1 (DI+1024) = its rows of 16 or 32 bytes from R8,
// R9 apart (the rest of each image row 0).
TEXT ·amxEmuLoadA(SB), NOSPLIT, $0-0
	MOVQ      R8, R13
	LEAQ      1024(DI), R14
	MOVBQZX   2609(DI), R15
	VPXORD    Z31, Z31, Z31
emuloada:
	VMOVDQU64 Z31, (R14)
	CMPW      2578(DI), $16
	JEQ       emuloada16
	VMOVDQU32 (R13), Y30
	VMOVDQU32 Y30, (R14)
	JMP       emuloadanext
emuloada16:
	VMOVDQU32 (R13), X30
	VMOVDQU32 X30, (R14)
emuloadanext:
	ADDQ      R9, R13
	ADDQ      $64, R14
	DECQ      R15
	JNZ       emuloada
	RET

// func amxEmuLoadB(): tmm2 (DI+2048) = its rows of 64 bytes from R10, R11
// apart.
TEXT ·amxEmuLoadB(SB), NOSPLIT, $0-0
	MOVQ      R10, R13
	LEAQ      2048(DI), R14
	MOVBQZX   2610(DI), R15
emuloadb:
	VMOVDQU64 (R13), Z30
	VMOVDQU64 Z30, (R14)
	ADDQ      R11, R13
	ADDQ      $64, R14
	DECQ      R15
	JNZ       emuloadb
	RET

// func amxEmuDot(): tmm0 row r += over k4 < k/4 (k: tmm1's bytes a row):
// tmm1 row r's signed bytes 4k4..4k4+3 times tmm2 row k4's unsigned bytes,
// column n's 4 at 4n: VPDPBUSD with the activation dword broadcast, as the
// AVX-512 kernels do.
TEXT ·amxEmuDot(SB), NOSPLIT, $0-0
	VMOVDQU64 2048(DI), Z22
	VMOVDQU64 2112(DI), Z23
	VMOVDQU64 2176(DI), Z24
	VMOVDQU64 2240(DI), Z25
	VMOVDQU64 2304(DI), Z26
	VMOVDQU64 2368(DI), Z27
	VMOVDQU64 2432(DI), Z28
	VMOVDQU64 2496(DI), Z29
	LEAQ      1024(DI), R13
	MOVQ      DI, R14
	MOVBQZX   2608(DI), R15
emudot:
	VMOVDQU32 (R14), Z30
	VPDPBUSD.BCST (R13), Z22, Z30
	VPDPBUSD.BCST 4(R13), Z23, Z30
	VPDPBUSD.BCST 8(R13), Z24, Z30
	VPDPBUSD.BCST 12(R13), Z25, Z30
	CMPW      2578(DI), $16
	JEQ       emudotstore
	VPDPBUSD.BCST 16(R13), Z26, Z30
	VPDPBUSD.BCST 20(R13), Z27, Z30
	VPDPBUSD.BCST 24(R13), Z28, Z30
	VPDPBUSD.BCST 28(R13), Z29, Z30
emudotstore:
	VMOVDQU32 Z30, (R14)
	ADDQ      $64, R13
	ADDQ      $64, R14
	DECQ      R15
	JNZ       emudot
	RET

// func amxEmuStore(): tmm0's rows (DI) to R12, R11 apart.
TEXT ·amxEmuStore(SB), NOSPLIT, $0-0
	MOVQ      DI, R13
	MOVQ      R12, R14
	MOVBQZX   2608(DI), R15
emustore:
	VMOVDQU64 (R13), Z30
	VMOVDQU64 Z30, (R14)
	ADDQ      $64, R13
	ADDQ      R11, R14
	DECQ      R15
	JNZ       emustore
	RET

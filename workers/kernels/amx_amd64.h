// The AMX kernels' bodies (gemm_amx_amd64.s, amx.go), included by
// gemm_amx_amd64.s, which spells the AMX instructions as bytes, and by
// gemm_amx_emu_amd64.s (build tag amxemu), which carries them out with
// AVX-512 on tile images in the frame, so that everything around them runs
// on CPUs without AMX (TestTileKernelAMX). Each includer defines
// LDTILECFG_AX, TILEZERO_T0, TILELOADD_T1_R8_R9, TILELOADD_T2_R10_R11,
// TDPBSUD_T0_T1_T2, TILESTORED_R12_R11_T0, TILERELEASE and the frame sizes
// AMXFRAMEQ8 and AMXFRAMEQ4 (at least 1088 and 1600: the C rows at 0, Q4_0's
// B tile at 1024, the config at 1024 or 1536). The kernels keep Z22..Z31,
// DI and R13..R15 free for the emulation.

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

// AMXSETUP loads the arguments (SI weights, CX blocks, R8 the first
// block's activation quants, R9 their stride, DX aux), loads the tile
// config built at cfg(SP) (palette 1; colsb, a uint16 at 16+2t, and rows, a
// byte at 48+t, of tmm0: m x 64, tmm1: m x 32, tmm2: 8 x 64; the rest 0),
// points R12 at the C rows at 0(SP), sets R11 to 64 and zeroes Z0..Z15.
#define AMXSETUP(cfg) \
	MOVQ      w+0(FP), SI \
	MOVQ      nb+8(FP), CX \
	MOVQ      x+16(FP), R8 \
	MOVQ      xstride+24(FP), R9 \
	MOVQ      m+32(FP), BX \
	MOVQ      aux+40(FP), DX \
	VPXORD    Z16, Z16, Z16 \
	VMOVDQU64 Z16, cfg(SP) \
	MOVB      $1, cfg(SP) \
	MOVW      $64, (cfg+16)(SP) \
	MOVW      $32, (cfg+18)(SP) \
	MOVW      $64, (cfg+20)(SP) \
	MOVB      BX, (cfg+48)(SP) \
	MOVB      BX, (cfg+49)(SP) \
	MOVB      $8, (cfg+50)(SP) \
	LEAQ      cfg(SP), AX \
	LDTILECFG_AX \
	LEAQ      0(SP), R12 \
	MOVQ      $64, R11 \
	ADDQ      $2, R8 \
	VPXORD    Z0, Z0, Z0 \
	VPXORD    Z1, Z1, Z1 \
	VPXORD    Z2, Z2, Z2 \
	VPXORD    Z3, Z3, Z3 \
	VPXORD    Z4, Z4, Z4 \
	VPXORD    Z5, Z5, Z5 \
	VPXORD    Z6, Z6, Z6 \
	VPXORD    Z7, Z7, Z7 \
	VPXORD    Z8, Z8, Z8 \
	VPXORD    Z9, Z9, Z9 \
	VPXORD    Z10, Z10, Z10 \
	VPXORD    Z11, Z11, Z11 \
	VPXORD    Z12, Z12, Z12 \
	VPXORD    Z13, Z13, Z13 \
	VPXORD    Z14, Z14, Z14 \
	VPXORD    Z15, Z15, Z15

// AMXBLOCK: the block's product (B tile at R10, stride 64) into the C rows
// on the stack, then its float steps for the 16 rows; SI points at the
// block's 16 f16 weight scales.
#define AMXBLOCK \
	TILEZERO_T0 \
	TILELOADD_T1_R8_R9 \
	TILELOADD_T2_R10_R11 \
	TDPBSUD_T0_T1_T2 \
	TILESTORED_R12_R11_T0 \
	VCVTPH2PS (SI), Z16 \
	QT(0, Z0) \
	QT(1, Z1) \
	QT(2, Z2) \
	QT(3, Z3) \
	QT(4, Z4) \
	QT(5, Z5) \
	QT(6, Z6) \
	QT(7, Z7) \
	QT(8, Z8) \
	QT(9, Z9) \
	QT(10, Z10) \
	QT(11, Z11) \
	QT(12, Z12) \
	QT(13, Z13) \
	QT(14, Z14) \
	QT(15, Z15)

// AMXDONE releases the tiles and stores Z0..Z15, the 16 rows' outputs.
#define AMXDONE \
	TILERELEASE \
	MOVQ    out+48(FP), AX \
	VMOVUPS Z0, (AX) \
	VMOVUPS Z1, 64(AX) \
	VMOVUPS Z2, 128(AX) \
	VMOVUPS Z3, 192(AX) \
	VMOVUPS Z4, 256(AX) \
	VMOVUPS Z5, 320(AX) \
	VMOVUPS Z6, 384(AX) \
	VMOVUPS Z7, 448(AX) \
	VMOVUPS Z8, 512(AX) \
	VMOVUPS Z9, 576(AX) \
	VMOVUPS Z10, 640(AX) \
	VMOVUPS Z11, 704(AX) \
	VMOVUPS Z12, 768(AX) \
	VMOVUPS Z13, 832(AX) \
	VMOVUPS Z14, 896(AX) \
	VMOVUPS Z15, 960(AX) \
	VZEROUPPER

// Q4UNPACK: slice s of the block at SI (4 nibble bytes of each row) as B
// rows s (low nibbles) and 4+s (high) at 1024(SP); Z19 holds 0x0f bytes.
#define Q4UNPACK(s) \
	VMOVDQU64 (32+64*s)(SI), Z20 \
	VPANDD    Z19, Z20, Z21 \
	VMOVDQU64 Z21, (1024+64*s)(SP) \
	VPSRLW    $4, Z20, Z20 \
	VPANDD    Z19, Z20, Z20 \
	VMOVDQU64 Z20, (1280+64*s)(SP)

// func gemmQ8AMX(w *byte, nb int, x *byte, xstride uintptr, m int, aux *q8Aux, out *[256]float32)
// Frame: the C tile's 16 rows of 64 bytes at 0(SP), the tile config at 1024(SP).
TEXT ·gemmQ8AMX(SB), $AMXFRAMEQ8-56
	AMXSETUP(1024)
	TESTQ CX, CX
	JZ    q8amxdone

q8amxloop:
	LEAQ 32(SI), R10 // the packed block's slices are the B tile
	AMXBLOCK
	ADDQ $544, SI
	ADDQ $34, R8
	ADDQ $128, DX
	DECQ CX
	JNZ  q8amxloop

q8amxdone:
	AMXDONE
	RET

// func gemmQ4AMX(w *byte, nb int, x *byte, xstride uintptr, m int, aux *q8Aux, out *[256]float32)
// Frame: the C rows at 0(SP), the B tile at 1024(SP), the config at 1536(SP).
TEXT ·gemmQ4AMX(SB), $AMXFRAMEQ4-56
	AMXSETUP(1536)
	MOVL         $0x0f0f0f0f, AX
	VPBROADCASTD AX, Z19
	LEAQ         1024(SP), R10
	TESTQ        CX, CX
	JZ           q4amxdone

q4amxloop:
	Q4UNPACK(0)
	Q4UNPACK(1)
	Q4UNPACK(2)
	Q4UNPACK(3)
	AMXBLOCK
	ADDQ $288, SI
	ADDQ $34, R8
	ADDQ $128, DX
	DECQ CX
	JNZ  q4amxloop

q4amxdone:
	AMXDONE
	RET

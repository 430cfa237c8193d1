// The AMX kernels' bodies (gemm_amx_amd64.s, amx.go), included by
// gemm_amx_amd64.s, which spells the AMX instructions as bytes, and by
// gemm_amx_emu_amd64.s (build tag amxemu), which carries them out with
// AVX-512 on tile images in the frame, so that everything around them runs
// on CPUs without AMX (TestTileKernelAMX). Each includer defines
// LDTILECFG_AX, TILEZERO_T0, TILELOADD_T1_R8_R9, TILELOADD_T2_R10_R11,
// TDPBSUD_T0_T1_T2, TILESTORED_R12_R11_T0, TILERELEASE and the frame sizes
// AMXFRAMEQ8, AMXFRAMEQ4, AMXFRAMEQ4K and AMXFRAMEQ6K (at least 1088, 1600,
// 3136 and 3136: the C rows at 0, B tiles from 1024, the K-quants' float
// sums at 2048, the config at 1024, 1536 or 3072; the emulation's tile
// images go above 4096). Around the
// tile instructions the kernels keep Z22..Z31, DI and R13..R15 free for the
// emulation.

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
// block's activation quants, xoff bytes into x, R9 their stride, DX aux),
// loads the tile config built at cfg(SP) (palette 1; colsb, a uint16 at
// 16+2t, and rows, a byte at 48+t, of tmm0: m x 64, tmm1: m x k bytes,
// tmm2: k/4 x 64; the rest 0; k is 32, or 16 for Q6_K's sub-blocks), points
// R12 at the C rows at 0(SP), sets R11 to 64 and zeroes Z0..Z15.
#define AMXSETUP(cfg, xoff, k) \
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
	MOVW      $k, (cfg+18)(SP) \
	MOVW      $64, (cfg+20)(SP) \
	MOVB      BX, (cfg+48)(SP) \
	MOVB      BX, (cfg+49)(SP) \
	MOVB      $(k/4), (cfg+50)(SP) \
	LEAQ      cfg(SP), AX \
	LDTILECFG_AX \
	LEAQ      0(SP), R12 \
	MOVQ      $64, R11 \
	ADDQ      $xoff, R8 \
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
	AMXSETUP(1024, 2, 32)
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
	AMXSETUP(1536, 2, 32)
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

// ---- Q4_K (per super-block, repack.go: 16 f16 d at 0, 16 f16 dmin at 32,
// the sub-block scales as bytes [sub][row] at 64, the mins as byte pairs
// [pair][row][2] at 192, per 32-byte chunk j the 8 nibble slices at
// 320+512j). Each chunk's low nibbles (sub-block 2j) and high ones (2j+1)
// become two B tiles on the stack; each sub-block's exact tile sums times
// its 16 scales go into the rows' int32 sums (Z0..Z15); per super-block the
// mins' sums come from the activations' 32-element sums (aux, q8KAux:
// VPDPWSSD against the zero-extended min pairs) and the float steps are
// dotQ4KGo's: sum += (d*dx)*isum, then sum -= (dmin*dx)*msum, the 16 rows'
// float sums kept at 2048(SP). The aux is block-major: 16 q8KAux (96 bytes)
// per super-block.

// Q4KUNPACK: slice s of chunk j as B rows s of the low-nibble tile at
// 1024(SP) and of the high-nibble one at 1536(SP); Z16 holds 0x0f bytes.
#define Q4KUNPACK(j, s) \
	VMOVDQU64 (320+512*j+64*s)(SI), Z17 \
	VPANDD    Z16, Z17, Z18 \
	VMOVDQU64 Z18, (1024+64*s)(SP) \
	VPSRLW    $4, Z17, Z17 \
	VPANDD    Z16, Z17, Z17 \
	VMOVDQU64 Z17, (1536+64*s)(SP)

// Q4KSCALE: row r's tile sums (C row r at 64*r(SP)) times the sub-block's
// scales (Z19) into zi.
#define Q4KSCALE(r, zi) \
	VPMULLD (64*r)(SP), Z19, Z20 \
	VPADDD  Z20, zi, zi

// Q4KSUB: sub-block t, its B tile at boff(SP): the product, then its scaled
// sums; R8 moves on to the next sub-block's activation quants.
#define Q4KSUB(t, boff) \
	LEAQ      boff(SP), R10 \
	TILEZERO_T0 \
	TILELOADD_T1_R8_R9 \
	TILELOADD_T2_R10_R11 \
	TDPBSUD_T0_T1_T2 \
	TILESTORED_R12_R11_T0 \
	VPMOVZXBD (64+16*(t))(SI), Z19 \
	Q4KSCALE(0, Z0) \
	Q4KSCALE(1, Z1) \
	Q4KSCALE(2, Z2) \
	Q4KSCALE(3, Z3) \
	Q4KSCALE(4, Z4) \
	Q4KSCALE(5, Z5) \
	Q4KSCALE(6, Z6) \
	Q4KSCALE(7, Z7) \
	Q4KSCALE(8, Z8) \
	Q4KSCALE(9, Z9) \
	Q4KSCALE(10, Z10) \
	Q4KSCALE(11, Z11) \
	Q4KSCALE(12, Z12) \
	Q4KSCALE(13, Z13) \
	Q4KSCALE(14, Z14) \
	Q4KSCALE(15, Z15) \
	ADDQ      $32, R8

#define Q4KCHUNK(j) \
	Q4KUNPACK(j, 0) \
	Q4KUNPACK(j, 1) \
	Q4KUNPACK(j, 2) \
	Q4KUNPACK(j, 3) \
	Q4KUNPACK(j, 4) \
	Q4KUNPACK(j, 5) \
	Q4KUNPACK(j, 6) \
	Q4KUNPACK(j, 7) \
	Q4KSUB(2*j, 1024) \
	Q4KSUB(2*j+1, 1536)

// Q4KFIN: row r's float steps for the super-block (its int32 sum in zi, then
// zeroed; aux entry r at 96*r(DX): f32 d_x at 0, the 8 sub-block sums as
// int16 at 16); Z16 d, Z17 dmin, Z18..Z21 the min pairs as words.
#define Q4KFIN(r, zi) \
	VPXORD    Z22, Z22, Z22 \
	VPDPWSSD.BCST (96*r+16)(DX), Z18, Z22 \
	VPDPWSSD.BCST (96*r+20)(DX), Z19, Z22 \
	VPDPWSSD.BCST (96*r+24)(DX), Z20, Z22 \
	VPDPWSSD.BCST (96*r+28)(DX), Z21, Z22 \
	VCVTDQ2PS zi, zi \
	VMULPS.BCST (96*r)(DX), Z16, Z23 \
	VMULPS    zi, Z23, Z23 \
	VMOVUPS   (2048+64*r)(SP), Z24 \
	VADDPS    Z23, Z24, Z24 \
	VCVTDQ2PS Z22, Z22 \
	VMULPS.BCST (96*r)(DX), Z17, Z25 \
	VMULPS    Z22, Z25, Z25 \
	VSUBPS    Z25, Z24, Z24 \
	VMOVUPS   Z24, (2048+64*r)(SP) \
	VPXORD    zi, zi, zi

// KOUT: the float sums of rows r and r+1 to out (AX).
#define KOUT(r) \
	VMOVUPS (2048+64*r)(SP), Z22 \
	VMOVUPS Z22, (64*r)(AX) \
	VMOVUPS (2112+64*r)(SP), Z23 \
	VMOVUPS Z23, (64*r+64)(AX)

// AMXKSETUP: AMXSETUP for the K-quant kernels (Q8_K activations, the
// config at 3072(SP), k activation bytes per product), and the 16 rows'
// float sums at 2048(SP) zeroed.
#define AMXKSETUP(k) \
	AMXSETUP(3072, 4, k) \
	VPXORD    Z22, Z22, Z22 \
	VMOVUPS   Z22, 2048(SP) \
	VMOVUPS   Z22, 2112(SP) \
	VMOVUPS   Z22, 2176(SP) \
	VMOVUPS   Z22, 2240(SP) \
	VMOVUPS   Z22, 2304(SP) \
	VMOVUPS   Z22, 2368(SP) \
	VMOVUPS   Z22, 2432(SP) \
	VMOVUPS   Z22, 2496(SP) \
	VMOVUPS   Z22, 2560(SP) \
	VMOVUPS   Z22, 2624(SP) \
	VMOVUPS   Z22, 2688(SP) \
	VMOVUPS   Z22, 2752(SP) \
	VMOVUPS   Z22, 2816(SP) \
	VMOVUPS   Z22, 2880(SP) \
	VMOVUPS   Z22, 2944(SP) \
	VMOVUPS   Z22, 3008(SP)

// AMXKDONE: the K-quant kernels' end: the tiles released, the 16 rows'
// float sums at 2048(SP) to out.
#define AMXKDONE \
	TILERELEASE \
	MOVQ out+48(FP), AX \
	KOUT(0) \
	KOUT(2) \
	KOUT(4) \
	KOUT(6) \
	KOUT(8) \
	KOUT(10) \
	KOUT(12) \
	KOUT(14) \
	VZEROUPPER

// func gemmQ4KAMX(w *byte, nb int, x *q8K, xstride uintptr, m int, aux *q8KAux, out *[256]float32)
TEXT ·gemmQ4KAMX(SB), $AMXFRAMEQ4K-56
	AMXKSETUP(32)
	MOVL    $0x0f0f0f0f, AX
	TESTQ   CX, CX
	JZ      q4kamxdone

q4kamxloop:
	VPBROADCASTD AX, Z16
	Q4KCHUNK(0)
	Q4KCHUNK(1)
	Q4KCHUNK(2)
	Q4KCHUNK(3)
	VCVTPH2PS (SI), Z16
	VCVTPH2PS 32(SI), Z17
	VPMOVZXBW 192(SI), Z18
	VPMOVZXBW 224(SI), Z19
	VPMOVZXBW 256(SI), Z20
	VPMOVZXBW 288(SI), Z21
	Q4KFIN(0, Z0)
	Q4KFIN(1, Z1)
	Q4KFIN(2, Z2)
	Q4KFIN(3, Z3)
	Q4KFIN(4, Z4)
	Q4KFIN(5, Z5)
	Q4KFIN(6, Z6)
	Q4KFIN(7, Z7)
	Q4KFIN(8, Z8)
	Q4KFIN(9, Z9)
	Q4KFIN(10, Z10)
	Q4KFIN(11, Z11)
	Q4KFIN(12, Z12)
	Q4KFIN(13, Z13)
	Q4KFIN(14, Z14)
	Q4KFIN(15, Z15)
	ADDQ $2368, SI
	ADDQ $36, R8   // past the block's d and bsums to the next one's quants
	ADDQ $1536, DX
	DECQ CX
	JNZ  q4kamxloop

q4kamxdone:
	AMXKDONE
	RET

// ---- Q6_K (per super-block, repack.go: 16 f16 d at 0, the 16 sub-blocks'
// signed scales as bytes [sub][row] at 32, per 16-element sub-block sb at
// 288+192*sb two slices of nibbles (elements c and 4+c, then 8+c and 12+c,
// of each row, c < 4) and one of their high 2-bit pairs). Each sub-block's
// 6-bit values become a B tile of 4 rows on the stack; one TDPBSUD over 16
// activation bytes gives its exact sums; less 32 times the activations' sum
// (q8KAux's c16), times its scales, they go into the rows' int32 sums; per
// super-block, dotQ6KGo's float step sum += (d*dx)*isum on the rows' float
// sums at 2048(SP).

// Q6KSCALE: row r's tile sums less its offset term for sub-block sb, times
// the sub-block's scales (Z19), into zi.
#define Q6KSCALE(r, zi, sb) \
	VMOVDQU32   (64*r)(SP), Z20 \
	VPSUBD.BCST (96*r+32+4*(sb))(DX), Z20, Z20 \
	VPMULLD     Z19, Z20, Z20 \
	VPADDD      Z20, zi, zi

// Q6KSUB: sub-block sb: its B tile (row t: elements 4t..4t+3 of each row,
// the nibble | the 2-bit pair << 4), the product, the scaled sums; R8 moves
// on 16 activation bytes. Z16 holds 0x0f bytes, Z21 0x30 bytes.
#define Q6KSUB(sb) \
	VMOVDQU64  (288+192*(sb))(SI), Z17 \
	VMOVDQU64  (352+192*(sb))(SI), Z18 \
	VMOVDQU64  (416+192*(sb))(SI), Z19 \
	VPANDD     Z16, Z17, Z20 \
	VPSLLW     $4, Z19, Z22 \
	VPTERNLOGD $0xf8, Z21, Z22, Z20 \
	VMOVDQU64  Z20, 1024(SP) \
	VPSRLW     $4, Z17, Z20 \
	VPANDD     Z16, Z20, Z20 \
	VPSLLW     $2, Z19, Z22 \
	VPTERNLOGD $0xf8, Z21, Z22, Z20 \
	VMOVDQU64  Z20, 1088(SP) \
	VPANDD     Z16, Z18, Z20 \
	VPTERNLOGD $0xf8, Z21, Z19, Z20 \
	VMOVDQU64  Z20, 1152(SP) \
	VPSRLW     $4, Z18, Z20 \
	VPANDD     Z16, Z20, Z20 \
	VPSRLW     $2, Z19, Z22 \
	VPTERNLOGD $0xf8, Z21, Z22, Z20 \
	VMOVDQU64  Z20, 1216(SP) \
	TILEZERO_T0 \
	TILELOADD_T1_R8_R9 \
	TILELOADD_T2_R10_R11 \
	TDPBSUD_T0_T1_T2 \
	TILESTORED_R12_R11_T0 \
	VPMOVSXBD  (32+16*(sb))(SI), Z19 \
	Q6KSCALE(0, Z0, sb) \
	Q6KSCALE(1, Z1, sb) \
	Q6KSCALE(2, Z2, sb) \
	Q6KSCALE(3, Z3, sb) \
	Q6KSCALE(4, Z4, sb) \
	Q6KSCALE(5, Z5, sb) \
	Q6KSCALE(6, Z6, sb) \
	Q6KSCALE(7, Z7, sb) \
	Q6KSCALE(8, Z8, sb) \
	Q6KSCALE(9, Z9, sb) \
	Q6KSCALE(10, Z10, sb) \
	Q6KSCALE(11, Z11, sb) \
	Q6KSCALE(12, Z12, sb) \
	Q6KSCALE(13, Z13, sb) \
	Q6KSCALE(14, Z14, sb) \
	Q6KSCALE(15, Z15, sb) \
	ADDQ       $16, R8

// Q6KFIN: row r's float step for the super-block (its int32 sum in zi, then
// zeroed; aux entry r at 96*r(DX), f32 d_x at 0); Z17 holds d.
#define Q6KFIN(r, zi) \
	VCVTDQ2PS   zi, zi \
	VMULPS.BCST (96*r)(DX), Z17, Z23 \
	VMULPS      zi, Z23, Z23 \
	VADDPS      (2048+64*r)(SP), Z23, Z23 \
	VMOVUPS     Z23, (2048+64*r)(SP) \
	VPXORD      zi, zi, zi

// func gemmQ6KAMX(w *byte, nb int, x *q8K, xstride uintptr, m int, aux *q8KAux, out *[256]float32)
TEXT ·gemmQ6KAMX(SB), $AMXFRAMEQ6K-56
	AMXKSETUP(16)
	MOVL    $0x0f0f0f0f, AX
	VPBROADCASTD AX, Z16
	MOVL    $0x30303030, AX
	VPBROADCASTD AX, Z21
	LEAQ    1024(SP), R10
	TESTQ   CX, CX
	JZ      q6kamxdone

q6kamxloop:
	Q6KSUB(0)
	Q6KSUB(1)
	Q6KSUB(2)
	Q6KSUB(3)
	Q6KSUB(4)
	Q6KSUB(5)
	Q6KSUB(6)
	Q6KSUB(7)
	Q6KSUB(8)
	Q6KSUB(9)
	Q6KSUB(10)
	Q6KSUB(11)
	Q6KSUB(12)
	Q6KSUB(13)
	Q6KSUB(14)
	Q6KSUB(15)
	VCVTPH2PS (SI), Z17
	Q6KFIN(0, Z0)
	Q6KFIN(1, Z1)
	Q6KFIN(2, Z2)
	Q6KFIN(3, Z3)
	Q6KFIN(4, Z4)
	Q6KFIN(5, Z5)
	Q6KFIN(6, Z6)
	Q6KFIN(7, Z7)
	Q6KFIN(8, Z8)
	Q6KFIN(9, Z9)
	Q6KFIN(10, Z10)
	Q6KFIN(11, Z11)
	Q6KFIN(12, Z12)
	Q6KFIN(13, Z13)
	Q6KFIN(14, Z14)
	Q6KFIN(15, Z15)
	ADDQ $3360, SI
	ADDQ $36, R8   // past the block's d and bsums to the next one's quants
	ADDQ $1536, DX
	DECQ CX
	JNZ  q6kamxloop

q6kamxdone:
	AMXKDONE
	RET

//go:build amd64 && !purego

#include "textflag.h"
#include "avx2_amd64.h"
#include "prefetch_amd64.h"

// AVX2 kernels over the K-quants and IQ4_XS in the packed 16-row groups of the
// AVX-512 path (repack.go), dotted with Q8_K activations (292-byte q8K) and
// their side data (96-byte q8KAux). A 256-bit register holds 8 rows, so each
// call computes one half of a group (half 0: rows 0..7, half 1: rows 8..15):
// BX = 8*half indexes the half's bytes, (SI)(BX*4) its 32 bytes of a 64-byte
// slice, (SI)(BX*2) its 8 f16 scales, (SI)(BX*1) its 8 byte scales. A4
// kernels take 4 activation rows, A1 kernels one.
//
// AVX2 has no VPDPBUSD: VPMADDUBSW multiplies the unsigned weight bytes by 4
// broadcast activation bytes and adds adjacent pairs into int16 (exact: a
// Q4_K pair is at most 2*15*128, eight of them still fit; a Q6_K pair at most
// 2*63*128, two of them fit), then VPMADDWD with the sub-block's scale in
// both halves of every row's lane widens to int32 and scales at once. Every
// integer sum is exact; per super-block the float updates are the portable
// kernels' (dotQ4KGo, dotQ6KGo), lane by lane, on the running sums kept in
// out, so each row's result is bitwise equal to them.

// PFQ4K, PFQ6K: how far ahead of the super-block being computed the A1
// kernels ask for weights (one super-block of a group). Decode streams
// every weight from memory once per token; without these requests the
// kernels wait on each line in turn (1B shape: 24 tokens/s, with them 31).
#define PFQ4K 2368
#define PFQ6K 3360

DATA k2q0f<>+0(SB)/4, $0x0f0f0f0f
GLOBL k2q0f<>(SB), RODATA, $4
DATA k2q30<>+0(SB)/4, $0x30303030
GLOBL k2q30<>(SB), RODATA, $4

// SETUPA4 loads a 4-row kernel's arguments: SI weights, BX 8*half, CX
// super-blocks, DI/R8/R9/R10 activation rows, DX/R11/R12/R13 their side
// data, R14 the bytes to prefetch (prefetch_amd64.h); Y15 = 0x0f bytes. It
// zeroes the 4 output rows' 8 lanes.
#define SETUPA4 \
	ARGS4 \
	MOVQ pf+72(FP), R14 \
	VPBROADCASTD k2q0f<>(SB), Y15 \
	ZEROOUT4(Y8)

// LANESFIN4: the 4 output rows of an A4 kernel += their float lane sums
// (at 256+256r on the stack).
#define LANESFIN4 \
	MOVQ out+56(FP), AX \
	Q5KFIN(256) \
	ADDQ ostride+64(FP), AX \
	Q5KFIN(512) \
	ADDQ ostride+64(FP), AX \
	Q5KFIN(768) \
	ADDQ ostride+64(FP), AX \
	Q5KFIN(1024)

// LANESFIN1: an A1 kernel's output (16 rows at out) = Y10 (rows 0..7) and
// Y11 (8..15) + their float lane sums.
#define LANESFIN1 \
	Q5KFIN1(Y10, 0) \
	Q5KFIN1(Y11, 1) \
	MOVQ out+32(FP), AX \
	VMOVUPS Y10, (AX) \
	VMOVUPS Y11, 32(AX)

#define NEXTA4(wb) \
	ADDQ $wb, SI \
	ADDQ $wb, R14 \
	ADDQ $292, DI \
	ADDQ $292, R8 \
	ADDQ $292, R9 \
	ADDQ $292, R10 \
	ADDQ $96, DX \
	ADDQ $96, R11 \
	ADDQ $96, R12 \
	ADDQ $96, R13

#define ZERO4(a, b, c, d) \
	VPXOR a, a, a \
	VPXOR b, b, b \
	VPXOR c, c, c \
	VPXOR d, d, d

// FUPD: the running sums at (AX) += (Y12 * d_x) * float(yi), where d_x is
// the f32 at (xr); the result stays in Y11. FSUBM: Y11 -= (Y13 * d_x) *
// float(ym), stored back to (AX). Y10, Y14 are scratch.
#define FUPD(xr, yi) \
	VBROADCASTSS (xr), Y10 \
	VMULPS Y10, Y12, Y11 \
	VCVTDQ2PS yi, yi \
	VMULPS yi, Y11, Y11 \
	VADDPS (AX), Y11, Y11

#define FSUBM(ym) \
	VMULPS Y10, Y13, Y14 \
	VCVTDQ2PS ym, ym \
	VMULPS ym, Y14, Y14 \
	VSUBPS Y14, Y11, Y11

// ---- Q4_K (2368 bytes per group and super-block: 16 f16 d at 0, 16 f16
// dmin at 32, the sub-block scales [sub][row] at 64, the mins as byte pairs
// [pair][row][2] at 192 (VPMOVZXBW: int16 pairs), then per 32-byte chunk j
// at 320+512j 8 slices of 4
// bytes per row: low nibbles sub-block 2j, high nibbles 2j+1).

// Q4KW: slice s of chunk j into Y8, low (Q4KWLO) or high (Q4KWHI) nibbles.
#define Q4KWLO(j, s) \
	VPAND (320+512*j+64*s)(SI)(BX*4), Y15, Y8

#define Q4KWHI(j, s) \
	VMOVDQU (320+512*j+64*s)(SI)(BX*4), Y8 \
	VPSRLW $4, Y8, Y8 \
	VPAND Y15, Y8, Y8

// Q4KDP4: Y8 times 4 bytes at xoff of each activation row, int16 pairs into
// Y4..Y7.
#define Q4KDP4(xoff) \
	VPBROADCASTD xoff(DI), Y9 \
	VPMADDUBSW Y9, Y8, Y9 \
	VPADDW Y9, Y4, Y4 \
	VPBROADCASTD xoff(R8), Y10 \
	VPMADDUBSW Y10, Y8, Y10 \
	VPADDW Y10, Y5, Y5 \
	VPBROADCASTD xoff(R9), Y9 \
	VPMADDUBSW Y9, Y8, Y9 \
	VPADDW Y9, Y6, Y6 \
	VPBROADCASTD xoff(R10), Y10 \
	VPMADDUBSW Y10, Y8, Y10 \
	VPADDW Y10, Y7, Y7

// Q4KSCALE: sub-block sub's 8 scales as int16 pairs (s, s) per row in Y11.
#define Q4KSCALE(sub) \
	VMOVQ (64+16*sub)(SI)(BX*1), X11 \
	VPUNPCKLBW X11, X11, X11 \
	VPMOVZXBW X11, Y11

// Q4KSUB4LO / Q4KSUB4HI: sub-block sub (the low or high nibbles of chunk j)
// for 4 activation rows, times the scales, into Y0..Y3.
#define Q4KSUB4LO(j, sub) \
	ZERO4(Y4, Y5, Y6, Y7) \
	Q4KWLO(j, 0) \
	Q4KDP4((4+32*sub)) \
	Q4KWLO(j, 1) \
	Q4KDP4((8+32*sub)) \
	Q4KWLO(j, 2) \
	Q4KDP4((12+32*sub)) \
	Q4KWLO(j, 3) \
	Q4KDP4((16+32*sub)) \
	Q4KWLO(j, 4) \
	Q4KDP4((20+32*sub)) \
	Q4KWLO(j, 5) \
	Q4KDP4((24+32*sub)) \
	Q4KWLO(j, 6) \
	Q4KDP4((28+32*sub)) \
	Q4KWLO(j, 7) \
	Q4KDP4((32+32*sub)) \
	Q4KSC4(sub)

#define Q4KSUB4HI(j, sub) \
	ZERO4(Y4, Y5, Y6, Y7) \
	Q4KWHI(j, 0) \
	Q4KDP4((4+32*sub)) \
	Q4KWHI(j, 1) \
	Q4KDP4((8+32*sub)) \
	Q4KWHI(j, 2) \
	Q4KDP4((12+32*sub)) \
	Q4KWHI(j, 3) \
	Q4KDP4((16+32*sub)) \
	Q4KWHI(j, 4) \
	Q4KDP4((20+32*sub)) \
	Q4KWHI(j, 5) \
	Q4KDP4((24+32*sub)) \
	Q4KWHI(j, 6) \
	Q4KDP4((28+32*sub)) \
	Q4KWHI(j, 7) \
	Q4KDP4((32+32*sub)) \
	Q4KSC4(sub)

#define Q4KSC4(sub) \
	Q4KSCALE(sub) \
	VPMADDWD Y11, Y4, Y4 \
	VPADDD Y4, Y0, Y0 \
	VPMADDWD Y11, Y5, Y5 \
	VPADDD Y5, Y1, Y1 \
	VPMADDWD Y11, Y6, Y6 \
	VPADDD Y6, Y2, Y2 \
	VPMADDWD Y11, Y7, Y7 \
	VPADDD Y7, Y3, Y3

// Q4KMIN4: mins pair p times the pair (bs32[2p], bs32[2p+1]) of each row,
// into Y4..Y7.
#define Q4KMIN4(p) \
	VPMOVZXBW (192+32*p)(SI)(BX*2), Y8 \
	VPBROADCASTD (16+4*p)(DX), Y9 \
	VPMADDWD Y9, Y8, Y9 \
	VPADDD Y9, Y4, Y4 \
	VPBROADCASTD (16+4*p)(R11), Y10 \
	VPMADDWD Y10, Y8, Y10 \
	VPADDD Y10, Y5, Y5 \
	VPBROADCASTD (16+4*p)(R12), Y9 \
	VPMADDWD Y9, Y8, Y9 \
	VPADDD Y9, Y6, Y6 \
	VPBROADCASTD (16+4*p)(R13), Y10 \
	VPMADDWD Y10, Y8, Y10 \
	VPADDD Y10, Y7, Y7

// Q4KF: the float update of one activation row (x at xr) from isum yi and
// msum ym, on the running sums at (AX).
#define Q4KF(xr, yi, ym) \
	FUPD(xr, yi) \
	FSUBM(ym) \
	VMOVUPS Y11, (AX)

// func gemmQ4KA4(w *byte, half int, nb int, x *q8K, xstride uintptr, aux *q8KAux, auxstride uintptr, out *float32, ostride uintptr, pf *byte)
TEXT ·gemmQ4KA4(SB), NOSPLIT, $0-80
	SETUPA4
	TESTQ CX, CX
	JZ    q4ka4done
q4ka4loop:
	ZERO4(Y0, Y1, Y2, Y3)
	Q4KSUB4LO(0, 0)
	PF5(0)
	Q4KSUB4HI(0, 1)
	PF5(5)
	Q4KSUB4LO(1, 2)
	PF5(10)
	Q4KSUB4HI(1, 3)
	PF5(15)
	Q4KSUB4LO(2, 4)
	PF5(20)
	Q4KSUB4HI(2, 5)
	PF5(25)
	Q4KSUB4LO(3, 6)
	PF5(30)
	Q4KSUB4HI(3, 7)
	PF2(35)
	ZERO4(Y4, Y5, Y6, Y7)
	Q4KMIN4(0)
	Q4KMIN4(1)
	Q4KMIN4(2)
	Q4KMIN4(3)
	VCVTPH2PS (SI)(BX*2), Y12
	VCVTPH2PS 32(SI)(BX*2), Y13
	EACH4(Q4KF)
	NEXTA4(2368)
	DECQ CX
	JNZ  q4ka4loop
q4ka4done:
	VZEROUPPER
	RET

// Q4KLO16 / Q4KHI16: slice s of chunk j, low or high nibbles, both halves
// (16 rows), times 4 bytes at xoff of the one activation row, int16 pairs
// into Y4 (rows 0..7) and Y5 (rows 8..15).
#define Q4KLO16(j, s, xoff) \
	PREFETCHT0 (PFQ4K+320+512*j+64*s)(SI) \
	VPBROADCASTD xoff(DI), Y9 \
	VPAND (320+512*j+64*s)(SI), Y15, Y8 \
	VPAND (320+512*j+64*s+32)(SI), Y15, Y10 \
	VPMADDUBSW Y9, Y8, Y8 \
	VPMADDUBSW Y9, Y10, Y10 \
	VPADDW Y8, Y4, Y4 \
	VPADDW Y10, Y5, Y5

#define Q4KHI16(j, s, xoff) \
	VPBROADCASTD xoff(DI), Y9 \
	VMOVDQU (320+512*j+64*s)(SI), Y8 \
	VMOVDQU (320+512*j+64*s+32)(SI), Y10 \
	VPSRLW $4, Y8, Y8 \
	VPSRLW $4, Y10, Y10 \
	VPAND Y15, Y8, Y8 \
	VPAND Y15, Y10, Y10 \
	VPMADDUBSW Y9, Y8, Y8 \
	VPMADDUBSW Y9, Y10, Y10 \
	VPADDW Y8, Y4, Y4 \
	VPADDW Y10, Y5, Y5

// Q4KSC16: Y4, Y5 times sub-block sub's scales of each half, into Y0, Y1.
#define Q4KSC16(sub) \
	VMOVQ (64+16*sub)(SI), X11 \
	VPUNPCKLBW X11, X11, X11 \
	VPMOVZXBW X11, Y11 \
	VPMADDWD Y11, Y4, Y4 \
	VPADDD Y4, Y0, Y0 \
	VMOVQ (72+16*sub)(SI), X11 \
	VPUNPCKLBW X11, X11, X11 \
	VPMOVZXBW X11, Y11 \
	VPMADDWD Y11, Y5, Y5 \
	VPADDD Y5, Y1, Y1

#define Q4KSUB16LO(j, sub) \
	VPXOR Y4, Y4, Y4 \
	VPXOR Y5, Y5, Y5 \
	Q4KLO16(j, 0, (4+32*sub)) \
	Q4KLO16(j, 1, (8+32*sub)) \
	Q4KLO16(j, 2, (12+32*sub)) \
	Q4KLO16(j, 3, (16+32*sub)) \
	Q4KLO16(j, 4, (20+32*sub)) \
	Q4KLO16(j, 5, (24+32*sub)) \
	Q4KLO16(j, 6, (28+32*sub)) \
	Q4KLO16(j, 7, (32+32*sub)) \
	Q4KSC16(sub)

#define Q4KSUB16HI(j, sub) \
	VPXOR Y4, Y4, Y4 \
	VPXOR Y5, Y5, Y5 \
	Q4KHI16(j, 0, (4+32*sub)) \
	Q4KHI16(j, 1, (8+32*sub)) \
	Q4KHI16(j, 2, (12+32*sub)) \
	Q4KHI16(j, 3, (16+32*sub)) \
	Q4KHI16(j, 4, (20+32*sub)) \
	Q4KHI16(j, 5, (24+32*sub)) \
	Q4KHI16(j, 6, (28+32*sub)) \
	Q4KHI16(j, 7, (32+32*sub)) \
	Q4KSC16(sub)

// Q4KMIN16: mins pair p of both halves times the activation row's pair
// (bs32[2p], bs32[2p+1]), into Y4, Y5.
#define Q4KMIN16(p) \
	PREFETCHT0 (PFQ4K+128*p)(SI) \
	PREFETCHT0 (PFQ4K+128*p+64)(SI) \
	VPBROADCASTD (16+4*p)(DX), Y9 \
	VPMOVZXBW (192+32*p)(SI), Y8 \
	VPMADDWD Y9, Y8, Y8 \
	VPADDD Y8, Y4, Y4 \
	VPMOVZXBW (208+32*p)(SI), Y10 \
	VPMADDWD Y9, Y10, Y10 \
	VPADDD Y10, Y5, Y5

// FREG: ya += (Y12 * d_x) * float(yi), with d_x in Y10; FREGM: ya -= (Y13 *
// d_x) * float(ym). Y11, Y14 are scratch.
#define FREG(yi, ya) \
	VMULPS Y10, Y12, Y11 \
	VCVTDQ2PS yi, yi \
	VMULPS yi, Y11, Y11 \
	VADDPS Y11, ya, ya

#define FREGM(ym, ya) \
	VMULPS Y10, Y13, Y14 \
	VCVTDQ2PS ym, ym \
	VMULPS ym, Y14, Y14 \
	VSUBPS Y14, ya, ya

// func gemmQ4KA1(w *byte, nb int, x *q8K, aux *q8KAux, out *float32)
// A whole group (16 rows) against one activation row, the two halves of each
// slice side by side: decode streams the weights once, in order.
TEXT ·gemmQ4KA1(SB), NOSPLIT, $0-40
	MOVQ w+0(FP), SI
	MOVQ nb+8(FP), CX
	MOVQ x+16(FP), DI
	MOVQ aux+24(FP), DX
	VPBROADCASTD k2q0f<>(SB), Y15
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	TESTQ CX, CX
	JZ    q4ka1done
q4ka1loop:
	VPXOR Y0, Y0, Y0
	VPXOR Y1, Y1, Y1
	Q4KSUB16LO(0, 0)
	Q4KSUB16HI(0, 1)
	Q4KSUB16LO(1, 2)
	Q4KSUB16HI(1, 3)
	Q4KSUB16LO(2, 4)
	Q4KSUB16HI(2, 5)
	Q4KSUB16LO(3, 6)
	Q4KSUB16HI(3, 7)
	VPXOR Y4, Y4, Y4
	VPXOR Y5, Y5, Y5
	Q4KMIN16(0)
	Q4KMIN16(1)
	Q4KMIN16(2)
	Q4KMIN16(3)
	VBROADCASTSS (DI), Y10
	VCVTPH2PS (SI), Y12
	VCVTPH2PS 32(SI), Y13
	FREG(Y0, Y2)
	FREGM(Y4, Y2)
	VCVTPH2PS 16(SI), Y12
	VCVTPH2PS 48(SI), Y13
	FREG(Y1, Y3)
	FREGM(Y5, Y3)
	ADDQ $2368, SI
	ADDQ $292, DI
	ADDQ $96, DX
	DECQ CX
	JNZ  q4ka1loop
q4ka1done:
	MOVQ out+32(FP), AX
	VMOVUPS Y2, (AX)
	VMOVUPS Y3, 32(AX)
	VZEROUPPER
	RET

// ---- Q6_K (3360 bytes per group and super-block: 16 f16 d at 0, the 16
// signed scales [sub][row] at 32, then per 16-element sub-block sb at
// 288+192sb two nibble planes (slices 0|1<<4 and 2|3<<4) and a plane of top
// bits, slice k's at bits 2k). Y14 holds 0x30 bytes.

// Q6KW: sub-block sb's four slices (quants 0..63) of the half that index
// register ix (0 or 8) selects into Y8..Y11, its scales as int16 pairs in
// Y12; Y13 is scratch.
#define Q6KW(sb, ix) \
	VMOVDQU (288+192*sb)(SI)(ix*4), Y8 \
	VPSRLW $4, Y8, Y9 \
	VPAND Y15, Y8, Y8 \
	VPAND Y15, Y9, Y9 \
	VMOVDQU (288+192*sb+64)(SI)(ix*4), Y10 \
	VPSRLW $4, Y10, Y11 \
	VPAND Y15, Y10, Y10 \
	VPAND Y15, Y11, Y11 \
	VMOVDQU (288+192*sb+128)(SI)(ix*4), Y12 \
	VPSLLW $4, Y12, Y13 \
	VPAND Y14, Y13, Y13 \
	VPOR Y13, Y8, Y8 \
	VPSLLW $2, Y12, Y13 \
	VPAND Y14, Y13, Y13 \
	VPOR Y13, Y9, Y9 \
	VPAND Y14, Y12, Y13 \
	VPOR Y13, Y10, Y10 \
	VPSRLW $2, Y12, Y13 \
	VPAND Y14, Y13, Y13 \
	VPOR Y13, Y11, Y11 \
	VMOVQ (32+16*sb)(SI)(ix*1), X12 \
	VPUNPCKLBW X12, X12, X12 \
	VPMOVSXBW X12, Y12

// Q6KDP: sub-block sb of the activation row at xr against Y8..Y11, slices
// added in pairs (two fit in int16), times the scales in Y12, into yi.
#define Q6KDP(sb, xr, yi) \
	VPBROADCASTD (4+16*sb)(xr), Y4 \
	VPMADDUBSW Y4, Y8, Y4 \
	VPBROADCASTD (8+16*sb)(xr), Y5 \
	VPMADDUBSW Y5, Y9, Y5 \
	VPADDW Y5, Y4, Y4 \
	VPMADDWD Y12, Y4, Y4 \
	VPADDD Y4, yi, yi \
	VPBROADCASTD (12+16*sb)(xr), Y6 \
	VPMADDUBSW Y6, Y10, Y6 \
	VPBROADCASTD (16+16*sb)(xr), Y7 \
	VPMADDUBSW Y7, Y11, Y7 \
	VPADDW Y7, Y6, Y6 \
	VPMADDWD Y12, Y6, Y6 \
	VPADDD Y6, yi, yi

#define Q6KSUB4(sb) \
	Q6KW(sb, BX) \
	Q6KDP(sb, DI, Y0) \
	Q6KDP(sb, R8, Y1) \
	Q6KDP(sb, R9, Y2) \
	Q6KDP(sb, R10, Y3)

// Q6KPAIRW: the scales of sub-blocks 2p and 2p+1 (of the half ix selects)
// as int16 pairs per row in Y8.
#define Q6KPAIRW(p, ix) \
	VMOVQ (32+32*p)(SI)(ix*1), X8 \
	VMOVQ (48+32*p)(SI)(ix*1), X9 \
	VPUNPCKLBW X9, X8, X8 \
	VPMOVSXBW X8, Y8

// Q6KOFF4: Y4..Y7 += the scale pairs times the activations' 16-element sums
// (bsums[2p], bsums[2p+1]) of each row.
#define Q6KOFF4(p) \
	Q6KPAIRW(p, BX) \
	VPBROADCASTD (260+4*p)(DI), Y9 \
	VPMADDWD Y9, Y8, Y9 \
	VPADDD Y9, Y4, Y4 \
	VPBROADCASTD (260+4*p)(R8), Y10 \
	VPMADDWD Y10, Y8, Y10 \
	VPADDD Y10, Y5, Y5 \
	VPBROADCASTD (260+4*p)(R9), Y9 \
	VPMADDWD Y9, Y8, Y9 \
	VPADDD Y9, Y6, Y6 \
	VPBROADCASTD (260+4*p)(R10), Y10 \
	VPMADDWD Y10, Y8, Y10 \
	VPADDD Y10, Y7, Y7

// Q6KF: isum yi minus 32 times the offset sums in yo, then the float update
// of the activation row at xr on the running sums at (AX).
#define Q6KF(xr, yi, yo) \
	VPSLLD $5, yo, yo \
	VPSUBD yo, yi, yi \
	FUPD(xr, yi) \
	VMOVUPS Y11, (AX)

// func gemmQ6KA4(w *byte, half int, nb int, x *q8K, xstride uintptr, aux *q8KAux, auxstride uintptr, out *float32, ostride uintptr, pf *byte)
TEXT ·gemmQ6KA4(SB), NOSPLIT, $0-80
	SETUPA4
	VPBROADCASTD k2q30<>(SB), Y14
	TESTQ CX, CX
	JZ    q6ka4done
q6ka4loop:
	ZERO4(Y0, Y1, Y2, Y3)
	Q6KSUB4(0)
	PF4(0)
	Q6KSUB4(1)
	PF4(4)
	Q6KSUB4(2)
	PF4(8)
	Q6KSUB4(3)
	PF4(12)
	Q6KSUB4(4)
	PF4(16)
	Q6KSUB4(5)
	PF3(20)
	Q6KSUB4(6)
	PF3(23)
	Q6KSUB4(7)
	PF3(26)
	Q6KSUB4(8)
	PF3(29)
	Q6KSUB4(9)
	PF3(32)
	Q6KSUB4(10)
	PF3(35)
	Q6KSUB4(11)
	PF3(38)
	Q6KSUB4(12)
	PF3(41)
	Q6KSUB4(13)
	PF3(44)
	Q6KSUB4(14)
	PF3(47)
	Q6KSUB4(15)
	PF3(50)
	ZERO4(Y4, Y5, Y6, Y7)
	Q6KOFF4(0)
	Q6KOFF4(1)
	Q6KOFF4(2)
	Q6KOFF4(3)
	Q6KOFF4(4)
	Q6KOFF4(5)
	Q6KOFF4(6)
	Q6KOFF4(7)
	VCVTPH2PS (SI)(BX*2), Y12
	EACH4(Q6KF)
	NEXTA4(3360)
	DECQ CX
	JNZ  q6ka4loop
q6ka4done:
	VZEROUPPER
	RET

// Q6KOFF16: the offset sums of pair p for both halves, into Y4, Y5.
#define Q6KOFF16(p) \
	PREFETCHT0 (PFQ6K+64*p)(SI) \
	VPBROADCASTD (260+4*p)(DI), Y6 \
	Q6KPAIRW(p, BX) \
	VPMADDWD Y6, Y8, Y7 \
	VPADDD Y7, Y4, Y4 \
	Q6KPAIRW(p, R9) \
	VPMADDWD Y6, Y8, Y7 \
	VPADDD Y7, Y5, Y5

#define Q6KSUB16(sb) \
	PREFETCHT0 (PFQ6K+288+192*sb)(SI) \
	PREFETCHT0 (PFQ6K+288+192*sb+64)(SI) \
	PREFETCHT0 (PFQ6K+288+192*sb+128)(SI) \
	Q6KW(sb, BX) \
	Q6KDP(sb, DI, Y0) \
	Q6KW(sb, R9) \
	Q6KDP(sb, DI, Y1)

// func gemmQ6KA1(w *byte, nb int, x *q8K, aux *q8KAux, out *float32)
// A whole group (16 rows) against one activation row, half by half within
// each sub-block (BX = 0 selects rows 0..7, R9 = 8 rows 8..15).
TEXT ·gemmQ6KA1(SB), NOSPLIT, $0-40
	MOVQ w+0(FP), SI
	MOVQ nb+8(FP), CX
	MOVQ x+16(FP), DI
	XORQ BX, BX
	MOVQ $8, R9
	VPBROADCASTD k2q0f<>(SB), Y15
	VPBROADCASTD k2q30<>(SB), Y14
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	TESTQ CX, CX
	JZ    q6ka1done
q6ka1loop:
	VPXOR Y0, Y0, Y0
	VPXOR Y1, Y1, Y1
	Q6KSUB16(0)
	Q6KSUB16(1)
	Q6KSUB16(2)
	Q6KSUB16(3)
	Q6KSUB16(4)
	Q6KSUB16(5)
	Q6KSUB16(6)
	Q6KSUB16(7)
	Q6KSUB16(8)
	Q6KSUB16(9)
	Q6KSUB16(10)
	Q6KSUB16(11)
	Q6KSUB16(12)
	Q6KSUB16(13)
	Q6KSUB16(14)
	Q6KSUB16(15)
	VPXOR Y4, Y4, Y4
	VPXOR Y5, Y5, Y5
	Q6KOFF16(0)
	Q6KOFF16(1)
	Q6KOFF16(2)
	Q6KOFF16(3)
	Q6KOFF16(4)
	Q6KOFF16(5)
	Q6KOFF16(6)
	Q6KOFF16(7)
	VPSLLD $5, Y4, Y4
	VPSUBD Y4, Y0, Y0
	VPSLLD $5, Y5, Y5
	VPSUBD Y5, Y1, Y1
	VBROADCASTSS (DI), Y10
	VCVTPH2PS (SI), Y12
	FREG(Y0, Y2)
	VCVTPH2PS 16(SI), Y12
	FREG(Y1, Y3)
	ADDQ $3360, SI
	ADDQ $292, DI
	DECQ CX
	JNZ  q6ka1loop
q6ka1done:
	MOVQ out+32(FP), AX
	VMOVUPS Y2, (AX)
	VMOVUPS Y3, 32(AX)
	VZEROUPPER
	RET

// ---- IQ4_XS (2208 bytes per group and super-block: 16 f16 d at 0, the 8
// sub-block scales as int8 [sub][row] at 32 (-32..31), then per 32-element
// sub-block ib at 160+256ib Q4_0's 4 slices of nibbles, each selecting a
// codebook level). The levels are signed: the products take the sign trick
// (the activations of quantizeQ8K are within ±127) and VPMADDWD by the
// scale pairs widens and scales them one at a time, so isum is dotIQ4XSGo's
// exact sum. Y15 holds 0x0f bytes, Y10 the codebook in both lanes.

#define PFXS 2208

IQ4CODEBOOK(k2iq4nl<>)

// XSDP: slice s of sub-block ib times the row at xr, times the scale pairs
// in ysc, into acc; Y8, Y9 scratch.
#define XSDP(ib, s, xr, ysc, acc) \
	VPBROADCASTD (4+32*ib+4*s)(xr), Y8 \
	VPSIGNB Y4, Y8, Y8 \
	VPMADDUBSW Y8, Y5, Y8 \
	VPMADDWD ysc, Y8, Y8 \
	VPADDD Y8, acc, acc \
	VPBROADCASTD (20+32*ib+4*s)(xr), Y9 \
	VPSIGNB Y6, Y9, Y9 \
	VPMADDUBSW Y9, Y7, Y9 \
	VPMADDWD ysc, Y9, Y9 \
	VPADDD Y9, acc, acc

// XSSC: sub-block ib's scales of the half at (SI)(ix*1) as int16 pairs (s,
// s) per row in ysc (xsc its low half).
#define XSSC(ib, ix, ysc, xsc) \
	VMOVQ (32+16*ib)(SI)(ix*1), xsc \
	VPUNPCKLBW xsc, xsc, xsc \
	VPMOVSXBW xsc, ysc

#define XSSLICE4(ib, s) \
	IQ4LEVELS((160+256*ib+64*s)(SI)(BX*4)) \
	XSDP(ib, s, DI, Y11, Y0) \
	XSDP(ib, s, R8, Y11, Y1) \
	XSDP(ib, s, R9, Y11, Y2) \
	XSDP(ib, s, R10, Y11, Y3)

#define XSSUB4(ib) \
	XSSC(ib, BX, Y11, X11) \
	XSSLICE4(ib, 0) \
	XSSLICE4(ib, 1) \
	XSSLICE4(ib, 2) \
	XSSLICE4(ib, 3)

// XSF: the float update of one activation row: SUMMEM from its d at 0(xr).
#define XSF(xr, acc, unused) SUMMEM(xr, acc)

// func gemmIQ4XSA4(w *byte, half int, nb int, x *q8K, xstride uintptr, aux *q8KAux, auxstride uintptr, out *float32, ostride uintptr, pf *byte)
TEXT ·gemmIQ4XSA4(SB), NOSPLIT, $0-80
	SETUPA4
	VBROADCASTI128 k2iq4nl<>(SB), Y10
	TESTQ CX, CX
	JZ    xsa4done
xsa4loop:
	ZERO4(Y0, Y1, Y2, Y3)
	XSSUB4(0)
	PF5(0)
	XSSUB4(1)
	PF5(5)
	XSSUB4(2)
	PF5(10)
	XSSUB4(3)
	PF5(15)
	XSSUB4(4)
	PF5(20)
	XSSUB4(5)
	PF5(25)
	XSSUB4(6)
	PF5(30)
	XSSUB4(7)
	VCVTPH2PS (SI)(BX*2), Y12
	EACH4(XSF)
	NEXTA4(2208)
	DECQ CX
	JNZ  xsa4loop
xsa4done:
	VZEROUPPER
	RET

#define XSSLICE1(ib, s) \
	PREFETCHT0 (PFXS+160+256*ib+64*s)(SI) \
	IQ4LEVELS((160+256*ib+64*s)(SI)) \
	XSDP(ib, s, DI, Y11, Y0) \
	IQ4LEVELS((192+256*ib+64*s)(SI)) \
	XSDP(ib, s, DI, Y13, Y1)

#define XSSUB1(ib) \
	XSSC(ib, BX, Y11, X11) \
	XSSC(ib, R9, Y13, X13) \
	XSSLICE1(ib, 0) \
	XSSLICE1(ib, 1) \
	XSSLICE1(ib, 2) \
	XSSLICE1(ib, 3)

// func gemmIQ4XSA1(w *byte, nb int, x *q8K, aux *q8KAux, out *float32)
TEXT ·gemmIQ4XSA1(SB), NOSPLIT, $0-40
	MOVQ w+0(FP), SI
	MOVQ nb+8(FP), CX
	MOVQ x+16(FP), DI
	XORQ BX, BX
	MOVQ $8, R9
	VPBROADCASTD k2q0f<>(SB), Y15
	VBROADCASTI128 k2iq4nl<>(SB), Y10
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	TESTQ CX, CX
	JZ    xsa1done
xsa1loop:
	PREFETCHT0 PFXS(SI)
	PREFETCHT0 (PFXS+64)(SI)
	PREFETCHT0 (PFXS+128)(SI)
	VPXOR Y0, Y0, Y0
	VPXOR Y1, Y1, Y1
	XSSUB1(0)
	XSSUB1(1)
	XSSUB1(2)
	XSSUB1(3)
	XSSUB1(4)
	XSSUB1(5)
	XSSUB1(6)
	XSSUB1(7)
	VBROADCASTSS (DI), Y14
	VCVTPH2PS (SI), Y12
	VMULPS Y14, Y12, Y12
	VCVTDQ2PS Y0, Y0
	VMULPS Y0, Y12, Y12
	VADDPS Y12, Y2, Y2
	VCVTPH2PS 16(SI), Y12
	VMULPS Y14, Y12, Y12
	VCVTDQ2PS Y1, Y1
	VMULPS Y1, Y12, Y12
	VADDPS Y12, Y3, Y3
	ADDQ $2208, SI
	ADDQ $292, DI
	DECQ CX
	JNZ  xsa1loop
xsa1done:
	MOVQ out+32(FP), AX
	VMOVUPS Y2, (AX)
	VMOVUPS Y3, 32(AX)
	VZEROUPPER
	RET

// ---- Q2_K (1344 bytes per group and super-block: 16 f16 d at 0, 16 f16
// dmin at 32, the 16 sub-blocks' scale|min<<4 bytes [sub][row] at 64, then
// per half h of 128 elements at 320+512h 8 slices of 4 quant bytes per row:
// bits 2j of byte c of slice s are element 128h+32j+4s+c, of sub-block
// 8h+2j+s/4). A sub-block's 4 slices of 2-bit quants times x fit int16;
// VPMADDWD by its scale widens them. Y15 holds 0x03 bytes, Y14 0x000f words.

#define PFQ2K 1344

DATA k2w0f<>+0(SB)/4, $0x000f000f
GLOBL k2w0f<>(SB), RODATA, $4
DATA k2q03<>+0(SB)/4, $0x03030303
GLOBL k2q03<>(SB), RODATA, $4

// Q2SL4: slice s of half h, bits 2j, times the 4 activation rows, int16
// pairs into Y4..Y7.
#define Q2SL4(h, j, s) \
	VMOVDQU (320+512*h+64*s)(SI)(BX*4), Y8 \
	VPSRLW $(2*j), Y8, Y8 \
	VPAND Y15, Y8, Y8 \
	VPBROADCASTD (4+128*h+32*j+4*s)(DI), Y9 \
	VPMADDUBSW Y9, Y8, Y9 \
	VPADDW Y9, Y4, Y4 \
	VPBROADCASTD (4+128*h+32*j+4*s)(R8), Y10 \
	VPMADDUBSW Y10, Y8, Y10 \
	VPADDW Y10, Y5, Y5 \
	VPBROADCASTD (4+128*h+32*j+4*s)(R9), Y9 \
	VPMADDUBSW Y9, Y8, Y9 \
	VPADDW Y9, Y6, Y6 \
	VPBROADCASTD (4+128*h+32*j+4*s)(R10), Y10 \
	VPMADDUBSW Y10, Y8, Y10 \
	VPADDW Y10, Y7, Y7

// Q2SC: sub-block sub's scales of the half at (SI)(ix*1) as int16 pairs in
// ysc (xsc its low half).
#define Q2SC(sub, ix, ysc, xsc) \
	VMOVQ (64+16*sub)(SI)(ix*1), xsc \
	VPUNPCKLBW xsc, xsc, xsc \
	VPMOVZXBW xsc, ysc \
	VPAND Y14, ysc, ysc

// Q2SUB4: sub-block sub = 8h+2j+sb (slices s0..s3) for 4 activation rows.
#define Q2SUB4(h, j, sub, s0, s1, s2, s3) \
	ZERO4(Y4, Y5, Y6, Y7) \
	Q2SL4(h, j, s0) \
	Q2SL4(h, j, s1) \
	Q2SL4(h, j, s2) \
	Q2SL4(h, j, s3) \
	Q2SC(sub, BX, Y11, X11) \
	VPMADDWD Y11, Y4, Y4 \
	VPADDD Y4, Y0, Y0 \
	VPMADDWD Y11, Y5, Y5 \
	VPADDD Y5, Y1, Y1 \
	VPMADDWD Y11, Y6, Y6 \
	VPADDD Y6, Y2, Y2 \
	VPMADDWD Y11, Y7, Y7 \
	VPADDD Y7, Y3, Y3

#define Q2J4(h, j, sub0, sub1) \
	Q2SUB4(h, j, sub0, 0, 1, 2, 3) \
	Q2SUB4(h, j, sub1, 4, 5, 6, 7)

// Q2MINW: the mins of sub-blocks 2p and 2p+1 of the half at (SI)(ix*1) as
// int16 pairs per row in Y8; Y9 scratch.
#define Q2MINW(p, ix) \
	VMOVQ (64+32*p)(SI)(ix*1), X8 \
	VMOVQ (80+32*p)(SI)(ix*1), X9 \
	VPUNPCKLBW X9, X8, X8 \
	VPMOVZXBW X8, Y8 \
	VPSRLW $4, Y8, Y8

// Q2MIN4: Y4..Y7 += the min pairs times (bsums[2p], bsums[2p+1]) of each row.
#define Q2MIN4(p) \
	Q2MINW(p, BX) \
	VPBROADCASTD (260+4*p)(DI), Y9 \
	VPMADDWD Y9, Y8, Y9 \
	VPADDD Y9, Y4, Y4 \
	VPBROADCASTD (260+4*p)(R8), Y10 \
	VPMADDWD Y10, Y8, Y10 \
	VPADDD Y10, Y5, Y5 \
	VPBROADCASTD (260+4*p)(R9), Y9 \
	VPMADDWD Y9, Y8, Y9 \
	VPADDD Y9, Y6, Y6 \
	VPBROADCASTD (260+4*p)(R10), Y10 \
	VPMADDWD Y10, Y8, Y10 \
	VPADDD Y10, Y7, Y7

// Q2T: ya = (Y12*d_x)*float(yi) - (Y13*d_x)*float(ym), d_x at 0(xr); yb
// scratch (dotQ2KGo's term, added to the sum after).
#define Q2T(xr, yi, ym, ya, yb) \
	VBROADCASTSS (xr), yb \
	VMULPS yb, Y12, ya \
	VMULPS yb, Y13, yb \
	VCVTDQ2PS yi, yi \
	VMULPS yi, ya, ya \
	VCVTDQ2PS ym, ym \
	VMULPS ym, yb, yb \
	VSUBPS yb, ya, ya

#define Q2F4(xr, yi, ym) \
	Q2T(xr, yi, ym, Y10, Y11) \
	VADDPS (AX), Y10, Y10 \
	VMOVUPS Y10, (AX)

// func gemmQ2KA4(w *byte, half int, nb int, x *q8K, xstride uintptr, aux *q8KAux, auxstride uintptr, out *float32, ostride uintptr, pf *byte)
TEXT ·gemmQ2KA4(SB), NOSPLIT, $0-80
	SETUPA4
	VPBROADCASTD k2q03<>(SB), Y15
	VPBROADCASTD k2w0f<>(SB), Y14
	TESTQ CX, CX
	JZ    q2ka4done
q2ka4loop:
	ZERO4(Y0, Y1, Y2, Y3)
	Q2J4(0, 0, 0, 1)
	PF3(0)
	Q2J4(0, 1, 2, 3)
	PF3(3)
	Q2J4(0, 2, 4, 5)
	PF3(6)
	Q2J4(0, 3, 6, 7)
	PF3(9)
	Q2J4(1, 0, 8, 9)
	PF3(12)
	Q2J4(1, 1, 10, 11)
	PF2(15)
	Q2J4(1, 2, 12, 13)
	PF2(17)
	Q2J4(1, 3, 14, 15)
	PF2(19)
	ZERO4(Y4, Y5, Y6, Y7)
	Q2MIN4(0)
	Q2MIN4(1)
	Q2MIN4(2)
	Q2MIN4(3)
	Q2MIN4(4)
	Q2MIN4(5)
	Q2MIN4(6)
	Q2MIN4(7)
	VCVTPH2PS (SI)(BX*2), Y12
	VCVTPH2PS 32(SI)(BX*2), Y13
	EACH4(Q2F4)
	NEXTA4(1344)
	DECQ CX
	JNZ  q2ka4loop
q2ka4done:
	VZEROUPPER
	RET

// Q2SL1: slice s of half h, bits 2j, of both row halves times the one
// activation row, int16 pairs into Y4 (rows 0..7) and Y5 (rows 8..15).
#define Q2SL1(h, j, s) \
	VPBROADCASTD (4+128*h+32*j+4*s)(DI), Y9 \
	VMOVDQU (320+512*h+64*s)(SI), Y8 \
	VMOVDQU (352+512*h+64*s)(SI), Y10 \
	VPSRLW $(2*j), Y8, Y8 \
	VPSRLW $(2*j), Y10, Y10 \
	VPAND Y15, Y8, Y8 \
	VPAND Y15, Y10, Y10 \
	VPMADDUBSW Y9, Y8, Y8 \
	VPMADDUBSW Y9, Y10, Y10 \
	VPADDW Y8, Y4, Y4 \
	VPADDW Y10, Y5, Y5

#define Q2SUB1(h, j, sub, s0, s1, s2, s3) \
	VPXOR Y4, Y4, Y4 \
	VPXOR Y5, Y5, Y5 \
	Q2SL1(h, j, s0) \
	Q2SL1(h, j, s1) \
	Q2SL1(h, j, s2) \
	Q2SL1(h, j, s3) \
	Q2SC(sub, BX, Y11, X11) \
	VPMADDWD Y11, Y4, Y4 \
	VPADDD Y4, Y0, Y0 \
	Q2SC(sub, R9, Y11, X11) \
	VPMADDWD Y11, Y5, Y5 \
	VPADDD Y5, Y1, Y1

#define Q2J1(h, j, sub0, sub1) \
	Q2SUB1(h, j, sub0, 0, 1, 2, 3) \
	Q2SUB1(h, j, sub1, 4, 5, 6, 7)

// Q2MIN1: Y6 (rows 0..7), Y7 (rows 8..15) += the min pairs times the
// activation row's (bsums[2p], bsums[2p+1]).
#define Q2MIN1(p) \
	VPBROADCASTD (260+4*p)(DI), Y10 \
	Q2MINW(p, BX) \
	VPMADDWD Y10, Y8, Y8 \
	VPADDD Y8, Y6, Y6 \
	Q2MINW(p, R9) \
	VPMADDWD Y10, Y8, Y8 \
	VPADDD Y8, Y7, Y7

// func gemmQ2KA1(w *byte, nb int, x *q8K, aux *q8KAux, out *float32)
TEXT ·gemmQ2KA1(SB), NOSPLIT, $0-40
	MOVQ w+0(FP), SI
	MOVQ nb+8(FP), CX
	MOVQ x+16(FP), DI
	XORQ BX, BX
	MOVQ $8, R9
	VPBROADCASTD k2q03<>(SB), Y15
	VPBROADCASTD k2w0f<>(SB), Y14
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	TESTQ CX, CX
	JZ    q2ka1done
q2ka1loop:
	PREFETCHT0 PFQ2K(SI)
	PREFETCHT0 (PFQ2K+64)(SI)
	PREFETCHT0 (PFQ2K+128)(SI)
	PREFETCHT0 (PFQ2K+192)(SI)
	PREFETCHT0 (PFQ2K+256)(SI)
	PREFETCHT0 (PFQ2K+320)(SI)
	PREFETCHT0 (PFQ2K+384)(SI)
	PREFETCHT0 (PFQ2K+448)(SI)
	PREFETCHT0 (PFQ2K+512)(SI)
	PREFETCHT0 (PFQ2K+576)(SI)
	PREFETCHT0 (PFQ2K+640)(SI)
	PREFETCHT0 (PFQ2K+704)(SI)
	PREFETCHT0 (PFQ2K+768)(SI)
	PREFETCHT0 (PFQ2K+832)(SI)
	PREFETCHT0 (PFQ2K+896)(SI)
	PREFETCHT0 (PFQ2K+960)(SI)
	PREFETCHT0 (PFQ2K+1024)(SI)
	PREFETCHT0 (PFQ2K+1088)(SI)
	PREFETCHT0 (PFQ2K+1152)(SI)
	PREFETCHT0 (PFQ2K+1216)(SI)
	PREFETCHT0 (PFQ2K+1280)(SI)
	VPXOR Y0, Y0, Y0
	VPXOR Y1, Y1, Y1
	Q2J1(0, 0, 0, 1)
	Q2J1(0, 1, 2, 3)
	Q2J1(0, 2, 4, 5)
	Q2J1(0, 3, 6, 7)
	Q2J1(1, 0, 8, 9)
	Q2J1(1, 1, 10, 11)
	Q2J1(1, 2, 12, 13)
	Q2J1(1, 3, 14, 15)
	VPXOR Y6, Y6, Y6
	VPXOR Y7, Y7, Y7
	Q2MIN1(0)
	Q2MIN1(1)
	Q2MIN1(2)
	Q2MIN1(3)
	Q2MIN1(4)
	Q2MIN1(5)
	Q2MIN1(6)
	Q2MIN1(7)
	VCVTPH2PS (SI), Y12
	VCVTPH2PS 32(SI), Y13
	Q2T(DI, Y0, Y6, Y10, Y11)
	VADDPS Y10, Y2, Y2
	VCVTPH2PS 16(SI), Y12
	VCVTPH2PS 48(SI), Y13
	Q2T(DI, Y1, Y7, Y10, Y11)
	VADDPS Y10, Y3, Y3
	ADDQ $1344, SI
	ADDQ $292, DI
	DECQ CX
	JNZ  q2ka1loop
q2ka1done:
	MOVQ out+32(FP), AX
	VMOVUPS Y2, (AX)
	VMOVUPS Y3, 32(AX)
	VZEROUPPER
	RET

// ---- Q5_K (2880 bytes per group and super-block: 16 f16 d at 0, 16 f16
// dmin at 32, the sub-block scales [sub][row] at 64 and the mins as byte
// pairs [pair][row][2] at 192, as Q4_K's; then per 64-element chunk k at
// 320+640k, 8 slices of 4 bytes per row, slice s holding the chunk's quant
// bytes s, s+8, s+16, s+24 (low nibbles: sub-block 2k, high nibbles:
// 2k+1), and at 320+640k+512 two 64-byte planes of fifth
// bits, slice s's in plane s/4 at Q5_0's bits s%4 and 4+s%4).
//
// dotQ5KGo sums in eight float lanes across super-blocks, lane j taking
// sub-block j, and adds them up only at the end. These kernels take one
// sub-block at a time: its slices' VPMADDUBSW products summed as int16 four
// slices at a time (2*31*128*4 < 32768), then times its scale (VPMADDWD:
// one per 16 products, where GGML's generic lanes need one per 4), exact in
// int32, then its float lane sums update; those live on the stack, the
// running sums of -dmin*msum in out (A4) or a register (A1). The activations
// come in the packed order (laneOrder).

#define PFQ5K 2880

DATA k2q10<>+0(SB)/4, $0x10101010
GLOBL k2q10<>(SB), RODATA, $4

// Q5KSC: 8 byte scales at src as int16 pairs (s, s) per row, stored at dst.
#define Q5KSC(src, dst) \
	VMOVQ src, X8 \
	VPUNPCKLBW X8, X8, X8 \
	VPMOVZXBW X8, Y8 \
	VMOVDQU Y8, dst

// Q5KLF: the float lane sums at off(SP) += dd * float(acc).
#define Q5KLF(acc, dd, off) \
	VCVTDQ2PS acc, acc \
	VMULPS acc, dd, acc \
	VADDPS off(SP), acc, acc \
	VMOVUPS acc, off(SP)

// Stack of the A4 kernel: the half's sub-block scales as Q5KSC pairs at
// 32*sub, activation row r's float lane sums at 256+256r (lane j at +32j),
// and its d*dx at 1280+32r (a frame of 1408 bytes). Q5KA4SUMS ends the
// float lane sums, which each call zeroes.
#define Q5KA4SUMS 1280

// The A4 kernel walks the super-block chunk by chunk in a loop (R15 at
// chunk k's slices, AX = 64k, the activation pointers and R14 moved on a
// chunk each time): fully unrolled, its code ran 2-4% slower.

// Q5KDP4: the values in Y4 times activation row xr's slice s of sub-block
// 2k+hi, added to the row's int16 sums acc (at most 4*2*31*128 = 31744 over
// 4 slices).
#define Q5KDP4(xr, acc, hi, s) \
	VPBROADCASTD (4+32*hi+4*s)(xr), Y7 \
	VPMADDUBSW Y7, Y4, Y7 \
	VPADDW Y7, acc, acc

#define Q5KDP44(hi, s) \
	Q5KDP4(DI, Y0, hi, s) \
	Q5KDP4(R8, Y1, hi, s) \
	Q5KDP4(R9, Y2, hi, s) \
	Q5KDP4(R10, Y3, hi, s)

// Q5KV4LO / Q5KV4HI: slice s of the chunk's low nibbles (sub-block 2k) or
// high ones (2k+1) with their fifth bits (the plane in Y5) as bytes in Y4.
#define Q5KV4LO(s) \
	VPAND (320+64*s)(R15)(BX*4), Y15, Y4 \
	VPSLLW $(4-(s%4)), Y5, Y6 \
	VPAND Y14, Y6, Y6 \
	VPOR Y6, Y4, Y4

#define Q5KV4HI(s) \
	VMOVDQU (320+64*s)(R15)(BX*4), Y4 \
	VPSRLW $4, Y4, Y4 \
	VPAND Y15, Y4, Y4 \
	VPSRLW $(s%4), Y5, Y6 \
	VPAND Y14, Y6, Y6 \
	VPOR Y6, Y4, Y4

// Q5KQ4: slices 4q..4q+3 of sub-block 2k+hi for the 4 activation rows,
// into the int16 sums Y0..Y3.
#define Q5KQ4(hi, q, V) \
	ZERO4(Y0, Y1, Y2, Y3) \
	VMOVDQU (320+512+64*q)(R15)(BX*4), Y5 \
	V((4*q)) \
	Q5KDP44(hi, (4*q)) \
	V((4*q+1)) \
	Q5KDP44(hi, (4*q+1)) \
	V((4*q+2)) \
	Q5KDP44(hi, (4*q+2)) \
	V((4*q+3)) \
	Q5KDP44(hi, (4*q+3))

// Q5KSUBF: row r's int16 sums acc times the sub-block's scales, plus its
// first four slices' in y32, into its float lane.
#define Q5KSUBF(acc, y32, hi, r) \
	VPMADDWD (32*hi)(SP)(AX*1), acc, acc \
	VPADDD acc, y32, y32 \
	VCVTDQ2PS y32, y32 \
	VMULPS (1280+32*r)(SP), y32, y32 \
	VADDPS (256+256*r+32*hi)(SP)(AX*1), y32, y32 \
	VMOVUPS y32, (256+256*r+32*hi)(SP)(AX*1)

// Q5KSUB4: sub-block 2k+hi (V its unpacking) over the 4 activation rows,
// into its float lane; then its share of the next group's super-block asked
// for (prefetch_amd64.h): 6 lines a sub-block covers its 45.
#define Q5KSUB4(hi, V) \
	Q5KQ4(hi, 0, V) \
	VPMADDWD (32*hi)(SP)(AX*1), Y0, Y8 \
	VPMADDWD (32*hi)(SP)(AX*1), Y1, Y9 \
	VPMADDWD (32*hi)(SP)(AX*1), Y2, Y10 \
	VPMADDWD (32*hi)(SP)(AX*1), Y3, Y11 \
	Q5KQ4(hi, 1, V) \
	Q5KSUBF(Y0, Y8, hi, 0) \
	Q5KSUBF(Y1, Y9, hi, 1) \
	Q5KSUBF(Y2, Y10, hi, 2) \
	Q5KSUBF(Y3, Y11, hi, 3) \
	PF5(6*(hi)) \
	PF1(6*(hi)+5)

// Q5KMINF: the running sums at (AX) -= (dmin * d_x) * float(ym), dmin in
// Y13, d_x the f32 at (xr).
#define Q5KMINF(xr, yi, ym) \
	VBROADCASTSS (xr), Y8 \
	VMULPS Y8, Y13, Y8 \
	VCVTDQ2PS ym, ym \
	VMULPS ym, Y8, Y8 \
	VMOVUPS (AX), Y9 \
	VSUBPS Y8, Y9, Y9 \
	VMOVUPS Y9, (AX)

// Q5KFIN: the sums at (AX) += the 8 float lane sums at off(SP), lane 0 first.
#define Q5KFIN(off) \
	VMOVUPS (AX), Y0 \
	VADDPS (off)(SP), Y0, Y0 \
	VADDPS (off+32)(SP), Y0, Y0 \
	VADDPS (off+64)(SP), Y0, Y0 \
	VADDPS (off+96)(SP), Y0, Y0 \
	VADDPS (off+128)(SP), Y0, Y0 \
	VADDPS (off+160)(SP), Y0, Y0 \
	VADDPS (off+192)(SP), Y0, Y0 \
	VADDPS (off+224)(SP), Y0, Y0 \
	VMOVUPS Y0, (AX)

// func gemmQ5KA4(w *byte, half int, nb int, x *q8K, xstride uintptr, aux *q8KAux, auxstride uintptr, out *float32, ostride uintptr, pf *byte)
TEXT ·gemmQ5KA4(SB), $1408-80
	SETUPA4
	VPBROADCASTD k2q10<>(SB), Y14
	VXORPS Y0, Y0, Y0
	MOVQ   $256, AX
q5ka4zero:
	VMOVUPS Y0, (SP)(AX*1)
	ADDQ    $32, AX
	CMPQ    AX, $Q5KA4SUMS
	JB      q5ka4zero
	TESTQ CX, CX
	JZ    q5ka4done
q5ka4loop:
	Q5KSC(64(SI)(BX*1), 0(SP))
	Q5KSC(80(SI)(BX*1), 32(SP))
	Q5KSC(96(SI)(BX*1), 64(SP))
	Q5KSC(112(SI)(BX*1), 96(SP))
	Q5KSC(128(SI)(BX*1), 128(SP))
	Q5KSC(144(SI)(BX*1), 160(SP))
	Q5KSC(160(SI)(BX*1), 192(SP))
	Q5KSC(176(SI)(BX*1), 224(SP))
	ZERO4(Y4, Y5, Y6, Y7)
	Q4KMIN4(0)
	Q4KMIN4(1)
	Q4KMIN4(2)
	Q4KMIN4(3)
	VCVTPH2PS 32(SI)(BX*2), Y13
	EACH4(Q5KMINF)
	VCVTPH2PS (SI)(BX*2), Y13
	VBROADCASTSS (DI), Y10
	VMULPS Y10, Y13, Y10
	VMOVUPS Y10, 1280(SP)
	VBROADCASTSS (R8), Y11
	VMULPS Y11, Y13, Y11
	VMOVUPS Y11, 1312(SP)
	VBROADCASTSS (R9), Y12
	VMULPS Y12, Y13, Y12
	VMOVUPS Y12, 1344(SP)
	VBROADCASTSS (R10), Y9
	VMULPS Y9, Y13, Y13
	VMOVUPS Y13, 1376(SP)
	MOVQ SI, R15
	XORQ AX, AX
q5ka4k:
	Q5KSUB4(0, Q5KV4LO)
	Q5KSUB4(1, Q5KV4HI)
	ADDQ $640, R15
	ADDQ $64, DI
	ADDQ $64, R8
	ADDQ $64, R9
	ADDQ $64, R10
	ADDQ $768, R14
	ADDQ $64, AX
	CMPQ AX, $256
	JB   q5ka4k
	SUBQ $256, DI
	SUBQ $256, R8
	SUBQ $256, R9
	SUBQ $256, R10
	SUBQ $3072, R14
	NEXTA4(2880)
	DECQ CX
	JNZ  q5ka4loop
q5ka4done:
	LANESFIN4
	VZEROUPPER
	RET

// Stack of the A1 kernel: sub-block sub's scales as Q5KSC pairs at 64*sub
// (half h at +32h), the float lane sums at 512+64j (half h at +32h).
#define Q5KA1FRAME 1024

// The A1 kernel walks the super-block chunk by chunk in a loop, as the A4
// one does (R15 at chunk k's slices, DI moved on a chunk each time, AX = 64k,
// so (AX*2) indexes sub-block 2k's scales and float lane sums).

// Q5KV1LO / Q5KV1HI: slice s of the chunk's low nibbles (sub-block 2k, the
// slice's line of the next super-block asked for) or high ones (2k+1) with
// their fifth bits (the planes in Y6, Y7) for both halves, into Y4 and Y5.
#define Q5KV1LO(s) \
	PREFETCHT0 (PFQ5K+320+64*s)(R15) \
	VPAND (320+64*s)(R15), Y15, Y4 \
	VPSLLW $(4-(s%4)), Y6, Y8 \
	VPAND Y14, Y8, Y8 \
	VPOR Y8, Y4, Y4 \
	VPAND (320+64*s+32)(R15), Y15, Y5 \
	VPSLLW $(4-(s%4)), Y7, Y8 \
	VPAND Y14, Y8, Y8 \
	VPOR Y8, Y5, Y5

#define Q5KV1HI(s) \
	VMOVDQU (320+64*s)(R15), Y4 \
	VPSRLW $4, Y4, Y4 \
	VPAND Y15, Y4, Y4 \
	VPSRLW $(s%4), Y6, Y8 \
	VPAND Y14, Y8, Y8 \
	VPOR Y8, Y4, Y4 \
	VMOVDQU (320+64*s+32)(R15), Y5 \
	VPSRLW $4, Y5, Y5 \
	VPAND Y15, Y5, Y5 \
	VPSRLW $(s%4), Y7, Y8 \
	VPAND Y14, Y8, Y8 \
	VPOR Y8, Y5, Y5

// Q5KS1: slice s of sub-block 2k+hi for both halves against the one
// activation row, into the int16 sums Y0 (rows 0..7) and Y1 (rows 8..15).
#define Q5KS1(hi, s, V) \
	V(s) \
	VPBROADCASTD (4+32*hi+4*s)(DI), Y9 \
	VPMADDUBSW Y9, Y4, Y4 \
	VPADDW Y4, Y0, Y0 \
	VPMADDUBSW Y9, Y5, Y5 \
	VPADDW Y5, Y1, Y1

// Q5KQ1: slices 4q..4q+3 of sub-block 2k+hi for both halves.
#define Q5KQ1(hi, q, V) \
	VPXOR Y0, Y0, Y0 \
	VPXOR Y1, Y1, Y1 \
	VMOVDQU (320+512+64*q)(R15), Y6 \
	VMOVDQU (320+512+64*q+32)(R15), Y7 \
	Q5KS1(hi, (4*q), V) \
	Q5KS1(hi, (4*q+1), V) \
	Q5KS1(hi, (4*q+2), V) \
	Q5KS1(hi, (4*q+3), V)

// Q5KLF1: Q5KLF on the lane sums of sub-block 2k (AX*2) plus off.
#define Q5KLF1(acc, dd, off) \
	VCVTDQ2PS acc, acc \
	VMULPS acc, dd, acc \
	VADDPS off(SP)(AX*2), acc, acc \
	VMOVUPS acc, off(SP)(AX*2)

// Q5KSUB1: sub-block 2k+hi over the super-block for both halves, d*dx of
// each in Y12, Y13, times its scales into its float lane.
#define Q5KSUB1(hi, V) \
	Q5KQ1(hi, 0, V) \
	VPMADDWD (64*hi)(SP)(AX*2), Y0, Y2 \
	VPMADDWD (64*hi+32)(SP)(AX*2), Y1, Y3 \
	Q5KQ1(hi, 1, V) \
	VPMADDWD (64*hi)(SP)(AX*2), Y0, Y0 \
	VPADDD Y0, Y2, Y2 \
	VPMADDWD (64*hi+32)(SP)(AX*2), Y1, Y1 \
	VPADDD Y1, Y3, Y3 \
	Q5KLF1(Y2, Y12, (512+64*hi)) \
	Q5KLF1(Y3, Y13, (544+64*hi))

// Q5KSC16: sub-block sub's scales of both halves onto the stack.
#define Q5KSC16(sub) \
	Q5KSC((64+16*sub)(SI), (64*sub)(SP)) \
	Q5KSC((72+16*sub)(SI), (64*sub+32)(SP))

// Q5KMIN16: mins pair p of both halves times the activation row's pair, into
// Y4, Y5.
#define Q5KMIN16(p) \
	VPBROADCASTD (16+4*p)(DX), Y9 \
	VPMOVZXBW (192+32*p)(SI), Y8 \
	VPMADDWD Y9, Y8, Y8 \
	VPADDD Y8, Y4, Y4 \
	VPMOVZXBW (208+32*p)(SI), Y2 \
	VPMADDWD Y9, Y2, Y2 \
	VPADDD Y2, Y5, Y5

// Q5KFIN1: ya += the float lane sums of half h, lane 0 first.
#define Q5KFIN1(ya, h) \
	VADDPS (512+32*h)(SP), ya, ya \
	VADDPS (576+32*h)(SP), ya, ya \
	VADDPS (640+32*h)(SP), ya, ya \
	VADDPS (704+32*h)(SP), ya, ya \
	VADDPS (768+32*h)(SP), ya, ya \
	VADDPS (832+32*h)(SP), ya, ya \
	VADDPS (896+32*h)(SP), ya, ya \
	VADDPS (960+32*h)(SP), ya, ya

// func gemmQ5KA1(w *byte, nb int, x *q8K, aux *q8KAux, out *float32)
// A whole group against one activation row; the running sums of -dmin*msum
// in Y10 (rows 0..7) and Y11 (rows 8..15).
TEXT ·gemmQ5KA1(SB), $1024-40
	MOVQ w+0(FP), SI
	MOVQ nb+8(FP), CX
	MOVQ x+16(FP), DI
	MOVQ aux+24(FP), DX
	VPBROADCASTD k2q0f<>(SB), Y15
	VPBROADCASTD k2q10<>(SB), Y14
	VXORPS Y10, Y10, Y10
	VXORPS Y11, Y11, Y11
	MOVQ   $512, AX
q5ka1zero:
	VMOVUPS Y10, (SP)(AX*1)
	ADDQ    $32, AX
	CMPQ    AX, $Q5KA1FRAME
	JB      q5ka1zero
	TESTQ CX, CX
	JZ    q5ka1done
q5ka1loop:
	// The next group's lines Q5KL1 does not ask for: the scales and mins,
	// and each chunk's two planes of fifth bits.
	PREFETCHT0 (PFQ5K)(SI)
	PREFETCHT0 (PFQ5K+64)(SI)
	PREFETCHT0 (PFQ5K+128)(SI)
	PREFETCHT0 (PFQ5K+192)(SI)
	PREFETCHT0 (PFQ5K+256)(SI)
	PREFETCHT0 (PFQ5K+832)(SI)
	PREFETCHT0 (PFQ5K+896)(SI)
	PREFETCHT0 (PFQ5K+1472)(SI)
	PREFETCHT0 (PFQ5K+1536)(SI)
	PREFETCHT0 (PFQ5K+2112)(SI)
	PREFETCHT0 (PFQ5K+2176)(SI)
	PREFETCHT0 (PFQ5K+2752)(SI)
	PREFETCHT0 (PFQ5K+2816)(SI)
	Q5KSC16(0)
	Q5KSC16(1)
	Q5KSC16(2)
	Q5KSC16(3)
	Q5KSC16(4)
	Q5KSC16(5)
	Q5KSC16(6)
	Q5KSC16(7)
	VPXOR Y4, Y4, Y4
	VPXOR Y5, Y5, Y5
	Q5KMIN16(0)
	Q5KMIN16(1)
	Q5KMIN16(2)
	Q5KMIN16(3)
	VBROADCASTSS (DI), Y9
	VCVTPH2PS 32(SI), Y8
	VMULPS Y9, Y8, Y8
	VCVTDQ2PS Y4, Y4
	VMULPS Y4, Y8, Y8
	VSUBPS Y8, Y10, Y10
	VCVTPH2PS 48(SI), Y8
	VMULPS Y9, Y8, Y8
	VCVTDQ2PS Y5, Y5
	VMULPS Y5, Y8, Y8
	VSUBPS Y8, Y11, Y11
	VCVTPH2PS (SI), Y12
	VMULPS Y9, Y12, Y12
	VCVTPH2PS 16(SI), Y13
	VMULPS Y9, Y13, Y13
	MOVQ SI, R15
	XORQ AX, AX
q5ka1k:
	Q5KSUB1(0, Q5KV1LO)
	Q5KSUB1(1, Q5KV1HI)
	ADDQ $640, R15
	ADDQ $64, DI
	ADDQ $64, AX
	CMPQ AX, $256
	JB   q5ka1k
	SUBQ $256, DI
	ADDQ $2880, SI
	ADDQ $292, DI
	ADDQ $96, DX
	DECQ CX
	JNZ  q5ka1loop
q5ka1done:
	LANESFIN1
	VZEROUPPER
	RET

// ---- Q3_K (1824 bytes per group and super-block: 16 f16 d at 0; the
// signed scales of sub-blocks 2c and 2c+1 as byte pairs [c][row][2] at
// 32+32c, c a 32-element chunk; per slice s at 288+64s the row's hmask bytes
// s, s+8, s+16, s+24, inverted (bit c set: the element of chunk c is 4 below
// its two low bits); per half h (chunks 4h..4h+3) and slice s at 800+512h+64s
// the row's quant bytes 32h+s, +8, +16, +24, chunk 4h+j in bits 2j). The
// activations come in Q5_K's order and the arithmetic is dotQ3KGo's: float
// lane c takes chunk c. The kernels take the values 4 higher (0..7, the
// hmask bit as it is in the file), so their products are VPMADDUBSW's
// unsigned operand and a slice's sum as int16 at most 2*7*127, 8 slices
// 14224; from a chunk's 8 slices summed as int16 they take 4 times the
// activations' 16-element sums (Q8_K's bsums), which leaves the values' own
// sums, then multiply by the scale pairs (one VPMADDWD per chunk and 8
// rows), exact in int32.

#define PFQ3K 1824

DATA k2q04<>+0(SB)/4, $0x04040404
GLOBL k2q04<>(SB), RODATA, $4

// Q3KSC: 8 rows' scale pairs at src as int16 pairs, stored at dst.
#define Q3KSC(src, dst) \
	VPMOVSXBW src, Y8 \
	VMOVDQU Y8, dst

// Q3KV: chunk 4h+j's values for 8 rows, 4 higher: the two low bits
// (yw >> 2j) & 3, plus 4 where the inverted hmask bit, moved to bit 2 by
// `sh $n` on yh, is clear; into yv; yt is scratch. Y15 holds 0x03 bytes,
// Y14 0x04.
#define Q3KV(j, sh, n, yw, yh, yv, yt) \
	VPSRLW $(2*j), yw, yv \
	VPAND Y15, yv, yv \
	sh $n, yh, yt \
	VPANDN Y14, yt, yt \
	VPOR yt, yv, yv

// Q3KDP4: the values (Y4) times activation row xr's slice s of chunk c,
// added to the row's int16 sums acc (per row: sub-block 2c's, then 2c+1's).
#define Q3KDP4(xr, acc, c, s) \
	VPBROADCASTD (4+32*c+4*s)(xr), Y8 \
	VPMADDUBSW Y8, Y4, Y8 \
	VPADDW Y8, acc, acc

// Q3KS4: slice s of chunk c (= 4h+j) for the 4 activation rows.
#define Q3KS4(h, j, c, sh, n, s) \
	VMOVDQU (288+64*s)(SI)(BX*4), Y6 \
	VMOVDQU (800+512*h+64*s)(SI)(BX*4), Y7 \
	Q3KV(j, sh, n, Y7, Y6, Y4, Y9) \
	Q3KDP4(DI, Y0, c, s) \
	Q3KDP4(R8, Y1, c, s) \
	Q3KDP4(R9, Y2, c, s) \
	Q3KDP4(R10, Y3, c, s)

// Q3KCHF: a row's int16 sums of chunk c (activation row xr) less 4 times
// its two 16-element sums of the chunk (the values' own sums then, at most
// 16*4*127 in magnitude, so the int16 difference is exact), times the
// chunk's scale pairs: its float lane c at off(SP) += dd * that.
#define Q3KCHF(xr, acc, dd, c, off) \
	VPBROADCASTD (260+4*c)(xr), Y8 \
	VPSLLW $2, Y8, Y8 \
	VPSUBW Y8, acc, acc \
	VPMADDWD (32*c)(SP), acc, acc \
	Q5KLF(acc, dd, off)

// Q3KCH4: chunk c (= 4h+j; its hmask bit moved to bit 2 by `sh $n`) over
// its 8 slices for the 4 activation rows, d*dx of each in Y10..Y13, into
// float lane c; then the chunk's share of the next group's super-block
// asked for (prefetch_amd64.h): 4 lines a chunk covers its 29.
#define Q3KCH4(h, j, c, sh, n) \
	ZERO4(Y0, Y1, Y2, Y3) \
	Q3KS4(h, j, c, sh, n, 0) \
	Q3KS4(h, j, c, sh, n, 1) \
	Q3KS4(h, j, c, sh, n, 2) \
	Q3KS4(h, j, c, sh, n, 3) \
	Q3KS4(h, j, c, sh, n, 4) \
	Q3KS4(h, j, c, sh, n, 5) \
	Q3KS4(h, j, c, sh, n, 6) \
	Q3KS4(h, j, c, sh, n, 7) \
	Q3KCHF(DI, Y0, Y10, c, (256+32*c)) \
	Q3KCHF(R8, Y1, Y11, c, (512+32*c)) \
	Q3KCHF(R9, Y2, Y12, c, (768+32*c)) \
	Q3KCHF(R10, Y3, Y13, c, (1024+32*c)) \
	PF4(4*(c))

// func gemmQ3KA4(w *byte, half int, nb int, x *q8K, xstride uintptr, aux *q8KAux, auxstride uintptr, out *float32, ostride uintptr, pf *byte)
// The stack as Q5_K's A4 kernel's, chunk c's scale pairs at 32c.
TEXT ·gemmQ3KA4(SB), $1280-80
	SETUPA4
	VPBROADCASTD k2q03<>(SB), Y15
	VPBROADCASTD k2q04<>(SB), Y14
	VXORPS Y0, Y0, Y0
	MOVQ   $256, AX
q3ka4zero:
	VMOVUPS Y0, (SP)(AX*1)
	ADDQ    $32, AX
	CMPQ    AX, $1280
	JB      q3ka4zero
	TESTQ CX, CX
	JZ    q3ka4done
q3ka4loop:
	Q3KSC(32(SI)(BX*2), 0(SP))
	Q3KSC(64(SI)(BX*2), 32(SP))
	Q3KSC(96(SI)(BX*2), 64(SP))
	Q3KSC(128(SI)(BX*2), 96(SP))
	Q3KSC(160(SI)(BX*2), 128(SP))
	Q3KSC(192(SI)(BX*2), 160(SP))
	Q3KSC(224(SI)(BX*2), 192(SP))
	Q3KSC(256(SI)(BX*2), 224(SP))
	VCVTPH2PS (SI)(BX*2), Y13
	VBROADCASTSS (DI), Y10
	VMULPS Y10, Y13, Y10
	VBROADCASTSS (R8), Y11
	VMULPS Y11, Y13, Y11
	VBROADCASTSS (R9), Y12
	VMULPS Y12, Y13, Y12
	VBROADCASTSS (R10), Y9
	VMULPS Y9, Y13, Y13
	Q3KCH4(0, 0, 0, VPSLLW, 2)
	Q3KCH4(0, 1, 1, VPSLLW, 1)
	Q3KCH4(0, 2, 2, VPSRLW, 0)
	Q3KCH4(0, 3, 3, VPSRLW, 1)
	Q3KCH4(1, 0, 4, VPSRLW, 2)
	Q3KCH4(1, 1, 5, VPSRLW, 3)
	Q3KCH4(1, 2, 6, VPSRLW, 4)
	Q3KCH4(1, 3, 7, VPSRLW, 5)
	NEXTA4(1824)
	DECQ CX
	JNZ  q3ka4loop
q3ka4done:
	LANESFIN4
	VZEROUPPER
	RET

// Q3KS1: slice s of chunk c (= 4h+j) for both halves against the one
// activation row, into the int16 sums Y0 (rows 0..7) and Y1 (rows 8..15).
#define Q3KS1(h, j, c, sh, n, s) \
	VMOVDQU (288+64*s)(SI), Y6 \
	VMOVDQU (320+64*s)(SI), Y7 \
	VMOVDQU (800+512*h+64*s)(SI), Y2 \
	VMOVDQU (832+512*h+64*s)(SI), Y3 \
	Q3KV(j, sh, n, Y2, Y6, Y4, Y11) \
	Q3KV(j, sh, n, Y3, Y7, Y5, Y11) \
	VPBROADCASTD (4+32*c+4*s)(DI), Y10 \
	VPMADDUBSW Y10, Y4, Y4 \
	VPADDW Y4, Y0, Y0 \
	VPMADDUBSW Y10, Y5, Y5 \
	VPADDW Y5, Y1, Y1

// Q3KCH1: chunk c over its 8 slices for both halves, d*dx of each in Y12,
// Y13, times the chunk's scale pairs into float lane c; its share of the next
// super-block asked for first.
#define Q3KCH1(h, j, c, sh, n) \
	PREFETCHT0 (PFQ3K+288+64*c)(SI) \
	PREFETCHT0 (PFQ3K+800+64*c)(SI) \
	PREFETCHT0 (PFQ3K+1312+64*c)(SI) \
	VPXOR Y0, Y0, Y0 \
	VPXOR Y1, Y1, Y1 \
	Q3KS1(h, j, c, sh, n, 0) \
	Q3KS1(h, j, c, sh, n, 1) \
	Q3KS1(h, j, c, sh, n, 2) \
	Q3KS1(h, j, c, sh, n, 3) \
	Q3KS1(h, j, c, sh, n, 4) \
	Q3KS1(h, j, c, sh, n, 5) \
	Q3KS1(h, j, c, sh, n, 6) \
	Q3KS1(h, j, c, sh, n, 7) \
	VPBROADCASTD (260+4*c)(DI), Y10 \
	VPSLLW $2, Y10, Y10 \
	VPSUBW Y10, Y0, Y0 \
	VPSUBW Y10, Y1, Y1 \
	VPMADDWD (64*c)(SP), Y0, Y0 \
	VPMADDWD (64*c+32)(SP), Y1, Y1 \
	Q5KLF(Y0, Y12, (512+64*c)) \
	Q5KLF(Y1, Y13, (544+64*c))

// Q3KSC16: chunk c's scale pairs of both halves onto the stack.
#define Q3KSC16(c) \
	Q3KSC((32+32*c)(SI), (64*c)(SP)) \
	Q3KSC((48+32*c)(SI), (64*c+32)(SP))

// func gemmQ3KA1(w *byte, nb int, x *q8K, aux *q8KAux, out *float32)
// A whole group against one activation row; the stack as Q5_K's A1 kernel's.
TEXT ·gemmQ3KA1(SB), $1024-40
	MOVQ w+0(FP), SI
	MOVQ nb+8(FP), CX
	MOVQ x+16(FP), DI
	VPBROADCASTD k2q03<>(SB), Y15
	VPBROADCASTD k2q04<>(SB), Y14
	VXORPS Y10, Y10, Y10
	MOVQ   $512, AX
q3ka1zero:
	VMOVUPS Y10, (SP)(AX*1)
	ADDQ    $32, AX
	CMPQ    AX, $1024
	JB      q3ka1zero
	TESTQ CX, CX
	JZ    q3ka1done
q3ka1loop:
	PREFETCHT0 (PFQ3K)(SI)
	PREFETCHT0 (PFQ3K+64)(SI)
	PREFETCHT0 (PFQ3K+128)(SI)
	PREFETCHT0 (PFQ3K+192)(SI)
	PREFETCHT0 (PFQ3K+256)(SI)
	Q3KSC16(0)
	Q3KSC16(1)
	Q3KSC16(2)
	Q3KSC16(3)
	Q3KSC16(4)
	Q3KSC16(5)
	Q3KSC16(6)
	Q3KSC16(7)
	VBROADCASTSS (DI), Y10
	VCVTPH2PS (SI), Y12
	VMULPS Y10, Y12, Y12
	VCVTPH2PS 16(SI), Y13
	VMULPS Y10, Y13, Y13
	Q3KCH1(0, 0, 0, VPSLLW, 2)
	Q3KCH1(0, 1, 1, VPSLLW, 1)
	Q3KCH1(0, 2, 2, VPSRLW, 0)
	Q3KCH1(0, 3, 3, VPSRLW, 1)
	Q3KCH1(1, 0, 4, VPSRLW, 2)
	Q3KCH1(1, 1, 5, VPSRLW, 3)
	Q3KCH1(1, 2, 6, VPSRLW, 4)
	Q3KCH1(1, 3, 7, VPSRLW, 5)
	ADDQ $1824, SI
	ADDQ $292, DI
	DECQ CX
	JNZ  q3ka1loop
q3ka1done:
	VXORPS Y10, Y10, Y10
	VXORPS Y11, Y11, Y11
	LANESFIN1
	VZEROUPPER
	RET

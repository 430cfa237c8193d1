//go:build amd64 && !purego

#include "textflag.h"
#include "prefetch_amd64.h"
#include "avx2_amd64.h"

// AVX2 kernels over Q8_0, Q4_0 and Q5_0 weights in the packed 16-row groups of the
// AVX-512 path (repack.go), dotted with Q8_0 activation blocks (34 bytes: f16
// d, 32 int8) and their side data (8-byte q8Aux: d as f32, K*sum(q)). As in
// kgemm_avx2_amd64.s, A4 kernels take half a group (BX = 8*half: (SI)(BX*4)
// its 32 bytes of a 64-byte slice, (SI)(BX*2) its 8 f16 scales) and 4
// activation rows; A1 kernels a whole group and one activation row.
//
// Q8_0 is stored with the sign bit flipped; the kernels flip it back and
// multiply |w| by x with w's sign (VPSIGNB), as GGML's AVX2 kernels do: a
// pair of products is at most 2*128*127 and fits VPMADDUBSW's int16, and
// VPMADDWD by ones widens each slice to int32. Q4_0's nibbles (0..15) times
// x fit int16 for a whole block (8 pairs of at most 2*15*127); the kernel
// subtracts 8*sum(x) (the side data's c). Q5_0 adds the fifth bits (0..31:
// two slices' low and high products fit int16 together; the A4 kernels widen
// per two slices, the A1 kernels per slice) and subtracts 16*sum(x). Per block the float update is the portable kernels'
// (dotQ8Go, dotQ4Go, dotQ5_0Go): sum += (d_w*d_x)*float(isum), lane
// by lane, so each row's result is bitwise equal to them.

// PFQ8, PFQ4: how far ahead the A1 kernels ask for weights (about 2 KiB, 4
// Q8_0 or 8 Q4_0 blocks of a group), as in kgemm_avx2_amd64.s.
#define PFQ8 2176
#define PFQ4 2304
#define PFQ5 2112

DATA g2x80<>+0(SB)/4, $0x80808080
GLOBL g2x80<>(SB), RODATA, $4
DATA g2x0f<>+0(SB)/4, $0x0f0f0f0f
GLOBL g2x0f<>(SB), RODATA, $4
DATA g2one<>+0(SB)/4, $0x00010001
GLOBL g2one<>(SB), RODATA, $4
DATA g2x10<>+0(SB)/4, $0x10101010
GLOBL g2x10<>(SB), RODATA, $4

// SETUPB4 loads a 4-row kernel's arguments: SI weights, BX 8*half, CX
// blocks, DI/R8/R9/R10 activation rows, DX/R11/R12/R13 their side data,
// R14 the bytes to prefetch (prefetch_amd64.h); Y13 = 1 in every int16,
// Y4..Y7 (the running sums) = 0.
#define SETUPB4 \
	ARGS4 \
	MOVQ pf+72(FP), R14 \
	VPBROADCASTD g2one<>(SB), Y13 \
	VXORPS Y4, Y4, Y4 \
	VXORPS Y5, Y5, Y5 \
	VXORPS Y6, Y6, Y6 \
	VXORPS Y7, Y7, Y7

// SETUPM4: SETUPB4 for the Q4_1 and Q5_1 kernels, whose side data are the
// activation blocks' d and s as float32 (q81Aux): SI weights, BX 8*half, CX
// blocks, DI/R8/R9/R10 activation rows, DX/R11/R12/R13 their side data, R14
// the bytes to prefetch; Y13 = 1 in every int16. It zeroes the 4 output
// rows' 8 lanes (the running sums, kept at out).
#define SETUPM4 \
	ARGS4 \
	MOVQ pf+72(FP), R14 \
	VPBROADCASTD g2one<>(SB), Y13 \
	ZEROOUT4(Y4)

// MFLOAT4: the float updates of the 4 rows: d_w in Y12, m_w in Y10.
#define MFLOAT4 \
	VCVTPH2PS (SI)(BX*2), Y12 \
	VCVTPH2PS 32(SI)(BX*2), Y10 \
	EACHAUX4(MFM)

#define STOREB4 \
	MOVQ out+56(FP), AX \
	MOVQ ostride+64(FP), BX \
	VMOVUPS Y4, (AX) \
	ADDQ BX, AX \
	VMOVUPS Y5, (AX) \
	ADDQ BX, AX \
	VMOVUPS Y6, (AX) \
	ADDQ BX, AX \
	VMOVUPS Y7, (AX) \
	VZEROUPPER

#define NEXTB4(wb) \
	ADDQ $wb, SI \
	ADDQ $wb, R14 \
	ADDQ $34, DI \
	ADDQ $34, R8 \
	ADDQ $34, R9 \
	ADDQ $34, R10 \
	ADDQ $8, DX \
	ADDQ $8, R11 \
	ADDQ $8, R12 \
	ADDQ $8, R13

#define ZEROB(a, b, c, d) \
	VPXOR a, a, a \
	VPXOR b, b, b \
	VPXOR c, c, c \
	VPXOR d, d, d

// FB: sum += (Y12 * d_x) * float(acc), d_x the f32 at 0(ar); Y14 scratch.
#define FB(ar, acc, sum) \
	VBROADCASTSS (ar), Y14 \
	VMULPS Y14, Y12, Y14 \
	VCVTDQ2PS acc, acc \
	VMULPS acc, Y14, Y14 \
	VADDPS Y14, sum, sum

// ---- Q8_0 (544 bytes per group and block: 16 f16 d, then 8 slices of 4
// bytes per row, sign bit flipped). Y15 holds 0x80 bytes.

// Q8DP: |w| (Y9) times x with w's sign (Y8), 4 bytes at 2+4s of the row at
// xr, as int32 into acc.
#define Q8DP(s, xr, acc) \
	VPBROADCASTD (2+4*s)(xr), Y10 \
	VPSIGNB Y8, Y10, Y10 \
	VPMADDUBSW Y10, Y9, Y10 \
	VPMADDWD Y13, Y10, Y10 \
	VPADDD Y10, acc, acc

#define Q8S4(s) \
	VPXOR (32+64*s)(SI)(BX*4), Y15, Y8 \
	VPABSB Y8, Y9 \
	Q8DP(s, DI, Y0) \
	Q8DP(s, R8, Y1) \
	Q8DP(s, R9, Y2) \
	Q8DP(s, R10, Y3)

// func gemmQ8A4(w *byte, half int, nb int, x *byte, xstride uintptr, aux *q8Aux, auxstride uintptr, out *float32, ostride uintptr, pf *byte)
TEXT ·gemmQ8A4(SB), NOSPLIT, $0-80
	SETUPB4
	VPBROADCASTD g2x80<>(SB), Y15
	TESTQ CX, CX
	JZ    q8a4done
q8a4loop:
	ZEROB(Y0, Y1, Y2, Y3)
	Q8S4(0)
	PF2(0)
	Q8S4(1)
	PF1(2)
	Q8S4(2)
	PF1(3)
	Q8S4(3)
	PF1(4)
	Q8S4(4)
	PF1(5)
	Q8S4(5)
	PF1(6)
	Q8S4(6)
	PF1(7)
	Q8S4(7)
	PF1(8)
	VCVTPH2PS (SI)(BX*2), Y12
	FB(DX, Y0, Y4)
	FB(R11, Y1, Y5)
	FB(R12, Y2, Y6)
	FB(R13, Y3, Y7)
	NEXTB4(544)
	DECQ CX
	JNZ  q8a4loop
q8a4done:
	STOREB4
	RET

// Q8S1: slice s of both halves against the one activation row (x in Y6),
// into Y0 (rows 0..7) and Y1 (rows 8..15).
#define Q8S1(s) \
	PREFETCHT0 (PFQ8+32+64*s)(SI) \
	VPBROADCASTD (2+4*s)(DI), Y6 \
	VPXOR (32+64*s)(SI), Y15, Y8 \
	VPABSB Y8, Y9 \
	VPSIGNB Y8, Y6, Y4 \
	VPMADDUBSW Y4, Y9, Y4 \
	VPMADDWD Y13, Y4, Y4 \
	VPADDD Y4, Y0, Y0 \
	VPXOR (64+64*s)(SI), Y15, Y10 \
	VPABSB Y10, Y11 \
	VPSIGNB Y10, Y6, Y5 \
	VPMADDUBSW Y5, Y11, Y5 \
	VPMADDWD Y13, Y5, Y5 \
	VPADDD Y5, Y1, Y1

// func gemmQ8A1(w *byte, nb int, x *byte, aux *q8Aux, out *float32)
TEXT ·gemmQ8A1(SB), NOSPLIT, $0-40
	MOVQ w+0(FP), SI
	MOVQ nb+8(FP), CX
	MOVQ x+16(FP), DI
	MOVQ aux+24(FP), DX
	VPBROADCASTD g2one<>(SB), Y13
	VPBROADCASTD g2x80<>(SB), Y15
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	TESTQ CX, CX
	JZ    q8a1done
q8a1loop:
	PREFETCHT0 PFQ8(SI)
	VPXOR Y0, Y0, Y0
	VPXOR Y1, Y1, Y1
	Q8S1(0)
	Q8S1(1)
	Q8S1(2)
	Q8S1(3)
	Q8S1(4)
	Q8S1(5)
	Q8S1(6)
	Q8S1(7)
	VCVTPH2PS (SI), Y12
	FB(DX, Y0, Y2)
	VCVTPH2PS 16(SI), Y12
	FB(DX, Y1, Y3)
	ADDQ $544, SI
	ADDQ $34, DI
	ADDQ $8, DX
	DECQ CX
	JNZ  q8a1loop
q8a1done:
	MOVQ out+32(FP), AX
	VMOVUPS Y2, (AX)
	VMOVUPS Y3, 32(AX)
	VZEROUPPER
	RET

// ---- Q4_0 (288 bytes per group and block: 16 f16 d, then 4 slices of 4
// bytes per row: low nibbles elements 4s..4s+3, high ones 16+4s..16+4s+3).
// Y15 holds 0x0f bytes.

// Q4DP: the low (Y8) and high (Y9) nibbles of slice s times the row at xr,
// int16 pairs into acc.
#define Q4DP(s, xr, acc) \
	VPBROADCASTD (2+4*s)(xr), Y10 \
	VPMADDUBSW Y10, Y8, Y10 \
	VPADDW Y10, acc, acc \
	VPBROADCASTD (18+4*s)(xr), Y11 \
	VPMADDUBSW Y11, Y9, Y11 \
	VPADDW Y11, acc, acc

#define Q4S4(s) \
	VMOVDQU (32+64*s)(SI)(BX*4), Y9 \
	VPAND Y15, Y9, Y8 \
	VPSRLW $4, Y9, Y9 \
	VPAND Y15, Y9, Y9 \
	Q4DP(s, DI, Y0) \
	Q4DP(s, R8, Y1) \
	Q4DP(s, R9, Y2) \
	Q4DP(s, R10, Y3)

// Q4FIN: widen acc to int32, subtract 8*sum(x) (c at 4(ar)), and update sum.
#define Q4FIN(ar, acc, sum) \
	VPMADDWD Y13, acc, acc \
	VPBROADCASTD 4(ar), Y14 \
	VPSUBD Y14, acc, acc \
	FB(ar, acc, sum)

// func gemmQ4A4(w *byte, half int, nb int, x *byte, xstride uintptr, aux *q8Aux, auxstride uintptr, out *float32, ostride uintptr, pf *byte)
TEXT ·gemmQ4A4(SB), NOSPLIT, $0-80
	SETUPB4
	VPBROADCASTD g2x0f<>(SB), Y15
	TESTQ CX, CX
	JZ    q4a4done
q4a4loop:
	ZEROB(Y0, Y1, Y2, Y3)
	Q4S4(0)
	PF2(0)
	Q4S4(1)
	PF1(2)
	Q4S4(2)
	PF1(3)
	Q4S4(3)
	PF1(4)
	VCVTPH2PS (SI)(BX*2), Y12
	Q4FIN(DX, Y0, Y4)
	Q4FIN(R11, Y1, Y5)
	Q4FIN(R12, Y2, Y6)
	Q4FIN(R13, Y3, Y7)
	NEXTB4(288)
	DECQ CX
	JNZ  q4a4loop
q4a4done:
	STOREB4
	RET

// Q4S1: slice s of both halves against the one activation row, int16 pairs
// into Y4 (rows 0..7) and Y5 (rows 8..15).
#define Q4S1(s) \
	PREFETCHT0 (PFQ4+32+64*s)(SI) \
	VPBROADCASTD (2+4*s)(DI), Y6 \
	VPBROADCASTD (18+4*s)(DI), Y7 \
	VMOVDQU (32+64*s)(SI), Y9 \
	VPAND Y15, Y9, Y8 \
	VPSRLW $4, Y9, Y9 \
	VPAND Y15, Y9, Y9 \
	VPMADDUBSW Y6, Y8, Y8 \
	VPMADDUBSW Y7, Y9, Y9 \
	VPADDW Y8, Y4, Y4 \
	VPADDW Y9, Y4, Y4 \
	VMOVDQU (64+64*s)(SI), Y11 \
	VPAND Y15, Y11, Y10 \
	VPSRLW $4, Y11, Y11 \
	VPAND Y15, Y11, Y11 \
	VPMADDUBSW Y6, Y10, Y10 \
	VPMADDUBSW Y7, Y11, Y11 \
	VPADDW Y10, Y5, Y5 \
	VPADDW Y11, Y5, Y5

// func gemmQ4A1(w *byte, nb int, x *byte, aux *q8Aux, out *float32)
TEXT ·gemmQ4A1(SB), NOSPLIT, $0-40
	MOVQ w+0(FP), SI
	MOVQ nb+8(FP), CX
	MOVQ x+16(FP), DI
	MOVQ aux+24(FP), DX
	VPBROADCASTD g2one<>(SB), Y13
	VPBROADCASTD g2x0f<>(SB), Y15
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	TESTQ CX, CX
	JZ    q4a1done
q4a1loop:
	PREFETCHT0 PFQ4(SI)
	VPXOR Y4, Y4, Y4
	VPXOR Y5, Y5, Y5
	Q4S1(0)
	Q4S1(1)
	Q4S1(2)
	Q4S1(3)
	VCVTPH2PS (SI), Y12
	Q4FIN(DX, Y4, Y2)
	VCVTPH2PS 16(SI), Y12
	Q4FIN(DX, Y5, Y3)
	ADDQ $288, SI
	ADDQ $34, DI
	ADDQ $8, DX
	DECQ CX
	JNZ  q4a1loop
q4a1done:
	MOVQ out+32(FP), AX
	VMOVUPS Y2, (AX)
	VMOVUPS Y3, 32(AX)
	VZEROUPPER
	RET

// ---- Q5_0 (352 bytes per group and block: Q4_0's, then 4 bytes of fifth
// bits per row at 288: byte c holds those of elements 4s+c at bit s and
// 16+4s+c at bit 4+s). Y15 holds 0x0f bytes, Y14 0x10 bytes; the fifth bits
// of the half are in Y10.

// Q5DP: slice s's low (Y4) and high (Y5) quants times the row at xr, widened
// to int32, into acc; Y8, Y9 are scratch.
#define Q5DP(s, xr, acc) \
	VPBROADCASTD (2+4*s)(xr), Y8 \
	VPMADDUBSW Y8, Y4, Y8 \
	VPBROADCASTD (18+4*s)(xr), Y9 \
	VPMADDUBSW Y9, Y5, Y9 \
	VPADDW Y9, Y8, Y8 \
	VPMADDWD Y13, Y8, Y8 \
	VPADDD Y8, acc, acc

// Q5DP16: slice s's low (Y4) and high (Y5) quants times the row at xr (its
// quants at off), int16 pairs added into acc; yt is scratch. The A4 kernels
// widen once per two slices: four pairs of at most 2*31*128 each, 31744,
// still fit int16, and a widening VPMADDWD per slice would be a third of
// their multiplies.
#define Q5DP16(s, off, xr, acc, yt) \
	VPBROADCASTD (off+4*s)(xr), Y8 \
	VPMADDUBSW Y8, Y4, Y8 \
	VPADDW Y8, acc, acc \
	VPBROADCASTD (off+16+4*s)(xr), yt \
	VPMADDUBSW yt, Y5, yt \
	VPADDW yt, acc, acc

// WIDEN2: a = b + a, both int16 pairs widened to int32 (Y13: ones).
#define WIDEN2(a, b) \
	VPMADDWD Y13, a, a \
	VPMADDWD Y13, b, b \
	VPADDD b, a, a

// Q5S4: slice s of the half for the 4 activation rows, into a0..a3.
#define Q5S4(s, a0, a1, a2, a3) \
	NIBBLES5(s, (32+64*s)(SI)(BX*4), Y10, Y11) \
	Q5DP16(s, 2, DI, a0, Y11) \
	Q5DP16(s, 2, R8, a1, Y11) \
	Q5DP16(s, 2, R9, a2, Y11) \
	Q5DP16(s, 2, R10, a3, Y11)

// Q5F: acc minus 16*sum(x) (c at 4(ar)), then SUMMEM from d at 0(ar).
#define Q5F(ar, acc, unused) \
	VPBROADCASTD 4(ar), Y8 \
	VPSUBD Y8, acc, acc \
	SUMMEM(ar, acc)

// func gemmQ5A4(w *byte, half int, nb int, x *byte, xstride uintptr, aux *q8Aux, auxstride uintptr, out *float32, ostride uintptr, pf *byte)
TEXT ·gemmQ5A4(SB), NOSPLIT, $0-80
	SETUPB4
	VPBROADCASTD g2x0f<>(SB), Y15
	VPBROADCASTD g2x10<>(SB), Y14
	ZEROOUT4(Y4)
	TESTQ CX, CX
	JZ    q5a4done
q5a4loop:
	ZEROB(Y0, Y1, Y2, Y3)
	VMOVDQU 288(SI)(BX*4), Y10
	Q5S4(0, Y0, Y1, Y2, Y3)
	PF2(0)
	Q5S4(1, Y0, Y1, Y2, Y3)
	PF2(2)
	ZEROB(Y6, Y7, Y9, Y12)
	Q5S4(2, Y6, Y7, Y9, Y12)
	PF1(4)
	Q5S4(3, Y6, Y7, Y9, Y12)
	PF1(5)
	WIDEN2(Y0, Y6)
	WIDEN2(Y1, Y7)
	WIDEN2(Y2, Y9)
	WIDEN2(Y3, Y12)
	VCVTPH2PS (SI)(BX*2), Y12
	EACHAUX4(Q5F)
	NEXTB4(352)
	DECQ CX
	JNZ  q5a4loop
q5a4done:
	VZEROUPPER
	RET

// Q5HALF1: half h of a block (its fifth bits at 288+32h) against the one
// activation row, into acc.
#define Q5HALF1(h, acc) \
	VMOVDQU (288+32*h)(SI), Y10 \
	NIBBLES5(0, (32+32*h)(SI), Y10, Y11) \
	Q5DP(0, DI, acc) \
	NIBBLES5(1, (96+32*h)(SI), Y10, Y11) \
	Q5DP(1, DI, acc) \
	NIBBLES5(2, (160+32*h)(SI), Y10, Y11) \
	Q5DP(2, DI, acc) \
	NIBBLES5(3, (224+32*h)(SI), Y10, Y11) \
	Q5DP(3, DI, acc)

// FBR: sum += (Y12 * d_x) * float(acc - c), d_x and c at (ar); Y8 scratch.
#define FBR(ar, acc, sum) \
	VPBROADCASTD 4(ar), Y8 \
	VPSUBD Y8, acc, acc \
	VBROADCASTSS (ar), Y8 \
	VMULPS Y8, Y12, Y8 \
	VCVTDQ2PS acc, acc \
	VMULPS acc, Y8, Y8 \
	VADDPS Y8, sum, sum

// func gemmQ5A1(w *byte, nb int, x *byte, aux *q8Aux, out *float32)
TEXT ·gemmQ5A1(SB), NOSPLIT, $0-40
	MOVQ w+0(FP), SI
	MOVQ nb+8(FP), CX
	MOVQ x+16(FP), DI
	MOVQ aux+24(FP), DX
	VPBROADCASTD g2one<>(SB), Y13
	VPBROADCASTD g2x0f<>(SB), Y15
	VPBROADCASTD g2x10<>(SB), Y14
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	TESTQ CX, CX
	JZ    q5a1done
q5a1loop:
	PREFETCHT0 PFQ5(SI)
	PREFETCHT0 (PFQ5+64)(SI)
	PREFETCHT0 (PFQ5+128)(SI)
	PREFETCHT0 (PFQ5+192)(SI)
	PREFETCHT0 (PFQ5+256)(SI)
	PREFETCHT0 (PFQ5+320)(SI)
	VPXOR Y0, Y0, Y0
	VPXOR Y1, Y1, Y1
	Q5HALF1(0, Y0)
	Q5HALF1(1, Y1)
	VCVTPH2PS (SI), Y12
	FBR(DX, Y0, Y2)
	VCVTPH2PS 16(SI), Y12
	FBR(DX, Y1, Y3)
	ADDQ $352, SI
	ADDQ $34, DI
	ADDQ $8, DX
	DECQ CX
	JNZ  q5a1loop
q5a1done:
	MOVQ out+32(FP), AX
	VMOVUPS Y2, (AX)
	VMOVUPS Y3, 32(AX)
	VZEROUPPER
	RET

// ---- IQ4_NL (Q4_0's layout, 288 bytes per group and block; each nibble
// selects a codebook level, -127..113). The levels are signed, so the
// products take Q8_0's sign trick and are widened one at a time. Y15 holds
// 0x0f bytes, Y10 the codebook in both lanes.

IQ4CODEBOOK(g2iq4nl<>)

// NLDP: slice s's levels times the row at xr, widened, into acc; Y8, Y9
// scratch.
#define NLDP(s, xr, acc) \
	VPBROADCASTD (2+4*s)(xr), Y8 \
	VPSIGNB Y4, Y8, Y8 \
	VPMADDUBSW Y8, Y5, Y8 \
	VPMADDWD Y13, Y8, Y8 \
	VPADDD Y8, acc, acc \
	VPBROADCASTD (18+4*s)(xr), Y9 \
	VPSIGNB Y6, Y9, Y9 \
	VPMADDUBSW Y9, Y7, Y9 \
	VPMADDWD Y13, Y9, Y9 \
	VPADDD Y9, acc, acc

#define NLS4(s) \
	IQ4LEVELS((32+64*s)(SI)(BX*4)) \
	NLDP(s, DI, Y0) \
	NLDP(s, R8, Y1) \
	NLDP(s, R9, Y2) \
	NLDP(s, R10, Y3)

// NLF: SUMMEM from the activation row's d at 0(ar).
#define NLF(ar, acc, unused) SUMMEM(ar, acc)

// func gemmIQ4NLA4(w *byte, half int, nb int, x *byte, xstride uintptr, aux *q8Aux, auxstride uintptr, out *float32, ostride uintptr, pf *byte)
TEXT ·gemmIQ4NLA4(SB), NOSPLIT, $0-80
	SETUPB4
	VPBROADCASTD g2x0f<>(SB), Y15
	VBROADCASTI128 g2iq4nl<>(SB), Y10
	ZEROOUT4(Y4)
	TESTQ CX, CX
	JZ    nla4done
nla4loop:
	ZEROB(Y0, Y1, Y2, Y3)
	NLS4(0)
	PF2(0)
	NLS4(1)
	PF1(2)
	NLS4(2)
	PF1(3)
	NLS4(3)
	PF1(4)
	VCVTPH2PS (SI)(BX*2), Y12
	EACHAUX4(NLF)
	NEXTB4(288)
	DECQ CX
	JNZ  nla4loop
nla4done:
	VZEROUPPER
	RET

// NLS1: slice s of half h against the one activation row, into acc.
#define NLS1(s, h, acc) \
	IQ4LEVELS((32+64*s+32*h)(SI)) \
	NLDP(s, DI, acc)

// func gemmIQ4NLA1(w *byte, nb int, x *byte, aux *q8Aux, out *float32)
TEXT ·gemmIQ4NLA1(SB), NOSPLIT, $0-40
	MOVQ w+0(FP), SI
	MOVQ nb+8(FP), CX
	MOVQ x+16(FP), DI
	MOVQ aux+24(FP), DX
	VPBROADCASTD g2one<>(SB), Y13
	VPBROADCASTD g2x0f<>(SB), Y15
	VBROADCASTI128 g2iq4nl<>(SB), Y10
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	TESTQ CX, CX
	JZ    nla1done
nla1loop:
	PREFETCHT0 PFQ4(SI)
	PREFETCHT0 (PFQ4+64)(SI)
	PREFETCHT0 (PFQ4+128)(SI)
	PREFETCHT0 (PFQ4+192)(SI)
	PREFETCHT0 (PFQ4+256)(SI)
	VPXOR Y0, Y0, Y0
	VPXOR Y1, Y1, Y1
	NLS1(0, 0, Y0)
	NLS1(0, 1, Y1)
	NLS1(1, 0, Y0)
	NLS1(1, 1, Y1)
	NLS1(2, 0, Y0)
	NLS1(2, 1, Y1)
	NLS1(3, 0, Y0)
	NLS1(3, 1, Y1)
	VCVTPH2PS (SI), Y12
	FB(DX, Y0, Y2)
	VCVTPH2PS 16(SI), Y12
	FB(DX, Y1, Y3)
	ADDQ $288, SI
	ADDQ $34, DI
	ADDQ $8, DX
	DECQ CX
	JNZ  nla1loop
nla1done:
	MOVQ out+32(FP), AX
	VMOVUPS Y2, (AX)
	VMOVUPS Y3, 32(AX)
	VZEROUPPER
	RET

// ---- Q4_1 and Q5_1 against Q8_1 activation blocks (36 bytes: f16 d, f16
// s = d*sum(q), 32 int8). Groups: 16 f16 d at 0, 16 f16 m at 32, Q4_0's 4
// slices of nibbles at 64 (320 bytes per block), and for Q5_1 Q5_0's plane
// of fifth bits at 320 (384 bytes). No offsets to subtract: per block
// t = (d_w*d_x)*float(isum) + m_w*s_x and sum += t, as legacyMinTerm. The
// 4-row kernels read d_x and s_x as float32 from the side data (q81Aux,
// converted once per row; converting the f16s in each call was 2-5% of
// their time), the one-row kernels from the blocks.

#define NEXTM4(wb) \
	ADDQ $wb, SI \
	ADDQ $wb, R14 \
	ADDQ $36, DI \
	ADDQ $36, R8 \
	ADDQ $36, R9 \
	ADDQ $36, R10 \
	ADDQ $8, DX \
	ADDQ $8, R11 \
	ADDQ $8, R12 \
	ADDQ $8, R13

// MINT: ya = (Y12 * d_x) * float(acc) + ym * s_x, with d_x and s_x the f16s
// at 0(xr) and 2(xr); yb scratch (xa, xb their low halves).
#define MINT(xr, acc, ym, ya, xa, yb, xb) \
	VPBROADCASTW (xr), xa \
	VCVTPH2PS xa, ya \
	VMULPS ya, Y12, ya \
	VCVTDQ2PS acc, acc \
	VMULPS acc, ya, ya \
	VPBROADCASTW 2(xr), xb \
	VCVTPH2PS xb, yb \
	VMULPS yb, ym, yb \
	VADDPS yb, ya, ya

// MFM: the running sums at (AX) += MINT (m_w in Y10), with d_x and s_x the
// float32s at 0(ar) and 4(ar) (q81Aux: the f16s MINT converts, converted
// once per row).
#define MFM(ar, acc, unused) \
	VBROADCASTSS (ar), Y8 \
	VMULPS Y8, Y12, Y8 \
	VCVTDQ2PS acc, acc \
	VMULPS acc, Y8, Y8 \
	VBROADCASTSS 4(ar), Y9 \
	VMULPS Y9, Y10, Y9 \
	VADDPS Y9, Y8, Y8 \
	VADDPS (AX), Y8, Y8 \
	VMOVUPS Y8, (AX)

// Q41DP: the low (Y4) and high (Y5) nibbles of slice s times the Q8_1 row
// at xr, int16 pairs into acc (8 pairs of at most 2*15*127 fit).
#define Q41DP(s, xr, acc) \
	VPBROADCASTD (4+4*s)(xr), Y8 \
	VPMADDUBSW Y8, Y4, Y8 \
	VPADDW Y8, acc, acc \
	VPBROADCASTD (20+4*s)(xr), Y9 \
	VPMADDUBSW Y9, Y5, Y9 \
	VPADDW Y9, acc, acc

#define Q41S4(s) \
	VMOVDQU (64+64*s)(SI)(BX*4), Y5 \
	VPAND Y15, Y5, Y4 \
	VPSRLW $4, Y5, Y5 \
	VPAND Y15, Y5, Y5 \
	Q41DP(s, DI, Y0) \
	Q41DP(s, R8, Y1) \
	Q41DP(s, R9, Y2) \
	Q41DP(s, R10, Y3)

// Q41W: widen Y0..Y3 to int32.
#define Q41W \
	VPMADDWD Y13, Y0, Y0 \
	VPMADDWD Y13, Y1, Y1 \
	VPMADDWD Y13, Y2, Y2 \
	VPMADDWD Y13, Y3, Y3

// func gemmQ41A4(w *byte, half int, nb int, x *byte, xstride uintptr, aux *q81Aux, auxstride uintptr, out *float32, ostride uintptr, pf *byte)
TEXT ·gemmQ41A4(SB), NOSPLIT, $0-80
	SETUPM4
	VPBROADCASTD g2x0f<>(SB), Y15
	TESTQ CX, CX
	JZ    q41a4done
q41a4loop:
	ZEROB(Y0, Y1, Y2, Y3)
	Q41S4(0)
	PF2(0)
	Q41S4(1)
	PF1(2)
	Q41S4(2)
	PF1(3)
	Q41S4(3)
	PF1(4)
	Q41W
	MFLOAT4
	NEXTM4(320)
	DECQ CX
	JNZ  q41a4loop
q41a4done:
	VZEROUPPER
	RET

// Q51S4: Q5_0's slice decoding (fifth bits of the half in Y11 here) into Y4,
// Y5, then the int16 products into a0..a3, as Q5S4.
#define Q51S4(s, a0, a1, a2, a3) \
	NIBBLES5(s, (64+64*s)(SI)(BX*4), Y11, Y8) \
	Q5DP16(s, 4, DI, a0, Y9) \
	Q5DP16(s, 4, R8, a1, Y9) \
	Q5DP16(s, 4, R9, a2, Y9) \
	Q5DP16(s, 4, R10, a3, Y9)

#define Q51DP(s, xr, acc) \
	VPBROADCASTD (4+4*s)(xr), Y8 \
	VPMADDUBSW Y8, Y4, Y8 \
	VPBROADCASTD (20+4*s)(xr), Y9 \
	VPMADDUBSW Y9, Y5, Y9 \
	VPADDW Y9, Y8, Y8 \
	VPMADDWD Y13, Y8, Y8 \
	VPADDD Y8, acc, acc

// func gemmQ51A4(w *byte, half int, nb int, x *byte, xstride uintptr, aux *q81Aux, auxstride uintptr, out *float32, ostride uintptr, pf *byte)
TEXT ·gemmQ51A4(SB), NOSPLIT, $0-80
	SETUPM4
	VPBROADCASTD g2x0f<>(SB), Y15
	VPBROADCASTD g2x10<>(SB), Y14
	TESTQ CX, CX
	JZ    q51a4done
q51a4loop:
	ZEROB(Y0, Y1, Y2, Y3)
	VMOVDQU 320(SI)(BX*4), Y11
	Q51S4(0, Y0, Y1, Y2, Y3)
	PF2(0)
	Q51S4(1, Y0, Y1, Y2, Y3)
	PF2(2)
	ZEROB(Y6, Y7, Y10, Y12)
	Q51S4(2, Y6, Y7, Y10, Y12)
	PF1(4)
	Q51S4(3, Y6, Y7, Y10, Y12)
	PF1(5)
	WIDEN2(Y0, Y6)
	WIDEN2(Y1, Y7)
	WIDEN2(Y2, Y10)
	WIDEN2(Y3, Y12)
	MFLOAT4
	NEXTM4(384)
	DECQ CX
	JNZ  q51a4loop
q51a4done:
	VZEROUPPER
	RET

// Q41S1: slice s of both halves against the one Q8_1 row, int16 pairs into
// Y0 (rows 0..7) and Y1 (rows 8..15).
#define Q41S1(s) \
	VPBROADCASTD (4+4*s)(DI), Y6 \
	VPBROADCASTD (20+4*s)(DI), Y7 \
	VMOVDQU (64+64*s)(SI), Y5 \
	VPAND Y15, Y5, Y4 \
	VPSRLW $4, Y5, Y5 \
	VPAND Y15, Y5, Y5 \
	VPMADDUBSW Y6, Y4, Y4 \
	VPMADDUBSW Y7, Y5, Y5 \
	VPADDW Y4, Y0, Y0 \
	VPADDW Y5, Y0, Y0 \
	VMOVDQU (96+64*s)(SI), Y5 \
	VPAND Y15, Y5, Y4 \
	VPSRLW $4, Y5, Y5 \
	VPAND Y15, Y5, Y5 \
	VPMADDUBSW Y6, Y4, Y4 \
	VPMADDUBSW Y7, Y5, Y5 \
	VPADDW Y4, Y1, Y1 \
	VPADDW Y5, Y1, Y1

// MFLOAT1: the float updates of both halves into Y2, Y3 (registers).
#define MFLOAT1 \
	VCVTPH2PS (SI), Y12 \
	VCVTPH2PS 32(SI), Y10 \
	MINT(DI, Y0, Y10, Y8, X8, Y9, X9) \
	VADDPS Y8, Y2, Y2 \
	VCVTPH2PS 16(SI), Y12 \
	VCVTPH2PS 48(SI), Y10 \
	MINT(DI, Y1, Y10, Y8, X8, Y9, X9) \
	VADDPS Y8, Y3, Y3

// func gemmQ41A1(w *byte, nb int, x *byte, out *float32)
TEXT ·gemmQ41A1(SB), NOSPLIT, $0-32
	MOVQ w+0(FP), SI
	MOVQ nb+8(FP), CX
	MOVQ x+16(FP), DI
	VPBROADCASTD g2one<>(SB), Y13
	VPBROADCASTD g2x0f<>(SB), Y15
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	TESTQ CX, CX
	JZ    q41a1done
q41a1loop:
	PREFETCHT0 PFQ4(SI)
	PREFETCHT0 (PFQ4+64)(SI)
	PREFETCHT0 (PFQ4+128)(SI)
	PREFETCHT0 (PFQ4+192)(SI)
	PREFETCHT0 (PFQ4+256)(SI)
	VPXOR Y0, Y0, Y0
	VPXOR Y1, Y1, Y1
	Q41S1(0)
	Q41S1(1)
	Q41S1(2)
	Q41S1(3)
	VPMADDWD Y13, Y0, Y0
	VPMADDWD Y13, Y1, Y1
	MFLOAT1
	ADDQ $320, SI
	ADDQ $36, DI
	DECQ CX
	JNZ  q41a1loop
q41a1done:
	MOVQ out+24(FP), AX
	VMOVUPS Y2, (AX)
	VMOVUPS Y3, 32(AX)
	VZEROUPPER
	RET

// Q51H1: half h of a Q5_1 block against the one Q8_1 row, into acc (the
// fifth bits of the half loaded into Y11).
#define Q51H1(h, acc) \
	VMOVDQU (320+32*h)(SI), Y11 \
	NIBBLES5(0, (64+32*h)(SI), Y11, Y8) \
	Q51DP(0, DI, acc) \
	NIBBLES5(1, (128+32*h)(SI), Y11, Y8) \
	Q51DP(1, DI, acc) \
	NIBBLES5(2, (192+32*h)(SI), Y11, Y8) \
	Q51DP(2, DI, acc) \
	NIBBLES5(3, (256+32*h)(SI), Y11, Y8) \
	Q51DP(3, DI, acc)

// func gemmQ51A1(w *byte, nb int, x *byte, out *float32)
TEXT ·gemmQ51A1(SB), NOSPLIT, $0-32
	MOVQ w+0(FP), SI
	MOVQ nb+8(FP), CX
	MOVQ x+16(FP), DI
	VPBROADCASTD g2one<>(SB), Y13
	VPBROADCASTD g2x0f<>(SB), Y15
	VPBROADCASTD g2x10<>(SB), Y14
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	TESTQ CX, CX
	JZ    q51a1done
q51a1loop:
	PREFETCHT0 PFQ5(SI)
	PREFETCHT0 (PFQ5+64)(SI)
	PREFETCHT0 (PFQ5+128)(SI)
	PREFETCHT0 (PFQ5+192)(SI)
	PREFETCHT0 (PFQ5+256)(SI)
	PREFETCHT0 (PFQ5+320)(SI)
	VPXOR Y0, Y0, Y0
	VPXOR Y1, Y1, Y1
	Q51H1(0, Y0)
	Q51H1(1, Y1)
	MFLOAT1
	ADDQ $384, SI
	ADDQ $36, DI
	DECQ CX
	JNZ  q51a1loop
q51a1done:
	MOVQ out+24(FP), AX
	VMOVUPS Y2, (AX)
	VMOVUPS Y3, 32(AX)
	VZEROUPPER
	RET

// ---- Q8_0 activation rows

DATA q8perm2<>+0(SB)/4, $0
DATA q8perm2<>+4(SB)/4, $4
DATA q8perm2<>+8(SB)/4, $1
DATA q8perm2<>+12(SB)/4, $5
DATA q8perm2<>+16(SB)/4, $2
DATA q8perm2<>+20(SB)/4, $6
DATA q8perm2<>+24(SB)/4, $3
DATA q8perm2<>+28(SB)/4, $7
GLOBL q8perm2<>(SB), RODATA, $32

// ROUNDAWAY2: ya = round(ya) with ties away from zero, as C's roundf, then
// converted to int32: truncate, then step one away from zero where the
// dropped fraction is at least 1/2 (quantQ8AVX512's ROUNDAWAY on 8 lanes).
// Y12 abs mask, Y13 sign mask, Y14 0.5, Y15 1.0; yt, ys scratch.
#define ROUNDAWAY2(ya, yt, ys) \
	VROUNDPS $0x0b, ya, yt \
	VSUBPS yt, ya, ys \
	VANDPS Y12, ys, ys \
	VCMPPS $0x1d, Y14, ys, ys \
	VANDPS Y13, ya, ya \
	VORPS Y15, ya, ya \
	VANDPS ys, ya, ya \
	VADDPS ya, yt, yt \
	VCVTPS2DQ yt, ya

// Q8CONST2 loads the constants Q8ROUND2 and ROUNDAWAY2 read.
#define Q8CONST2 \
	MOVL $0x7fffffff, AX \
	VMOVD AX, X12 \
	VPBROADCASTD X12, Y12 \
	MOVL $0x80000000, AX \
	VMOVD AX, X13 \
	VPBROADCASTD X13, Y13 \
	MOVL $0x3f000000, AX \
	VMOVD AX, X14 \
	VPBROADCASTD X14, Y14 \
	MOVL $0x3f800000, AX \
	VMOVD AX, X15 \
	VPBROADCASTD X15, Y15 \
	MOVL $0x42fe0000, AX \
	VMOVD AX, X11 \
	VMOVDQU q8perm2<>(SB), Y10

// Q8ROUND2: one block of 32 floats at SI quantized as quantizeQ8 does: Y0-Y3
// the rounded quants as int32, X4 d = amax/127, X8 d as f16. amax is taken
// on the bits (VPMAXSD), as absMax: a NaN beats every number. Where d or its
// inverse is not finite (d-d+id-id is not 0: a NaN or an infinity in the
// block, or a d so small that 1/d overflows) every product x/d is a NaN or
// an infinity, which roundAway makes 0: the products are masked to 0 per
// block instead of per element. Uses Y4-Y7;
// X11, Y12-Y15 as quantQ8AVX2 sets them.
#define Q8ROUND2 \
	VMOVUPS (SI), Y0 \
	VMOVUPS 32(SI), Y1 \
	VMOVUPS 64(SI), Y2 \
	VMOVUPS 96(SI), Y3 \
	VANDPS Y12, Y0, Y4 \
	VANDPS Y12, Y1, Y5 \
	VPMAXSD Y5, Y4, Y4 \
	VANDPS Y12, Y2, Y5 \
	VPMAXSD Y5, Y4, Y4 \
	VANDPS Y12, Y3, Y5 \
	VPMAXSD Y5, Y4, Y4 \
	VEXTRACTF128 $1, Y4, X5 \
	VPMAXSD X5, X4, X4 \
	VPERMILPS $0x4e, X4, X5 \
	VPMAXSD X5, X4, X4 \
	VPERMILPS $0xb1, X4, X5 \
	VPMAXSD X5, X4, X4 \
	VDIVSS X11, X4, X4 \
	VDIVSS X4, X15, X5 \
	VXORPS X6, X6, X6 \
	VCMPSS $4, X6, X4, X7 \
	VANDPS X7, X5, X5 \
	VCVTPS2PH $0, X4, X8 \
	VSUBSS X4, X4, X6 \
	VSUBSS X5, X5, X7 \
	VADDSS X7, X6, X6 \
	VXORPS X7, X7, X7 \
	VCMPSS $0, X7, X6, X6 \
	VBROADCASTSS X5, Y5 \
	VBROADCASTSS X6, Y6 \
	VMULPS Y5, Y0, Y0 \
	VMULPS Y5, Y1, Y1 \
	VMULPS Y5, Y2, Y2 \
	VMULPS Y5, Y3, Y3 \
	VANDPS Y6, Y0, Y0 \
	VANDPS Y6, Y1, Y1 \
	VANDPS Y6, Y2, Y2 \
	VANDPS Y6, Y3, Y3 \
	ROUNDAWAY2(Y0, Y6, Y7) \
	ROUNDAWAY2(Y1, Y6, Y7) \
	ROUNDAWAY2(Y2, Y6, Y7) \
	ROUNDAWAY2(Y3, Y6, Y7)

// Q8ISUM2: X6 = the sum of Q8ROUND2's 32 quants (Y0-Y3). Uses Y7.
#define Q8ISUM2 \
	VPADDD Y1, Y0, Y6 \
	VPADDD Y3, Y2, Y7 \
	VPADDD Y7, Y6, Y6 \
	VEXTRACTI128 $1, Y6, X7 \
	VPADDD X7, X6, X6 \
	VPSHUFD $0x4e, X6, X7 \
	VPADDD X7, X6, X6 \
	VPSHUFD $0xb1, X6, X7 \
	VPADDD X7, X6, X6

// func quantQ8AVX2(dst *byte, x *float32, nb int, aux *q8Aux, k int32)
// Q8_0 blocks of x, bitwise as quantizeQ8; with aux non-nil, also each block's
// f16 scale as f32 and k*sum(q), as matJob.auxRow. quantQ8AVX512's steps on
// four 8-lane vectors per block; the int32s are packed to bytes with
// saturation (exact: they lie in [-127, 127]) and put back in order.
TEXT ·quantQ8AVX2(SB), NOSPLIT, $0-36
	MOVQ dst+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ nb+16(FP), CX
	MOVQ aux+24(FP), DX
	MOVL k+32(FP), R8
	Q8CONST2
	TESTQ CX, CX
	JZ    qq8a2done
qq8a2loop:
	Q8ROUND2
	VPEXTRW $0, X8, (DI)
	TESTQ DX, DX
	JZ    qq8a2pack
	VCVTPH2PS X8, X9
	VMOVSS X9, (DX)
	Q8ISUM2
	VMOVD X6, AX
	IMULL R8, AX
	MOVL AX, 4(DX)
	ADDQ $8, DX
qq8a2pack:
	VPACKSSDW Y1, Y0, Y0
	VPACKSSDW Y3, Y2, Y2
	VPACKSSWB Y2, Y0, Y0
	VPERMD Y0, Y10, Y0
	VMOVDQU Y0, 2(DI)
	ADDQ $128, SI
	ADDQ $34, DI
	DECQ CX
	JNZ  qq8a2loop
qq8a2done:
	VZEROUPPER
	RET

// func quantQ81AVX2(dst *byte, x *float32, nb int)
// Q8_1 blocks of x, bitwise as quantizeQ8_1: Q8ROUND2's quants and d, and
// s = float32(sum(q))*d as f16.
TEXT ·quantQ81AVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ nb+16(FP), CX
	Q8CONST2
	TESTQ CX, CX
	JZ    qq81a2done
qq81a2loop:
	Q8ROUND2
	VPEXTRW $0, X8, (DI)
	Q8ISUM2
	VCVTDQ2PS X6, X6
	VMULSS X4, X6, X6
	VCVTPS2PH $0, X6, X9
	VPEXTRW $0, X9, 2(DI)
	VPACKSSDW Y1, Y0, Y0
	VPACKSSDW Y3, Y2, Y2
	VPACKSSWB Y2, Y0, Y0
	VPERMD Y0, Y10, Y0
	VMOVDQU Y0, 4(DI)
	ADDQ $128, SI
	ADDQ $36, DI
	DECQ CX
	JNZ  qq81a2loop
qq81a2done:
	VZEROUPPER
	RET

// Q8KGROUP2(g): quants 16g..16g+15 of the block at SI, scaled by Y2
// (iscale): NaN products 0 (VCMPPS $7: none but Inf*0 from an infinite
// block), rounded to nearest even (VCVTPS2DQ), at most 127 (Y14), stored as
// int8 at 4+16g(DI), and their sum as int16 at 260+2g(DI). Uses Y3-Y7, AX.
#define Q8KGROUP2(g) \
	VMULPS (64*(g))(SI), Y2, Y3 \
	VMULPS (64*(g)+32)(SI), Y2, Y4 \
	VCMPPS $7, Y3, Y3, Y5 \
	VANDPS Y5, Y3, Y3 \
	VCMPPS $7, Y4, Y4, Y5 \
	VANDPS Y5, Y4, Y4 \
	VCVTPS2DQ Y3, Y3 \
	VCVTPS2DQ Y4, Y4 \
	VPMINSD Y14, Y3, Y3 \
	VPMINSD Y14, Y4, Y4 \
	VPADDD Y4, Y3, Y6 \
	VEXTRACTI128 $1, Y6, X7 \
	VPADDD X7, X6, X6 \
	VPSHUFD $0x4e, X6, X7 \
	VPADDD X7, X6, X6 \
	VPSHUFD $0xb1, X6, X7 \
	VPADDD X7, X6, X6 \
	VMOVD X6, AX \
	MOVW AX, (260+2*(g))(DI) \
	VPACKSSDW Y4, Y3, Y5 \
	VPERMQ $0xd8, Y5, Y5 \
	VEXTRACTI128 $1, Y5, X6 \
	VPACKSSWB X6, X5, X5 \
	VMOVDQU X5, (4+16*(g))(DI)

// func quantQ8KAVX2(dst *q8K, x *float32, nb int)
// Q8_K blocks of x, bitwise as quantizeQ8K (quantQ8KAVX512 on 8 lanes): the
// largest |x| taken on the bits (VPMAXSD, as absMax, so a NaN beats every
// number); a block with a NaN is zeros with d that NaN, a block of zeros
// zeros; otherwise the first element of largest magnitude sets iscale =
// -127/max and d = 1/iscale, and Q8KGROUP2 writes the quants and bsums.
TEXT ·quantQ8KAVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ nb+16(FP), CX
	MOVL $0x7fffffff, AX
	VMOVD AX, X15
	VPBROADCASTD X15, Y15
	MOVL $127, AX
	VMOVD AX, X14
	VPBROADCASTD X14, Y14
	MOVL $0xc2fe0000, AX // -127
	VMOVD AX, X13
	VPXOR Y12, Y12, Y12
	TESTQ CX, CX
	JZ    qq8k2done
qq8k2loop:
	VPAND (SI), Y15, Y0
	VPAND 32(SI), Y15, Y1
	VPAND 64(SI), Y15, Y2
	VPAND 96(SI), Y15, Y3
	MOVQ $128, R9
qq8k2max:
	VPAND (SI)(R9*1), Y15, Y4
	VPMAXSD Y4, Y0, Y0
	VPAND 32(SI)(R9*1), Y15, Y4
	VPMAXSD Y4, Y1, Y1
	VPAND 64(SI)(R9*1), Y15, Y4
	VPMAXSD Y4, Y2, Y2
	VPAND 96(SI)(R9*1), Y15, Y4
	VPMAXSD Y4, Y3, Y3
	ADDQ $128, R9
	CMPQ R9, $1024
	JLT  qq8k2max
	VPMAXSD Y1, Y0, Y0
	VPMAXSD Y3, Y2, Y2
	VPMAXSD Y2, Y0, Y0
	VEXTRACTI128 $1, Y0, X1
	VPMAXSD X1, X0, X0
	VPSHUFD $0x4e, X0, X1
	VPMAXSD X1, X0, X0
	VPSHUFD $0xb1, X0, X1
	VPMAXSD X1, X0, X0
	VUCOMISS X0, X0
	JPS   qq8k2nan
	VUCOMISS X12, X0
	JEQ   qq8k2zero
	// The first element whose |x| has amax's bits.
	VPBROADCASTD X0, Y0
	XORQ R9, R9
qq8k2find:
	VPAND (SI)(R9*1), Y15, Y1
	VPCMPEQD Y0, Y1, Y1
	VMOVMSKPS Y1, AX
	TESTL AX, AX
	JNZ   qq8k2found
	ADDQ  $32, R9
	JMP   qq8k2find
qq8k2found:
	TZCNTL AX, AX
	LEAQ  (SI)(R9*1), R10
	VMOVSS (R10)(AX*4), X1
	VDIVSS X1, X13, X2 // iscale = -127/max
	MOVL $0x3f800000, AX
	VMOVD AX, X3
	VDIVSS X2, X3, X3 // d = 1/iscale
	VMOVSS X3, (DI)
	VBROADCASTSS X2, Y2
	Q8KGROUP2(0)
	Q8KGROUP2(1)
	Q8KGROUP2(2)
	Q8KGROUP2(3)
	Q8KGROUP2(4)
	Q8KGROUP2(5)
	Q8KGROUP2(6)
	Q8KGROUP2(7)
	Q8KGROUP2(8)
	Q8KGROUP2(9)
	Q8KGROUP2(10)
	Q8KGROUP2(11)
	Q8KGROUP2(12)
	Q8KGROUP2(13)
	Q8KGROUP2(14)
	Q8KGROUP2(15)
	JMP   qq8k2next
qq8k2nan:
	VMOVD X0, AX // d = amax, the NaN; the rest zero
	JMP   qq8k2store
qq8k2zero:
	XORL AX, AX
qq8k2store:
	MOVQ $4, R9
qq8k2clear:
	VMOVDQU Y12, (DI)(R9*1)
	ADDQ $32, R9
	CMPQ R9, $260
	JLT  qq8k2clear
	VMOVDQU Y12, 260(DI)
	MOVL AX, (DI)
qq8k2next:
	ADDQ $1024, SI
	ADDQ $292, DI
	DECQ CX
	JNZ  qq8k2loop
qq8k2done:
	VZEROUPPER
	RET

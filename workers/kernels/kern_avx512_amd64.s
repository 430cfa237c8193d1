//go:build amd64 && !purego

#include "textflag.h"

// AVX-512 VNNI kernels over interleaved weights (see repack.go): 16 weight rows
// by 1 or 4 activation rows per call. Per block and activation row, VPDPBUSD
// leaves each weight row's exact int32 sum in its lane; the kernel subtracts the
// offset term (aux: per activation block, f32 d then int32 K*sum(x)) and does
// sum += (d_w*d_x) * float(isum) with separate multiplies and add, lane by lane:
// bitwise what dotQ8Go/dotQ4Go compute for each row.
//
// Activation rows are Q8_0 blocks (34 bytes: f16 d, int8 qs[32]).

// QFIN: isum in zi, acc in za, aux row pointer ar; Z16 holds the 16 weight
// scales as f32; Z17 is scratch.
#define QFIN(zi, za, ar) \
	VPSUBD.BCST 4(ar), zi, zi \
	VCVTDQ2PS zi, zi \
	VMULPS.BCST (ar), Z16, Z17 \
	VMULPS zi, Z17, Z17 \
	VADDPS Z17, za, za

// Q8 4-row step for slice s (weights in zw, activation byte offset off).
#define Q8STEP4(off, zw) \
	VPDPBUSD.BCST off(DI), zw, Z4 \
	VPDPBUSD.BCST off(R8), zw, Z5 \
	VPDPBUSD.BCST off(R9), zw, Z6 \
	VPDPBUSD.BCST off(R10), zw, Z7

// SETUP4 loads the arguments of a 4-row kernel: SI weights, CX blocks,
// DI/R8/R9/R10 activation rows, DX/R11/R12/R13 aux rows.
#define SETUP4 \
	MOVQ w+0(FP), SI \
	MOVQ nb+8(FP), CX \
	MOVQ x+16(FP), DI \
	MOVQ xstride+24(FP), BX \
	LEAQ (DI)(BX*1), R8 \
	LEAQ (R8)(BX*1), R9 \
	LEAQ (R9)(BX*1), R10 \
	MOVQ aux+32(FP), DX \
	MOVQ auxstride+40(FP), BX \
	LEAQ (DX)(BX*1), R11 \
	LEAQ (R11)(BX*1), R12 \
	LEAQ (R12)(BX*1), R13 \
	VPXORD Z0, Z0, Z0 \
	VPXORD Z1, Z1, Z1 \
	VPXORD Z2, Z2, Z2 \
	VPXORD Z3, Z3, Z3

#define ZERO4 \
	VPXORD Z4, Z4, Z4 \
	VPXORD Z5, Z5, Z5 \
	VPXORD Z6, Z6, Z6 \
	VPXORD Z7, Z7, Z7

#define FIN4 \
	QFIN(Z4, Z0, DX) \
	QFIN(Z5, Z1, R11) \
	QFIN(Z6, Z2, R12) \
	QFIN(Z7, Z3, R13)

#define NEXT4(wb) \
	ADDQ $wb, SI \
	ADDQ $34, DI \
	ADDQ $34, R8 \
	ADDQ $34, R9 \
	ADDQ $34, R10 \
	ADDQ $8, DX \
	ADDQ $8, R11 \
	ADDQ $8, R12 \
	ADDQ $8, R13

#define STORE4 \
	MOVQ out+48(FP), AX \
	MOVQ ostride+56(FP), BX \
	VMOVUPS Z0, (AX) \
	ADDQ BX, AX \
	VMOVUPS Z1, (AX) \
	ADDQ BX, AX \
	VMOVUPS Z2, (AX) \
	ADDQ BX, AX \
	VMOVUPS Z3, (AX) \
	VZEROUPPER

// func gemmQ8P4(w *byte, nb int, x *byte, xstride uintptr, aux *byte, auxstride uintptr, out *float32, ostride uintptr)
TEXT ·gemmQ8P4(SB), NOSPLIT, $0-64
	SETUP4
	TESTQ CX, CX
	JZ    q8p4done
q8p4loop:
	VCVTPH2PS (SI), Z16
	VMOVDQU32 32(SI), Z8
	VMOVDQU32 96(SI), Z9
	VMOVDQU32 160(SI), Z10
	VMOVDQU32 224(SI), Z11
	VMOVDQU32 288(SI), Z12
	VMOVDQU32 352(SI), Z13
	VMOVDQU32 416(SI), Z14
	VMOVDQU32 480(SI), Z15
	ZERO4
	Q8STEP4(2, Z8)
	Q8STEP4(6, Z9)
	Q8STEP4(10, Z10)
	Q8STEP4(14, Z11)
	Q8STEP4(18, Z12)
	Q8STEP4(22, Z13)
	Q8STEP4(26, Z14)
	Q8STEP4(30, Z15)
	FIN4
	NEXT4(544)
	DECQ CX
	JNZ  q8p4loop
q8p4done:
	STORE4
	RET

// func gemmQ8P1(w *byte, nb int, x *byte, aux *byte, out *float32)
TEXT ·gemmQ8P1(SB), NOSPLIT, $0-40
	MOVQ w+0(FP), SI
	MOVQ nb+8(FP), CX
	MOVQ x+16(FP), DI
	MOVQ aux+24(FP), DX
	VPXORD Z0, Z0, Z0
	TESTQ CX, CX
	JZ    q8p1done
q8p1loop:
	VCVTPH2PS (SI), Z16
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	VMOVDQU32 32(SI), Z8
	VMOVDQU32 96(SI), Z9
	VMOVDQU32 160(SI), Z10
	VMOVDQU32 224(SI), Z11
	VPDPBUSD.BCST 2(DI), Z8, Z4
	VPDPBUSD.BCST 6(DI), Z9, Z5
	VPDPBUSD.BCST 10(DI), Z10, Z4
	VPDPBUSD.BCST 14(DI), Z11, Z5
	VMOVDQU32 288(SI), Z12
	VMOVDQU32 352(SI), Z13
	VMOVDQU32 416(SI), Z14
	VMOVDQU32 480(SI), Z15
	VPDPBUSD.BCST 18(DI), Z12, Z4
	VPDPBUSD.BCST 22(DI), Z13, Z5
	VPDPBUSD.BCST 26(DI), Z14, Z4
	VPDPBUSD.BCST 30(DI), Z15, Z5
	VPADDD Z5, Z4, Z4
	QFIN(Z4, Z0, DX)
	ADDQ $544, SI
	ADDQ $34, DI
	ADDQ $8, DX
	DECQ CX
	JNZ  q8p1loop
q8p1done:
	MOVQ out+32(FP), AX
	VMOVUPS Z0, (AX)
	VZEROUPPER
	RET

// Q4SPLIT: the 64-byte slice at off(SI) -> low nibbles in zl, high in zh;
// Z18 holds 0x0f bytes.
#define Q4SPLIT(off, zl, zh) \
	VMOVDQU32 off(SI), zl \
	VPSRLW $4, zl, zh \
	VPANDD Z18, zl, zl \
	VPANDD Z18, zh, zh

// func gemmQ4P4(w *byte, nb int, x *byte, xstride uintptr, aux *byte, auxstride uintptr, out *float32, ostride uintptr)
TEXT ·gemmQ4P4(SB), NOSPLIT, $0-64
	SETUP4
	MOVL $0x0f0f0f0f, AX
	VPBROADCASTD AX, Z18
	TESTQ CX, CX
	JZ    q4p4done
q4p4loop:
	VCVTPH2PS (SI), Z16
	Q4SPLIT(32, Z8, Z12)
	Q4SPLIT(96, Z9, Z13)
	Q4SPLIT(160, Z10, Z14)
	Q4SPLIT(224, Z11, Z15)
	ZERO4
	Q8STEP4(2, Z8)
	Q8STEP4(6, Z9)
	Q8STEP4(10, Z10)
	Q8STEP4(14, Z11)
	Q8STEP4(18, Z12)
	Q8STEP4(22, Z13)
	Q8STEP4(26, Z14)
	Q8STEP4(30, Z15)
	FIN4
	NEXT4(288)
	DECQ CX
	JNZ  q4p4loop
q4p4done:
	STORE4
	RET

// func gemmQ4P1(w *byte, nb int, x *byte, aux *byte, out *float32)
TEXT ·gemmQ4P1(SB), NOSPLIT, $0-40
	MOVQ w+0(FP), SI
	MOVQ nb+8(FP), CX
	MOVQ x+16(FP), DI
	MOVQ aux+24(FP), DX
	MOVL $0x0f0f0f0f, AX
	VPBROADCASTD AX, Z18
	VPXORD Z0, Z0, Z0
	TESTQ CX, CX
	JZ    q4p1done
q4p1loop:
	VCVTPH2PS (SI), Z16
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	Q4SPLIT(32, Z8, Z12)
	Q4SPLIT(96, Z9, Z13)
	VPDPBUSD.BCST 2(DI), Z8, Z4
	VPDPBUSD.BCST 18(DI), Z12, Z5
	VPDPBUSD.BCST 6(DI), Z9, Z4
	VPDPBUSD.BCST 22(DI), Z13, Z5
	Q4SPLIT(160, Z10, Z14)
	Q4SPLIT(224, Z11, Z15)
	VPDPBUSD.BCST 10(DI), Z10, Z4
	VPDPBUSD.BCST 26(DI), Z14, Z5
	VPDPBUSD.BCST 14(DI), Z11, Z4
	VPDPBUSD.BCST 30(DI), Z15, Z5
	VPADDD Z5, Z4, Z4
	QFIN(Z4, Z0, DX)
	ADDQ $288, SI
	ADDQ $34, DI
	ADDQ $8, DX
	DECQ CX
	JNZ  q4p1loop
q4p1done:
	MOVQ out+32(FP), AX
	VMOVUPS Z0, (AX)
	VZEROUPPER
	RET

//go:build amd64 && !purego

#include "textflag.h"

// Value sums over quantized KV rows (kvquant.go): for each 32-value block of
// the output, every key's block in turn is added as dst += (w*d)*q, the
// product rounded before the add, as the portable loop does.

// func axpysQ8AVX(dst *float32, w *float32, v *byte, vstride uintptr, nk int, nb int)
TEXT ·axpysQ8AVX(SB), NOSPLIT, $0-48
	MOVQ dst+0(FP), DI
	MOVQ w+8(FP), SI
	MOVQ v+16(FP), R8
	MOVQ vstride+24(FP), BX
	MOVQ nk+32(FP), CX
	MOVQ nb+40(FP), DX
	TESTQ CX, CX
	JZ    q8done
	TESTQ DX, DX
	JZ    q8done
q8blk:
	VMOVUPS 0(DI), Y0
	VMOVUPS 32(DI), Y1
	VMOVUPS 64(DI), Y2
	VMOVUPS 96(DI), Y3
	MOVQ R8, R9
	XORQ AX, AX
q8key:
	MOVWLZX (R9), R10
	VMOVD R10, X4
	VCVTPH2PS X4, X4
	VMULSS (SI)(AX*4), X4, X4
	VBROADCASTSS X4, Y4
	VPMOVSXBD 2(R9), Y5
	VCVTDQ2PS Y5, Y5
	VMULPS Y4, Y5, Y5
	VADDPS Y5, Y0, Y0
	VPMOVSXBD 10(R9), Y6
	VCVTDQ2PS Y6, Y6
	VMULPS Y4, Y6, Y6
	VADDPS Y6, Y1, Y1
	VPMOVSXBD 18(R9), Y7
	VCVTDQ2PS Y7, Y7
	VMULPS Y4, Y7, Y7
	VADDPS Y7, Y2, Y2
	VPMOVSXBD 26(R9), Y8
	VCVTDQ2PS Y8, Y8
	VMULPS Y4, Y8, Y8
	VADDPS Y8, Y3, Y3
	ADDQ BX, R9
	INCQ AX
	CMPQ AX, CX
	JLT  q8key
	VMOVUPS Y0, 0(DI)
	VMOVUPS Y1, 32(DI)
	VMOVUPS Y2, 64(DI)
	VMOVUPS Y3, 96(DI)
	ADDQ $128, DI
	ADDQ $34, R8
	DECQ DX
	JNZ  q8blk
q8done:
	VZEROUPPER
	RET

// func axpysQ4AVX(dst *float32, w *float32, v *byte, vstride uintptr, nk int, nb int)
// A Q4_0 block's byte j holds values j (low nibble) and j+16 (high), each
// less 8.
TEXT ·axpysQ4AVX(SB), NOSPLIT, $0-48
	MOVQ dst+0(FP), DI
	MOVQ w+8(FP), SI
	MOVQ v+16(FP), R8
	MOVQ vstride+24(FP), BX
	MOVQ nk+32(FP), CX
	MOVQ nb+40(FP), DX
	TESTQ CX, CX
	JZ    q4done
	TESTQ DX, DX
	JZ    q4done
	MOVL $0x0f0f0f0f, R11
	VMOVD R11, X15
	VPBROADCASTD X15, X15
	MOVL $0x08080808, R11
	VMOVD R11, X14
	VPBROADCASTD X14, X14
q4blk:
	VMOVUPS 0(DI), Y0
	VMOVUPS 32(DI), Y1
	VMOVUPS 64(DI), Y2
	VMOVUPS 96(DI), Y3
	MOVQ R8, R9
	XORQ AX, AX
q4key:
	MOVWLZX (R9), R10
	VMOVD R10, X4
	VCVTPH2PS X4, X4
	VMULSS (SI)(AX*4), X4, X4
	VBROADCASTSS X4, Y4
	VMOVDQU 2(R9), X5
	VPAND X15, X5, X6
	VPSRLW $4, X5, X7
	VPAND X15, X7, X7
	VPSUBB X14, X6, X6
	VPSUBB X14, X7, X7
	VPMOVSXBD X6, Y8
	VCVTDQ2PS Y8, Y8
	VMULPS Y4, Y8, Y8
	VADDPS Y8, Y0, Y0
	VPSRLDQ $8, X6, X6
	VPMOVSXBD X6, Y9
	VCVTDQ2PS Y9, Y9
	VMULPS Y4, Y9, Y9
	VADDPS Y9, Y1, Y1
	VPMOVSXBD X7, Y10
	VCVTDQ2PS Y10, Y10
	VMULPS Y4, Y10, Y10
	VADDPS Y10, Y2, Y2
	VPSRLDQ $8, X7, X7
	VPMOVSXBD X7, Y11
	VCVTDQ2PS Y11, Y11
	VMULPS Y4, Y11, Y11
	VADDPS Y11, Y3, Y3
	ADDQ BX, R9
	INCQ AX
	CMPQ AX, CX
	JLT  q4key
	VMOVUPS Y0, 0(DI)
	VMOVUPS Y1, 32(DI)
	VMOVUPS Y2, 64(DI)
	VMOVUPS Y3, 96(DI)
	ADDQ $128, DI
	ADDQ $18, R8
	DECQ DX
	JNZ  q4blk
q4done:
	VZEROUPPER
	RET

// Four queries at once (the query heads that share a KV head): each key's
// blocks are loaded and expanded once for the four, and every query's
// results are bitwise those of the one-query kernels.

// KQDOT: key (Y1, with |key| in Y2) · query block at addr -> 8 int32 lanes in acc.
#define KQDOT(addr, acc) \
	VMOVDQU addr, Y0 \
	VPSIGNB Y1, Y0, Y3 \
	VPMADDUBSW Y3, Y2, Y3 \
	VPMADDWD Y15, Y3, acc

// KQFINISH: reduce Y4..Y7 to the 4 queries' isums, times dk (f16 at kd)
// times each query's dq (f16 at R11, R11+R8, R12, R12+R8), into X14.
#define KQFINISH(kd) \
	VPHADDD Y5, Y4, Y4 \
	VPHADDD Y7, Y6, Y6 \
	VPHADDD Y6, Y4, Y4 \
	VEXTRACTI128 $1, Y4, X5 \
	VPADDD X5, X4, X4 \
	VCVTDQ2PS X4, X4 \
	VPINSRW $0, (R11), X8, X8 \
	VPINSRW $1, (R11)(R8*1), X8, X8 \
	VPINSRW $2, (R12), X8, X8 \
	VPINSRW $3, (R12)(R8*1), X8, X8 \
	VCVTPH2PS X8, X8 \
	VPBROADCASTW kd, X9 \
	VCVTPH2PS X9, X9 \
	VMULPS X9, X8, X8 \
	VMULPS X4, X8, X8 \
	VADDPS X8, X14, X14

// KQSTORE: scale X14 by X11 and store lane i at out + i*ostride + j*4
// (out in DI, ostride in R13, j in R9).
#define KQSTORE \
	VMULPS X11, X14, X14 \
	LEAQ (DI)(R9*4), AX \
	VMOVSS X14, (AX) \
	ADDQ R13, AX \
	VPSHUFD $0x55, X14, X0 \
	VMOVSS X0, (AX) \
	ADDQ R13, AX \
	VPSHUFD $0xaa, X14, X0 \
	VMOVSS X0, (AX) \
	ADDQ R13, AX \
	VPSHUFD $0xff, X14, X0 \
	VMOVSS X0, (AX)

// func dots4Q8AVX(out *float32, ostride uintptr, q *byte, k *byte, kstride uintptr, nk int, nb int, scale float32)
// out[i*ostride/4 + j] = dot(key j, query i) * scale; query i's nb blocks at
// q + i*nb*34.
TEXT ·dots4Q8AVX(SB), NOSPLIT, $0-60
	MOVQ out+0(FP), DI
	MOVQ ostride+8(FP), R13
	MOVQ q+16(FP), R14
	MOVQ k+24(FP), SI
	MOVQ kstride+32(FP), BX
	MOVQ nk+40(FP), CX
	MOVQ nb+48(FP), DX
	VBROADCASTSS scale+56(FP), X11
	IMUL3Q $34, DX, R8
	MOVL $0x00010001, AX
	VMOVD AX, X15
	VPBROADCASTD X15, Y15
	VPXOR X8, X8, X8
	XORQ R9, R9
	TESTQ DX, DX
	JZ    d8done
d8key:
	CMPQ R9, CX
	JGE  d8done
	VXORPS X14, X14, X14
	MOVQ SI, R10
	MOVQ R14, R11
	LEAQ (R14)(R8*2), R12
	MOVQ DX, AX
d8blk:
	VMOVDQU 2(R10), Y1
	VPABSB Y1, Y2
	KQDOT(2(R11), Y4)
	KQDOT(2(R11)(R8*1), Y5)
	KQDOT(2(R12), Y6)
	KQDOT(2(R12)(R8*1), Y7)
	KQFINISH((R10))
	ADDQ $34, R10
	ADDQ $34, R11
	ADDQ $34, R12
	DECQ AX
	JNZ  d8blk
	KQSTORE
	ADDQ BX, SI
	INCQ R9
	JMP  d8key
d8done:
	VZEROUPPER
	RET

// func dots4Q4AVX(out *float32, ostride uintptr, q *byte, k *byte, kstride uintptr, nk int, nb int, scale float32)
// dots4Q8AVX for Q4_0 keys.
TEXT ·dots4Q4AVX(SB), NOSPLIT, $0-60
	MOVQ out+0(FP), DI
	MOVQ ostride+8(FP), R13
	MOVQ q+16(FP), R14
	MOVQ k+24(FP), SI
	MOVQ kstride+32(FP), BX
	MOVQ nk+40(FP), CX
	MOVQ nb+48(FP), DX
	VBROADCASTSS scale+56(FP), X11
	IMUL3Q $34, DX, R8
	MOVL $0x00010001, AX
	VMOVD AX, X15
	VPBROADCASTD X15, Y15
	MOVL $0x0f0f0f0f, AX
	VMOVD AX, X13
	VPBROADCASTD X13, Y13
	MOVL $0x08080808, AX
	VMOVD AX, X12
	VPBROADCASTD X12, Y12
	VPXOR X8, X8, X8
	XORQ R9, R9
	TESTQ DX, DX
	JZ    d4done
d4key:
	CMPQ R9, CX
	JGE  d4done
	VXORPS X14, X14, X14
	MOVQ SI, R10
	MOVQ R14, R11
	LEAQ (R14)(R8*2), R12
	MOVQ DX, AX
d4blk:
	VMOVDQU 2(R10), X1
	VPSRLW $4, X1, X2
	VINSERTI128 $1, X2, Y1, Y1
	VPAND Y13, Y1, Y1
	VPSUBB Y12, Y1, Y1
	VPABSB Y1, Y2
	KQDOT(2(R11), Y4)
	KQDOT(2(R11)(R8*1), Y5)
	KQDOT(2(R12), Y6)
	KQDOT(2(R12)(R8*1), Y7)
	KQFINISH((R10))
	ADDQ $18, R10
	ADDQ $34, R11
	ADDQ $34, R12
	DECQ AX
	JNZ  d4blk
	KQSTORE
	ADDQ BX, SI
	INCQ R9
	JMP  d4key
d4done:
	VZEROUPPER
	RET

// AX4KEY: one key's 16 values (Y8, Y9 as float) with its scale in X10,
// weighted by each query's w[j] (at R11, R11+R13, R12, R12+R13, index AX)
// into Y0..Y7 (two accumulators per query), each product rounded.
#define AX4KEY \
	VMULSS (R11)(AX*4), X10, X11 \
	VBROADCASTSS X11, Y11 \
	VMULPS Y11, Y8, Y12 \
	VADDPS Y12, Y0, Y0 \
	VMULPS Y11, Y9, Y12 \
	VADDPS Y12, Y1, Y1 \
	LEAQ (R11)(R13*1), R10 \
	VMULSS (R10)(AX*4), X10, X11 \
	VBROADCASTSS X11, Y11 \
	VMULPS Y11, Y8, Y12 \
	VADDPS Y12, Y2, Y2 \
	VMULPS Y11, Y9, Y12 \
	VADDPS Y12, Y3, Y3 \
	VMULSS (R12)(AX*4), X10, X11 \
	VBROADCASTSS X11, Y11 \
	VMULPS Y11, Y8, Y12 \
	VADDPS Y12, Y4, Y4 \
	VMULPS Y11, Y9, Y12 \
	VADDPS Y12, Y5, Y5 \
	LEAQ (R12)(R13*1), R10 \
	VMULSS (R10)(AX*4), X10, X11 \
	VBROADCASTSS X11, Y11 \
	VMULPS Y11, Y8, Y12 \
	VADDPS Y12, Y6, Y6 \
	VMULPS Y11, Y9, Y12 \
	VADDPS Y12, Y7, Y7

// AX4LOAD / AX4SAVE: the 4 queries' 16 outputs at DI + i*R14 (+doff).
#define AX4LOAD(doff) \
	MOVQ DI, R10 \
	VMOVUPS doff(R10), Y0 \
	VMOVUPS doff+32(R10), Y1 \
	ADDQ R14, R10 \
	VMOVUPS doff(R10), Y2 \
	VMOVUPS doff+32(R10), Y3 \
	ADDQ R14, R10 \
	VMOVUPS doff(R10), Y4 \
	VMOVUPS doff+32(R10), Y5 \
	ADDQ R14, R10 \
	VMOVUPS doff(R10), Y6 \
	VMOVUPS doff+32(R10), Y7

#define AX4SAVE(doff) \
	MOVQ DI, R10 \
	VMOVUPS Y0, doff(R10) \
	VMOVUPS Y1, doff+32(R10) \
	ADDQ R14, R10 \
	VMOVUPS Y2, doff(R10) \
	VMOVUPS Y3, doff+32(R10) \
	ADDQ R14, R10 \
	VMOVUPS Y4, doff(R10) \
	VMOVUPS Y5, doff+32(R10) \
	ADDQ R14, R10 \
	VMOVUPS Y6, doff(R10) \
	VMOVUPS Y7, doff+32(R10)

// AX4SCALE: key j's block scale (f16 at R9) as float in X10.
#define AX4SCALE \
	MOVWLZX (R9), R10 \
	VMOVD R10, X10 \
	VCVTPH2PS X10, X10

// func axpys4Q8AVX(dst *float32, dstride uintptr, w *float32, wstride uintptr, v *byte, vstride uintptr, nk int, nb int)
// dst[i*dstride/4 + x] += w[i*wstride/4 + j] * v_j[x] for the 4 queries i,
// key after key, each element as AxpysQ8 computes it.
TEXT ·axpys4Q8AVX(SB), NOSPLIT, $0-64
	MOVQ dst+0(FP), DI
	MOVQ dstride+8(FP), R14
	MOVQ w+16(FP), R11
	MOVQ wstride+24(FP), R13
	MOVQ v+32(FP), R8
	MOVQ vstride+40(FP), BX
	MOVQ nk+48(FP), CX
	MOVQ nb+56(FP), DX
	LEAQ (R11)(R13*2), R12
	TESTQ CX, CX
	JZ    ax4q8done
	TESTQ DX, DX
	JZ    ax4q8done
ax4q8blk:
	AX4LOAD(0)
	MOVQ R8, R9
	XORQ AX, AX
ax4q8lo:
	VPMOVSXBD 2(R9), Y8
	VPMOVSXBD 10(R9), Y9
	VCVTDQ2PS Y8, Y8
	VCVTDQ2PS Y9, Y9
	AX4SCALE
	AX4KEY
	ADDQ BX, R9
	INCQ AX
	CMPQ AX, CX
	JLT  ax4q8lo
	AX4SAVE(0)
	AX4LOAD(64)
	MOVQ R8, R9
	XORQ AX, AX
ax4q8hi:
	VPMOVSXBD 18(R9), Y8
	VPMOVSXBD 26(R9), Y9
	VCVTDQ2PS Y8, Y8
	VCVTDQ2PS Y9, Y9
	AX4SCALE
	AX4KEY
	ADDQ BX, R9
	INCQ AX
	CMPQ AX, CX
	JLT  ax4q8hi
	AX4SAVE(64)
	ADDQ $128, DI
	ADDQ $34, R8
	DECQ DX
	JNZ  ax4q8blk
ax4q8done:
	VZEROUPPER
	RET

// func axpys4Q4AVX(dst *float32, dstride uintptr, w *float32, wstride uintptr, v *byte, vstride uintptr, nk int, nb int)
// dst[i*dstride/4 + x] += w[i*wstride/4 + j] * v_j[x] for the 4 queries i,
// key after key, each element as AxpysQ4 computes it.
TEXT ·axpys4Q4AVX(SB), NOSPLIT, $0-64
	MOVQ dst+0(FP), DI
	MOVQ dstride+8(FP), R14
	MOVQ w+16(FP), R11
	MOVQ wstride+24(FP), R13
	MOVQ v+32(FP), R8
	MOVQ vstride+40(FP), BX
	MOVQ nk+48(FP), CX
	MOVQ nb+56(FP), DX
	LEAQ (R11)(R13*2), R12
	TESTQ CX, CX
	JZ    ax4q4done
	TESTQ DX, DX
	JZ    ax4q4done
	MOVL $0x0f0f0f0f, AX
	VMOVD AX, X15
	VPBROADCASTD X15, X15
	MOVL $0x08080808, AX
	VMOVD AX, X13
	VPBROADCASTD X13, X13
ax4q4blk:
	AX4LOAD(0)
	MOVQ R8, R9
	XORQ AX, AX
ax4q4lo:
	VMOVDQU 2(R9), X8
	VPAND X15, X8, X8
	VPSUBB X13, X8, X8
	VPSRLDQ $8, X8, X9
	VPMOVSXBD X8, Y8
	VPMOVSXBD X9, Y9
	VCVTDQ2PS Y8, Y8
	VCVTDQ2PS Y9, Y9
	AX4SCALE
	AX4KEY
	ADDQ BX, R9
	INCQ AX
	CMPQ AX, CX
	JLT  ax4q4lo
	AX4SAVE(0)
	AX4LOAD(64)
	MOVQ R8, R9
	XORQ AX, AX
ax4q4hi:
	VMOVDQU 2(R9), X8
	VPSRLW $4, X8, X8
	VPAND X15, X8, X8
	VPSUBB X13, X8, X8
	VPSRLDQ $8, X8, X9
	VPMOVSXBD X8, Y8
	VPMOVSXBD X9, Y9
	VCVTDQ2PS Y8, Y8
	VCVTDQ2PS Y9, Y9
	AX4SCALE
	AX4KEY
	ADDQ BX, R9
	INCQ AX
	CMPQ AX, CX
	JLT  ax4q4hi
	AX4SAVE(64)
	ADDQ $128, DI
	ADDQ $18, R8
	DECQ DX
	JNZ  ax4q4blk
ax4q4done:
	VZEROUPPER
	RET


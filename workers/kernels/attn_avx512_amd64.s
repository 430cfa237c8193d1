//go:build amd64 && !purego

#include "textflag.h"

// AVX-512 forms of the attention page kernels for V: the same element-wise
// FMAs in the same key order as axpysF16AVX and axpys4F16AVX (so bitwise the
// same results), 16 lanes per instruction.

// func axpysF16Z(dst *float32, w *float32, v *uint16, vstride uintptr, nk int, hd int)
// dst[i] += w[j]*v[j][i] for j < nk in order, i < hd (a multiple of 16); 64
// dimensions at a time held in registers, then 16.
TEXT ·axpysF16Z(SB), NOSPLIT, $0-48
	MOVQ dst+0(FP), DI
	MOVQ w+8(FP), SI
	MOVQ v+16(FP), R8
	MOVQ vstride+24(FP), BX
	MOVQ nk+32(FP), CX
	MOVQ hd+40(FP), DX
	TESTQ CX, CX
	JZ    azdone
az64:
	CMPQ DX, $64
	JLT  az16
	VMOVUPS 0(DI), Z0
	VMOVUPS 64(DI), Z1
	VMOVUPS 128(DI), Z2
	VMOVUPS 192(DI), Z3
	MOVQ R8, R9
	XORQ AX, AX
az64k:
	VBROADCASTSS (SI)(AX*4), Z15
	VCVTPH2PS 0(R9), Z8
	VCVTPH2PS 32(R9), Z9
	VCVTPH2PS 64(R9), Z10
	VCVTPH2PS 96(R9), Z11
	VFMADD231PS Z15, Z8, Z0
	VFMADD231PS Z15, Z9, Z1
	VFMADD231PS Z15, Z10, Z2
	VFMADD231PS Z15, Z11, Z3
	ADDQ BX, R9
	INCQ AX
	CMPQ AX, CX
	JLT  az64k
	VMOVUPS Z0, 0(DI)
	VMOVUPS Z1, 64(DI)
	VMOVUPS Z2, 128(DI)
	VMOVUPS Z3, 192(DI)
	ADDQ $256, DI
	ADDQ $128, R8
	SUBQ $64, DX
	JMP  az64
az16:
	CMPQ DX, $16
	JLT  azdone
	VMOVUPS (DI), Z0
	MOVQ R8, R9
	XORQ AX, AX
az16k:
	VBROADCASTSS (SI)(AX*4), Z15
	VCVTPH2PS (R9), Z8
	VFMADD231PS Z15, Z8, Z0
	ADDQ BX, R9
	INCQ AX
	CMPQ AX, CX
	JLT  az16k
	VMOVUPS Z0, (DI)
	ADDQ $64, DI
	ADDQ $32, R8
	SUBQ $16, DX
	JMP  az16
azdone:
	VZEROUPPER
	RET

// func axpys4F16Z(d0, d1, d2, d3 *float32, w0, w1, w2, w3 *float32, v *uint16, vstride uintptr, nk int, hd int)
// di[x] += wi[j]*v[j][x] for j < nk in order, x < hd (a multiple of 16), four
// outputs sharing each converted V chunk; 32 dimensions at a time (16
// accumulators), then 16.
TEXT ·axpys4F16Z(SB), NOSPLIT, $0-96
	MOVQ v+64(FP), R8
	MOVQ vstride+72(FP), BX
	MOVQ nk+80(FP), CX
	MOVQ hd+88(FP), DX
	XORQ R15, R15 // dimension offset in bytes of f32
	TESTQ CX, CX
	JZ    z4done
	MOVQ d0+0(FP), DI
	MOVQ d1+8(FP), R12
	MOVQ d2+16(FP), R13
	MOVQ d3+24(FP), R14
z4blk:
	CMPQ DX, $32
	JLT  z4one
	VMOVUPS (DI)(R15*1), Z0
	VMOVUPS 64(DI)(R15*1), Z1
	VMOVUPS (R12)(R15*1), Z2
	VMOVUPS 64(R12)(R15*1), Z3
	VMOVUPS (R13)(R15*1), Z4
	VMOVUPS 64(R13)(R15*1), Z5
	VMOVUPS (R14)(R15*1), Z6
	VMOVUPS 64(R14)(R15*1), Z7
	MOVQ R15, R9
	SHRQ $1, R9
	ADDQ R8, R9 // this block of key 0's values
	MOVQ w0+32(FP), SI
	MOVQ w1+40(FP), R10
	MOVQ w2+48(FP), R11
	MOVQ w3+56(FP), AX
z4k:
	VCVTPH2PS (R9), Z8
	VCVTPH2PS 32(R9), Z9
	VBROADCASTSS (SI), Z10
	VBROADCASTSS (R10), Z11
	VBROADCASTSS (R11), Z12
	VBROADCASTSS (AX), Z13
	VFMADD231PS Z10, Z8, Z0
	VFMADD231PS Z10, Z9, Z1
	VFMADD231PS Z11, Z8, Z2
	VFMADD231PS Z11, Z9, Z3
	VFMADD231PS Z12, Z8, Z4
	VFMADD231PS Z12, Z9, Z5
	VFMADD231PS Z13, Z8, Z6
	VFMADD231PS Z13, Z9, Z7
	ADDQ $4, SI
	ADDQ $4, R10
	ADDQ $4, R11
	ADDQ $4, AX
	ADDQ BX, R9
	DECQ CX
	JNZ  z4k
	MOVQ nk+80(FP), CX
	VMOVUPS Z0, (DI)(R15*1)
	VMOVUPS Z1, 64(DI)(R15*1)
	VMOVUPS Z2, (R12)(R15*1)
	VMOVUPS Z3, 64(R12)(R15*1)
	VMOVUPS Z4, (R13)(R15*1)
	VMOVUPS Z5, 64(R13)(R15*1)
	VMOVUPS Z6, (R14)(R15*1)
	VMOVUPS Z7, 64(R14)(R15*1)
	ADDQ $128, R15
	SUBQ $32, DX
	JMP  z4blk
z4one:
	CMPQ DX, $16
	JLT  z4done
	VMOVUPS (DI)(R15*1), Z0
	VMOVUPS (R12)(R15*1), Z2
	VMOVUPS (R13)(R15*1), Z4
	VMOVUPS (R14)(R15*1), Z6
	MOVQ R15, R9
	SHRQ $1, R9
	ADDQ R8, R9
	MOVQ w0+32(FP), SI
	MOVQ w1+40(FP), R10
	MOVQ w2+48(FP), R11
	MOVQ w3+56(FP), AX
z4k1:
	VCVTPH2PS (R9), Z8
	VBROADCASTSS (SI), Z10
	VBROADCASTSS (R10), Z11
	VBROADCASTSS (R11), Z12
	VBROADCASTSS (AX), Z13
	VFMADD231PS Z10, Z8, Z0
	VFMADD231PS Z11, Z8, Z2
	VFMADD231PS Z12, Z8, Z4
	VFMADD231PS Z13, Z8, Z6
	ADDQ $4, SI
	ADDQ $4, R10
	ADDQ $4, R11
	ADDQ $4, AX
	ADDQ BX, R9
	DECQ CX
	JNZ  z4k1
	MOVQ nk+80(FP), CX
	VMOVUPS Z0, (DI)(R15*1)
	VMOVUPS Z2, (R12)(R15*1)
	VMOVUPS Z4, (R13)(R15*1)
	VMOVUPS Z6, (R14)(R15*1)
	ADDQ $64, R15
	SUBQ $16, DX
	JMP  z4one
z4done:
	VZEROUPPER
	RET

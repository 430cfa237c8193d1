//go:build amd64 && !purego

#include "textflag.h"

// Attention kernels over a page of half-precision K or V rows, in the order of
// dotF16AVX and axpyF16AVX applied key by key (so the bits are theirs): one
// 8-lane FMA accumulator per key over the head's dimensions, reduced as
// ((a0+a1)+(a2+a3)) + ((a4+a5)+(a6+a7)); V rows added into the output one key
// after another with FMA. One call per page instead of one per key.

// func dotsF16AVX(out *float32, q *float32, k *uint16, kstride uintptr, nk int, hd int, scale float32)
// out[j] = dot(q, k + j*kstride bytes) * scale for j < nk; hd a multiple of 8.
TEXT ·dotsF16AVX(SB), NOSPLIT, $0-52
	MOVQ out+0(FP), DI
	MOVQ q+8(FP), SI
	MOVQ k+16(FP), R8
	MOVQ kstride+24(FP), BX
	MOVQ nk+32(FP), CX
	MOVQ hd+40(FP), DX
	SHRQ $3, DX
	VBROADCASTSS scale+48(FP), X15
dk4:
	CMPQ CX, $4
	JLT  dk1
	LEAQ (R8)(BX*1), R9
	LEAQ (R9)(BX*1), R10
	LEAQ (R10)(BX*1), R11
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	XORQ AX, AX
	MOVQ DX, R12
dk4c:
	VMOVUPS (SI)(AX*2), Y8
	VCVTPH2PS (R8)(AX*1), Y4
	VCVTPH2PS (R9)(AX*1), Y5
	VCVTPH2PS (R10)(AX*1), Y6
	VCVTPH2PS (R11)(AX*1), Y7
	VFMADD231PS Y4, Y8, Y0
	VFMADD231PS Y5, Y8, Y1
	VFMADD231PS Y6, Y8, Y2
	VFMADD231PS Y7, Y8, Y3
	ADDQ $16, AX
	DECQ R12
	JNZ  dk4c
	VHADDPS Y1, Y0, Y0
	VHADDPS Y3, Y2, Y2
	VHADDPS Y2, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPS X1, X0, X0
	VMULPS X15, X0, X0
	VMOVUPS X0, (DI)
	ADDQ $16, DI
	LEAQ (R11)(BX*1), R8
	SUBQ $4, CX
	JMP  dk4
dk1:
	TESTQ CX, CX
	JZ    dkdone
	VXORPS Y0, Y0, Y0
	XORQ AX, AX
	MOVQ DX, R12
dk1c:
	VMOVUPS (SI)(AX*2), Y8
	VCVTPH2PS (R8)(AX*1), Y4
	VFMADD231PS Y4, Y8, Y0
	ADDQ $16, AX
	DECQ R12
	JNZ  dk1c
	VHADDPS Y0, Y0, Y0
	VHADDPS Y0, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDSS X1, X0, X0
	VMULSS X15, X0, X0
	VMOVSS X0, (DI)
	ADDQ $4, DI
	ADDQ BX, R8
	DECQ CX
	JMP  dk1
dkdone:
	VZEROUPPER
	RET

// func axpysF16AVX(dst *float32, w *float32, v *uint16, vstride uintptr, nk int, hd int)
// dst[i] += w[j]*v[j][i] for j < nk in order, i < hd (a multiple of 8), 64
// dimensions at a time held in registers.
TEXT ·axpysF16AVX(SB), NOSPLIT, $0-48
	MOVQ dst+0(FP), DI
	MOVQ w+8(FP), SI
	MOVQ v+16(FP), R8
	MOVQ vstride+24(FP), BX
	MOVQ nk+32(FP), CX
	MOVQ hd+40(FP), DX
	TESTQ CX, CX
	JZ    axsdone
axs64:
	CMPQ DX, $64
	JLT  axs8
	VMOVUPS 0(DI), Y0
	VMOVUPS 32(DI), Y1
	VMOVUPS 64(DI), Y2
	VMOVUPS 96(DI), Y3
	VMOVUPS 128(DI), Y4
	VMOVUPS 160(DI), Y5
	VMOVUPS 192(DI), Y6
	VMOVUPS 224(DI), Y7
	MOVQ R8, R9
	XORQ AX, AX
axs64k:
	VBROADCASTSS (SI)(AX*4), Y15
	VCVTPH2PS 0(R9), Y8
	VFMADD231PS Y15, Y8, Y0
	VCVTPH2PS 16(R9), Y9
	VFMADD231PS Y15, Y9, Y1
	VCVTPH2PS 32(R9), Y10
	VFMADD231PS Y15, Y10, Y2
	VCVTPH2PS 48(R9), Y11
	VFMADD231PS Y15, Y11, Y3
	VCVTPH2PS 64(R9), Y8
	VFMADD231PS Y15, Y8, Y4
	VCVTPH2PS 80(R9), Y9
	VFMADD231PS Y15, Y9, Y5
	VCVTPH2PS 96(R9), Y10
	VFMADD231PS Y15, Y10, Y6
	VCVTPH2PS 112(R9), Y11
	VFMADD231PS Y15, Y11, Y7
	ADDQ BX, R9
	INCQ AX
	CMPQ AX, CX
	JLT  axs64k
	VMOVUPS Y0, 0(DI)
	VMOVUPS Y1, 32(DI)
	VMOVUPS Y2, 64(DI)
	VMOVUPS Y3, 96(DI)
	VMOVUPS Y4, 128(DI)
	VMOVUPS Y5, 160(DI)
	VMOVUPS Y6, 192(DI)
	VMOVUPS Y7, 224(DI)
	ADDQ $256, DI
	ADDQ $128, R8
	SUBQ $64, DX
	JMP  axs64
axs8:
	CMPQ DX, $8
	JLT  axsdone
	VMOVUPS (DI), Y0
	MOVQ R8, R9
	XORQ AX, AX
axs8k:
	VBROADCASTSS (SI)(AX*4), Y15
	VCVTPH2PS (R9), Y8
	VFMADD231PS Y15, Y8, Y0
	ADDQ BX, R9
	INCQ AX
	CMPQ AX, CX
	JLT  axs8k
	VMOVUPS Y0, (DI)
	ADDQ $32, DI
	ADDQ $16, R8
	SUBQ $8, DX
	JMP  axs8
axsdone:
	VZEROUPPER
	RET

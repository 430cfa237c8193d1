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

// D4STORE: the four queries' sums a0..a3 for one key, each reduced as
// dotF16AVX reduces its sum, times the scale (X15), to off(DI), off(R12),
// off(R13) and off(R14); x0 is a0's low half, x1 a scratch.
#define D4STORE(a0, a1, a2, a3, x0, x1, off) \
	VHADDPS a1, a0, a0 \
	VHADDPS a3, a2, a2 \
	VHADDPS a2, a0, a0 \
	VEXTRACTF128 $1, a0, x1 \
	VADDPS x1, x0, x0 \
	VMULPS X15, x0, x0 \
	VMOVSS x0, off(DI) \
	VEXTRACTPS $1, x0, off(R12) \
	VEXTRACTPS $2, x0, off(R13) \
	VEXTRACTPS $3, x0, off(R14)

// func dots4F16AVX(o0, o1, o2, o3 *float32, q *float32, k *uint16, kstride uintptr, nk int, hd int, scale float32)
// Four queries (q + i*hd floats) against nk keys: oi[j] = dot(q_i, key j) *
// scale, each dot in dotF16AVX's order; every key chunk is converted once for
// the four queries.
TEXT ·dots4F16AVX(SB), NOSPLIT, $0-76
	MOVQ o0+0(FP), DI
	MOVQ o1+8(FP), R12
	MOVQ o2+16(FP), R13
	MOVQ o3+24(FP), R14
	MOVQ q+32(FP), SI
	MOVQ k+40(FP), R8
	MOVQ kstride+48(FP), BX
	MOVQ nk+56(FP), CX
	MOVQ hd+64(FP), DX
	VBROADCASTSS scale+72(FP), X15
	LEAQ (SI)(DX*4), R9
	LEAQ (R9)(DX*4), R10
	LEAQ (R10)(DX*4), R11
	SHLQ $1, DX // bytes of a key
	TESTQ CX, CX
	JZ    d4done

// Two keys at a time: each dot still sums its chunks in order in one
// register, but the eight sums' multiply-adds do not wait on each other, so
// the loop runs at the multiply-add rate, not their latency.
d4pair:
	CMPQ CX, $2
	JLT  d4key
	LEAQ (R8)(BX*1), R15
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	XORQ AX, AX
d4c2:
	VCVTPH2PS (R8)(AX*1), Y8
	VCVTPH2PS (R15)(AX*1), Y9
	VMOVUPS (SI)(AX*2), Y10
	VMOVUPS (R9)(AX*2), Y11
	VMOVUPS (R10)(AX*2), Y12
	VMOVUPS (R11)(AX*2), Y13
	VFMADD231PS Y10, Y8, Y0
	VFMADD231PS Y11, Y8, Y1
	VFMADD231PS Y12, Y8, Y2
	VFMADD231PS Y13, Y8, Y3
	VFMADD231PS Y10, Y9, Y4
	VFMADD231PS Y11, Y9, Y5
	VFMADD231PS Y12, Y9, Y6
	VFMADD231PS Y13, Y9, Y7
	ADDQ $16, AX
	CMPQ AX, DX
	JLT  d4c2
	D4STORE(Y0, Y1, Y2, Y3, X0, X1, 0)
	D4STORE(Y4, Y5, Y6, Y7, X4, X5, 4)
	ADDQ $8, DI
	ADDQ $8, R12
	ADDQ $8, R13
	ADDQ $8, R14
	LEAQ (R15)(BX*1), R8
	SUBQ $2, CX
	JMP  d4pair

d4key:
	TESTQ CX, CX
	JZ    d4done
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	XORQ AX, AX
d4c:
	VCVTPH2PS (R8)(AX*1), Y8
	VFMADD231PS (SI)(AX*2), Y8, Y0
	VFMADD231PS (R9)(AX*2), Y8, Y1
	VFMADD231PS (R10)(AX*2), Y8, Y2
	VFMADD231PS (R11)(AX*2), Y8, Y3
	ADDQ $16, AX
	CMPQ AX, DX
	JLT  d4c
	D4STORE(Y0, Y1, Y2, Y3, X0, X1, 0)
	ADDQ $4, DI
	ADDQ $4, R12
	ADDQ $4, R13
	ADDQ $4, R14
	ADDQ BX, R8
	DECQ CX
	JMP  d4key
d4done:
	VZEROUPPER
	RET

// func axpys4F16AVX(d0, d1, d2, d3 *float32, w0, w1, w2, w3 *float32, v *uint16, vstride uintptr, nk int, hd int)
// di[x] += wi[j]*v[j][x] for j < nk in order, x < hd (a multiple of 16), four
// outputs sharing each converted V chunk; 16 dimensions at a time.
TEXT ·axpys4F16AVX(SB), NOSPLIT, $0-96
	MOVQ v+64(FP), R8
	MOVQ vstride+72(FP), BX
	MOVQ nk+80(FP), CX
	MOVQ hd+88(FP), DX
	XORQ R15, R15 // dimension offset in bytes of f32
	TESTQ CX, CX
	JZ    a4done
a4blk:
	CMPQ DX, $16
	JLT  a4done
	MOVQ d0+0(FP), DI
	MOVQ d1+8(FP), R12
	MOVQ d2+16(FP), R13
	MOVQ d3+24(FP), R14
	VMOVUPS (DI)(R15*1), Y0
	VMOVUPS 32(DI)(R15*1), Y1
	VMOVUPS (R12)(R15*1), Y2
	VMOVUPS 32(R12)(R15*1), Y3
	VMOVUPS (R13)(R15*1), Y4
	VMOVUPS 32(R13)(R15*1), Y5
	VMOVUPS (R14)(R15*1), Y6
	VMOVUPS 32(R14)(R15*1), Y7
	MOVQ R15, R9
	SHRQ $1, R9
	ADDQ R8, R9 // this block of key 0's values
	MOVQ w0+32(FP), SI
	MOVQ w1+40(FP), R10
	MOVQ w2+48(FP), R11
	MOVQ w3+56(FP), AX
a4k:
	VCVTPH2PS (R9), Y8
	VCVTPH2PS 16(R9), Y9
	VBROADCASTSS (SI), Y10
	VBROADCASTSS (R10), Y11
	VBROADCASTSS (R11), Y12
	VBROADCASTSS (AX), Y13
	VFMADD231PS Y10, Y8, Y0
	VFMADD231PS Y10, Y9, Y1
	VFMADD231PS Y11, Y8, Y2
	VFMADD231PS Y11, Y9, Y3
	VFMADD231PS Y12, Y8, Y4
	VFMADD231PS Y12, Y9, Y5
	VFMADD231PS Y13, Y8, Y6
	VFMADD231PS Y13, Y9, Y7
	ADDQ $4, SI
	ADDQ $4, R10
	ADDQ $4, R11
	ADDQ $4, AX
	ADDQ BX, R9
	DECQ CX
	JNZ  a4k
	MOVQ nk+80(FP), CX
	VMOVUPS Y0, (DI)(R15*1)
	VMOVUPS Y1, 32(DI)(R15*1)
	VMOVUPS Y2, (R12)(R15*1)
	VMOVUPS Y3, 32(R12)(R15*1)
	VMOVUPS Y4, (R13)(R15*1)
	VMOVUPS Y5, 32(R13)(R15*1)
	VMOVUPS Y6, (R14)(R15*1)
	VMOVUPS Y7, 32(R14)(R15*1)
	ADDQ $64, R15
	SUBQ $16, DX
	JMP  a4blk
a4done:
	VZEROUPPER
	RET

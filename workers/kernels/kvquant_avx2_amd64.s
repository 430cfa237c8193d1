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

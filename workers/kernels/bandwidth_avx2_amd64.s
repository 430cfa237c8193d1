//go:build amd64 && !purego

#include "textflag.h"

// func readSumAVX(p *byte, n int) uint64
// Sums n bytes (a multiple of 128) as 64-bit words, 4 loads of 32 bytes in
// flight: a read-bandwidth probe whose result keeps the loads alive.
TEXT ·readSumAVX(SB), NOSPLIT, $0-24
	MOVQ p+0(FP), SI
	MOVQ n+8(FP), CX
	VPXOR Y0, Y0, Y0
	VPXOR Y1, Y1, Y1
	VPXOR Y2, Y2, Y2
	VPXOR Y3, Y3, Y3
	SHRQ $7, CX
	JZ   rsdone
rsloop:
	VPADDQ 0(SI), Y0, Y0
	VPADDQ 32(SI), Y1, Y1
	VPADDQ 64(SI), Y2, Y2
	VPADDQ 96(SI), Y3, Y3
	ADDQ $128, SI
	DECQ CX
	JNZ  rsloop
rsdone:
	VPADDQ Y1, Y0, Y0
	VPADDQ Y3, Y2, Y2
	VPADDQ Y2, Y0, Y0
	VEXTRACTI128 $1, Y0, X1
	VPADDQ X1, X0, X0
	VPSHUFD $0x4e, X0, X1
	VPADDQ X1, X0, X0
	VMOVQ X0, ret+16(FP)
	VZEROUPPER
	RET

// func prefetchRows(p *byte, stride uintptr, rows int, width int)
// Asks for the first width bytes (width > 0) of rows rows, stride bytes
// apart, to be brought into L1 without waiting for them.
TEXT ·prefetchRows(SB), NOSPLIT, $0-32
	MOVQ p+0(FP), SI
	MOVQ stride+8(FP), BX
	MOVQ rows+16(FP), CX
	MOVQ width+24(FP), DX
	TESTQ CX, CX
	JZ    prdone
prrow:
	XORQ AX, AX
prline:
	PREFETCHT0 (SI)(AX*1)
	ADDQ $64, AX
	CMPQ AX, DX
	JLT  prline
	ADDQ BX, SI
	DECQ CX
	JNZ  prrow
prdone:
	RET

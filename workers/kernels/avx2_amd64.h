// Macros shared by the AVX2 kernels over packed groups (gemm_avx2_amd64.s,
// kgemm_avx2_amd64.s) and by the float64 sums (softmax_avx2_amd64.s,
// norm_avx2_amd64.s). Each names the registers it reads and writes.

// SUMF64LANES adds eight float64 lane sums (lanes 0..3 in Y0, 4..7 in Y1) as
// ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)), the order lanes8 models, into ret.
#define SUMF64LANES(ret) \
	VADDPD Y1, Y0, Y0 \
	VEXTRACTF128 $1, Y0, X1 \
	VADDPD X1, X0, X0 \
	VPERMILPD $1, X0, X1 \
	VADDSD X1, X0, X0 \
	VMOVSD X0, ret

// ARGS4 loads the arguments of a kernel over half a group (BX = 8*half) and
// 4 activation rows (w, half, nb, x, xstride, aux, auxstride, ...): SI the
// weights, CX the blocks, DI/R8/R9/R10 the activation rows, DX/R11/R12/R13
// their side data.
#define ARGS4 \
	ARGSX4 \
	MOVQ aux+40(FP), DX \
	MOVQ auxstride+48(FP), AX \
	LEAQ (DX)(AX*1), R11 \
	LEAQ (R11)(AX*1), R12 \
	LEAQ (R12)(AX*1), R13

// ZEROOUT4: zero the 8 lanes of the 4 output rows of a kernel whose out and
// ostride arguments are at 56 and 64 (ARGS4's); ya is scratch.
#define ZEROOUT4(ya) \
	VXORPS ya, ya, ya \
	MOVQ out+56(FP), AX \
	VMOVUPS ya, (AX) \
	ADDQ ostride+64(FP), AX \
	VMOVUPS ya, (AX) \
	ADDQ ostride+64(FP), AX \
	VMOVUPS ya, (AX) \
	ADDQ ostride+64(FP), AX \
	VMOVUPS ya, (AX)

// EACH4: F(xr, yi, yj) for the 4 activation rows of an ARGS4 kernel (x in
// DI, R8, R9, R10; their sums in Y0..Y3 and Y4..Y7), AX at each one's
// output row in turn.
#define EACH4(F) \
	MOVQ out+56(FP), AX \
	F(DI, Y0, Y4) \
	ADDQ ostride+64(FP), AX \
	F(R8, Y1, Y5) \
	ADDQ ostride+64(FP), AX \
	F(R9, Y2, Y6) \
	ADDQ ostride+64(FP), AX \
	F(R10, Y3, Y7)

// EACHAUX4 is EACH4 over the side data (DX, R11, R12, R13) instead of the
// activation rows.
#define EACHAUX4(F) \
	MOVQ out+56(FP), AX \
	F(DX, Y0, Y4) \
	ADDQ ostride+64(FP), AX \
	F(R11, Y1, Y5) \
	ADDQ ostride+64(FP), AX \
	F(R12, Y2, Y6) \
	ADDQ ostride+64(FP), AX \
	F(R13, Y3, Y7)

// SUMMEM: the running sums at (AX) += (Y12 * d) * float(acc), d the f32 at
// 0(r); Y8 is scratch.
#define SUMMEM(r, acc) \
	VBROADCASTSS (r), Y8 \
	VMULPS Y8, Y12, Y8 \
	VCVTDQ2PS acc, acc \
	VMULPS acc, Y8, Y8 \
	VADDPS (AX), Y8, Y8 \
	VMOVUPS Y8, (AX)

// ARGSX4 is the part of ARGS4 before the side data (w, half, nb, x,
// xstride): SI, BX, CX, DI/R8/R9/R10.
#define ARGSX4 \
	MOVQ w+0(FP), SI \
	MOVQ half+8(FP), BX \
	SHLQ $3, BX \
	MOVQ nb+16(FP), CX \
	MOVQ x+24(FP), DI \
	MOVQ xstride+32(FP), AX \
	LEAQ (DI)(AX*1), R8 \
	LEAQ (R8)(AX*1), R9 \
	LEAQ (R9)(AX*1), R10

// NIBBLES5: the 32 bytes at addr as 8 rows' five-bit quants of one slice s
// (0..3): low nibbles or-ed with bit s of the fifth-bit plane in yh into Y4,
// high nibbles with bit 4+s into Y5 (each moved to bit 4). Y15 holds 0x0f
// bytes, Y14 0x10 bytes; yt is scratch. NIBBLES5R is NIBBLES5 into ylo and
// yhi.
#define NIBBLES5(s, addr, yh, yt) NIBBLES5R(s, addr, yh, Y4, Y5, yt)

#define NIBBLES5R(s, addr, yh, ylo, yhi, yt) \
	VMOVDQU addr, ylo \
	VPSRLW $4, ylo, yhi \
	VPAND Y15, ylo, ylo \
	VPAND Y15, yhi, yhi \
	VPSLLW $(4-s), yh, yt \
	VPAND Y14, yt, yt \
	VPOR yt, ylo, ylo \
	VPSRLW $s, yh, yt \
	VPAND Y14, yt, yt \
	VPOR yt, yhi, yhi

// IQ4LEVELS: the 32 bytes at addr as 8 rows' IQ4 nibbles, looked up in the
// codebook (Y10, both lanes): low elements' levels in Y4 (|level| in Y5),
// high ones' in Y6 (|level| in Y7). Y15 holds 0x0f bytes.
#define IQ4LEVELS(addr) \
	VMOVDQU addr, Y6 \
	VPAND Y15, Y6, Y4 \
	VPSRLW $4, Y6, Y6 \
	VPAND Y15, Y6, Y6 \
	VPSHUFB Y4, Y10, Y4 \
	VPABSB Y4, Y5 \
	VPSHUFB Y6, Y10, Y6 \
	VPABSB Y6, Y7

// IQ4CODEBOOK defines name as GGML's IQ4_NL codebook (gguf.IQ4NLValues), 16
// int8 bytes.
#define IQ4CODEBOOK(name) \
	DATA name+0(SB)/8, $0xF6EADDCFBFAD9881 \
	DATA name+8(SB)/8, $0x7159453526190D01 \
	GLOBL name(SB), RODATA|NOPTR, $16

// Macros shared by the AVX-512 kernels (#include "avx512_amd64.h").

// ZERO4 clears a 4-row kernel's sums: Z4..Z7 and Z20..Z23 (the second chain
// of each row, or its mins or offsets), at the start of a block or
// super-block.
#define ZERO4 \
	VPXORD Z4, Z4, Z4 \
	VPXORD Z5, Z5, Z5 \
	VPXORD Z6, Z6, Z6 \
	VPXORD Z7, Z7, Z7 \
	VPXORD Z20, Z20, Z20 \
	VPXORD Z21, Z21, Z21 \
	VPXORD Z22, Z22, Z22 \
	VPXORD Z23, Z23, Z23

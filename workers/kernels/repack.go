package kernels

import "github.com/bulkhead-ai/bulkhead/models/gguf"

// Interleaved weights for the AVX-512 VNNI kernels. Rows are taken in groups
// of packRows; for each 32-element block the group stores its 16 f16 scales,
// then the quants in 64-byte slices, each slice holding 4 bytes of every row:
// one VPDPBUSD multiplies a slice by 4 activation bytes broadcast to all rows
// and leaves every row's partial sum in its own lane, with no horizontal sums.
//
//   - Q8_0: 8 slices of bytes 4s..4s+3 of each row's quants, stored with the
//     sign bit flipped (q+128, unsigned), so the weight is the unsigned operand;
//     the kernel subtracts 128*sum(x) per block.
//   - Q4_0: 4 slices of bytes 4s..4s+3 of each row's 16 nibble bytes: the low
//     nibbles are elements 4s..4s+3, the high ones 16+4s..16+4s+3; the kernel
//     subtracts 8*sum(x) per block.
//
// The integer sum per (row, block) is exact, and the float update per block is
// the portable kernel's, so the packed products are bitwise equal to it.
const packRows = 16

// packBlock returns the bytes one packed group takes per 32-element block, or
// 0 when the type has no packed kernel.
func packBlock(t gguf.Type) int {
	switch t {
	case gguf.TypeQ8_0:
		return 2*packRows + 32*packRows
	case gguf.TypeQ4_0:
		return 2*packRows + 16*packRows
	}
	return 0
}

// repack returns m's weights in the interleaved layout, or nil when the type
// has no packed kernel or the rows are not a whole number of groups.
func repack(m Matrix) []byte {
	bb := packBlock(m.Type)
	if bb == 0 || m.Rows%packRows != 0 {
		return nil
	}
	nb, rs := m.Cols/32, m.rowSize()
	src := m.Type.TypeSize()
	qn := src - 2 // quant bytes per block
	out := make([]byte, m.Rows/packRows*nb*bb)
	for g := 0; g < m.Rows/packRows; g++ {
		for b := range nb {
			o := out[(g*nb+b)*bb : (g*nb+b+1)*bb]
			for i := range packRows {
				blk := m.Data[(g*packRows+i)*rs+b*src:]
				o[2*i], o[2*i+1] = blk[0], blk[1]
				for s := 0; s < qn/4; s++ {
					for c := range 4 {
						q := blk[2+4*s+c]
						if m.Type == gguf.TypeQ8_0 {
							q ^= 0x80
						}
						o[2*packRows+s*4*packRows+4*i+c] = q
					}
				}
			}
		}
	}
	return out
}

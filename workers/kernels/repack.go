package kernels

import "github.com/bulkhead-ai/bulkhead/models/gguf"

// Interleaved weights for the packed kernels (AVX-512 VNNI; AVX2 for Q4_K and
// Q6_K). Rows are taken in groups of packRows; for each 32-element block the
// group stores its 16 f16 scales, then the quants in 64-byte slices, each
// slice holding 4 bytes of every row: one VPDPBUSD multiplies a slice by 4
// activation bytes broadcast to all rows and leaves every row's partial sum in
// its own lane, with no horizontal sums. The AVX2 kernels read each slice as
// two 32-byte halves of 8 rows (VPMADDUBSW, then VPMADDWD).
//
//   - Q8_0: 8 slices of bytes 4s..4s+3 of each row's quants, stored with the
//     sign bit flipped (q+128, unsigned), so the weight is the unsigned operand;
//     the kernel subtracts 128*sum(x) per block.
//
//   - Q4_0: 4 slices of bytes 4s..4s+3 of each row's 16 nibble bytes: the low
//     nibbles are elements 4s..4s+3, the high ones 16+4s..16+4s+3; the kernel
//     subtracts 8*sum(x) per block.
//
//   - IQ4_NL: Q4_0's layout, the nibbles selecting codebook levels (AVX2
//     kernels only; the AVX-512 path runs them too).
//
//   - Q5_0: Q4_0's layout, then 64 bytes of fifth bits: byte c of row i holds
//     the bits of elements 4s+c at bit s and 16+4s+c at bit 4+s (s < 4); the
//     kernel subtracts 16*sum(x).
//
//   - Q4_K (per 256-element super-block, 2368 bytes): 16 f16 d, 16 f16 dmin,
//     the 8 sub-block scales as bytes [sub][row], the 8 mins as byte pairs
//     [pair][row][2] (VPMOVZXBW makes them the int16 pairs of one VPDPWSSD
//     per pair against the activations' 32-element sums), then per 32-byte
//     chunk j of quants 8 slices of bytes 4s..4s+3: low nibbles are
//     sub-block 2j, high nibbles 2j+1.
//
//   - Q4_1, Q5_1: 16 f16 d, 16 f16 m, then Q4_0's slices; Q5_1 adds Q5_0's
//     plane of fifth bits (AVX-512 kernels for 4 activation rows; the AVX2
//     kernels for one, on both paths).
//
//   - Q2_K (per super-block, 1344 bytes): 16 f16 d, 16 f16 dmin, the 16
//     sub-blocks' scale|min<<4 bytes [sub][row], then per half of 128
//     elements 8 slices of bytes 4s..4s+3 of each row's 32 quant bytes
//     (an AVX-512 kernel for 4 activation rows; the AVX2 kernel for one, on
//     both paths).
//
//   - IQ4_XS (per super-block, 2208 bytes): 16 f16 d, the 8 signed sub-block
//     scales as bytes [sub][row], then per 32-element sub-block Q4_0's 4
//     slices of nibbles (AVX2 kernels only; the AVX-512 path runs them too).
//
//   - Q5_K (per super-block, 2880 bytes): Q4_K's d, dmin, scales and mins,
//     then per 64-element chunk k 8 slices of the row's quant bytes s, s+8,
//     s+16, s+24 (low nibbles: sub-block 2k, high: 2k+1) and two planes of
//     their fifth bits in Q5_0's order; the activations are put in the same
//     order (laneOrder). Any order within a sub-block gives the same exact
//     sum; this one, each 4-byte slice holding a sub-block's elements 8
//     apart, is what kernels for GGML's generic lanes (elements l mod 8)
//     needed. AVX2 kernels, on both paths.
//
//   - Q3_K (per super-block, 1824 bytes): 16 f16 d, the signed scales of
//     sub-blocks 2c and 2c+1 as byte pairs [c][row][2] per 32-element chunk
//     c, then per lane s (Q5_K's order) the row's hmask bytes s, s+8, s+16,
//     s+24 inverted, then per half (128 elements) per lane its quant bytes
//     the same way (a slice's bytes 0-1 are elements of sub-block 2c, bytes
//     2-3 of 2c+1); the activations in Q5_K's order. AVX2 kernels, on both
//     paths.
//
//   - Q6_K (3360 bytes): 16 f16 d, the 16 signed scales [sub][row], then per
//     16-element sub-block 192 bytes: two nibble planes (slices 0|1<<4 and
//     2|3<<4, 4 elements a slice) and one plane of the top 2 bits, slice k's at
//     bits 2k; the kernel subtracts 32 times the activations' 16-element sums.
//
// The integer sum per (row, block) is exact, and the float update per block is
// the portable kernel's, so the packed products are bitwise equal to it.
const packRows = 16

// packs says whether path p has packed kernels for type t: Q8_0, Q4_0, Q5_0,
// IQ4_NL, Q4_K, Q6_K and IQ4_XS on the AVX-512 path (VPDPBUSD) and on the
// AVX2 path (gemm_avx2_amd64.s, kgemm_avx2_amd64.s); Q4_1, Q5_1, Q2_K, Q3_K
// and Q5_K on both with the AVX2 kernels.
func packs(p path, t gguf.Type) bool {
	return p >= pathAVX2 && packBlock(t) > 0
}

// avx2Packed says whether type t's packed kernels are the AVX2 ones on every
// vector path: the AVX-512 path has VPDPBUSD kernels only for Q8_0, Q4_0,
// Q5_0, IQ4_NL, Q4_K, Q6_K and IQ4_XS, for Q2_K both a one-row and a
// whole-group 4-row kernel (groupKW), and for Q4_1 and Q5_1 4-row ones
// (group2); Q3_K and Q5_K run the AVX2 kernels there.
func avx2Packed(t gguf.Type) bool {
	switch t {
	case gguf.TypeQ4_1, gguf.TypeQ5_1, gguf.TypeQ2_K, gguf.TypeQ3_K, gguf.TypeQ5_K:
		return true
	}
	return false
}

// packBlock returns the bytes one packed group takes per 32-element block, or
// 0 when the type has no packed kernel.
func packBlock(t gguf.Type) int {
	switch t {
	case gguf.TypeQ8_0:
		return 2*packRows + 32*packRows
	case gguf.TypeQ4_0, gguf.TypeIQ4_NL:
		return 2*packRows + 16*packRows
	case gguf.TypeQ4_1:
		return 4*packRows + 16*packRows
	case gguf.TypeQ5_1:
		return 4*packRows + 20*packRows
	case gguf.TypeQ5_0:
		return 2*packRows + 20*packRows
	case gguf.TypeQ4_K:
		return 4*packRows + 8*packRows + 8*packRows + 128*packRows
	case gguf.TypeQ6_K:
		return 2*packRows + 16*packRows + 192*packRows
	case gguf.TypeIQ4_XS:
		return 2*packRows + 8*packRows + 128*packRows
	case gguf.TypeQ2_K:
		return 4*packRows + 16*packRows + 64*packRows
	case gguf.TypeQ5_K:
		return 4*packRows + 8*packRows + 8*packRows + 4*40*packRows
	case gguf.TypeQ3_K:
		return 2*packRows + 16*packRows + 32*packRows + 64*packRows
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
	fill := packFill(m.Type)
	nb, rs, src := m.Cols/m.Type.BlockSize(), m.rowSize(), m.Type.TypeSize()
	out := hugeMake(m.Rows / packRows * nb * bb)
	defer hugeCollapse(out)
	for g := 0; g < m.Rows/packRows; g++ {
		for b := range nb {
			o := out[(g*nb+b)*bb : (g*nb+b+1)*bb]
			for i := range packRows {
				fill(o, m.Data[(g*packRows+i)*rs+b*src:][:src], i)
			}
		}
	}
	return out
}

// packFill returns the function that writes one row's block blk as row i of
// its group's packed block o, for a type packBlock gives a layout.
func packFill(t gguf.Type) func(o, blk []byte, i int) {
	switch t {
	case gguf.TypeQ8_0:
		return func(o, blk []byte, i int) { packPlain(o, blk, i, 0x80) }
	case gguf.TypeQ4_0, gguf.TypeIQ4_NL:
		return func(o, blk []byte, i int) { packPlain(o, blk, i, 0) }
	case gguf.TypeQ5_0:
		return packQ5_0
	case gguf.TypeQ4_1, gguf.TypeQ5_1:
		return packQx1
	case gguf.TypeQ2_K:
		return packQ2K
	case gguf.TypeQ3_K:
		return packQ3K
	case gguf.TypeQ4_K:
		return packQ4K
	case gguf.TypeQ5_K:
		return packQ5K
	case gguf.TypeQ6_K:
		return packQ6K
	case gguf.TypeIQ4_XS:
		return packIQ4XS
	}
	panic("kernels: no packed layout for " + t.String())
}

// packPlain packs a Q8_0, Q4_0 or IQ4_NL block: its f16 scale, then its
// quant bytes 4 at a time into the slices, xor-ed with flip (Q8_0's sign bit).
func packPlain(o, blk []byte, i int, flip byte) {
	o[2*i], o[2*i+1] = blk[0], blk[1]
	for s := 0; s < (len(blk)-2)/4; s++ {
		for c := range 4 {
			o[2*packRows+s*4*packRows+4*i+c] = blk[2+4*s+c] ^ flip
		}
	}
}

// packQ4K packs a Q4_K super-block (packFill).
func packQ4K(o, blk []byte, i int) {
	o[2*i], o[2*i+1] = blk[0], blk[1]
	o[32+2*i], o[32+2*i+1] = blk[2], blk[3]
	for sub := range 8 {
		sc, mn := q4KScaleMin(sub, blk[4:16])
		o[64+sub*packRows+i] = sc
		o[192+(sub/2)*2*packRows+2*i+sub%2] = mn
	}
	for j := range 4 {
		for s := range 8 {
			copy(o[320+j*512+s*64+4*i:][:4], blk[16+32*j+4*s:][:4])
		}
	}
}

// packQ6K packs a Q6_K super-block.
func packQ6K(o, blk []byte, i int) {
	var v [256]byte
	o[2*i], o[2*i+1] = blk[208], blk[209]
	q6KValues(&v, blk)
	for sb := range 16 {
		o[32+sb*packRows+i] = blk[192+sb]
		p := o[288+192*sb:]
		for c := range 4 {
			e := 16*sb + c
			p[4*i+c] = v[e]&15 | v[e+4]<<4
			p[64+4*i+c] = v[e+8]&15 | v[e+12]<<4
			var h byte
			for k := range 4 {
				h |= (v[e+4*k] >> 4 & 3) << (2 * k)
			}
			p[128+4*i+c] = h
		}
	}
}

// q6KValues unpacks one Q6_K super-block's 256 quants to 0..63.
func q6KValues(v *[256]byte, blk []byte) {
	for h := range 2 {
		ql, qh := blk[h*64:h*64+64], blk[128+h*32:128+h*32+32]
		for l := range 32 {
			v[h*128+l] = ql[l]&15 | (qh[l]&3)<<4
			v[h*128+l+32] = ql[l+32]&15 | (qh[l]>>2&3)<<4
			v[h*128+l+64] = ql[l]>>4 | (qh[l]>>4&3)<<4
			v[h*128+l+96] = ql[l+32]>>4 | (qh[l]>>6&3)<<4
		}
	}
}

// packQ5_0 packs a Q5_0 block.
func packQ5_0(o, blk []byte, i int) {
	o[2*i], o[2*i+1] = blk[0], blk[1]
	for s := range 4 {
		copy(o[32+s*64+4*i:][:4], blk[6+4*s:][:4])
	}
	fifthBits(o[288+4*i:][:4], blk[2:6])
}

// packIQ4XS packs an IQ4_XS super-block.
func packIQ4XS(o, blk []byte, i int) {
	o[2*i], o[2*i+1] = blk[0], blk[1]
	sh := uint16(blk[2]) | uint16(blk[3])<<8
	for ib := range 8 {
		o[32+ib*packRows+i] = byte(int8(gguf.IQ4XSScale(ib, sh, blk[4:8])))
		for s := range 4 {
			copy(o[160+256*ib+64*s+4*i:][:4], blk[8+16*ib+4*s:][:4])
		}
	}
}

// fifthBits writes the packed plane's 4 bytes for one row of a Q5_0 or Q5_1
// block from its qh word: byte c holds the bits of elements 4s+c at bit s and
// 16+4s+c at bit 4+s.
func fifthBits(dst, qhb []byte) {
	qh := uint32(qhb[0]) | uint32(qhb[1])<<8 | uint32(qhb[2])<<16 | uint32(qhb[3])<<24
	for c := range 4 {
		var h byte
		for s := range 4 {
			h |= byte(qh>>(4*s+c)&1) << s
			h |= byte(qh>>(16+4*s+c)&1) << (4 + s)
		}
		dst[c] = h
	}
}

// packQx1 packs a Q4_1 or Q5_1 block (told apart by their sizes, 20 and 24).
func packQx1(o, blk []byte, i int) {
	q := len(blk) - 16 // the nibbles' offset: 4 (Q4_1) or 8 (Q5_1)
	copy(o[2*i:][:2], blk[0:2])
	copy(o[32+2*i:][:2], blk[2:4])
	for s := range 4 {
		copy(o[64+s*64+4*i:][:4], blk[q+4*s:][:4])
	}
	if q == 8 { // Q5_1: its fifth bits
		fifthBits(o[320+4*i:][:4], blk[4:8])
	}
}

// packQ2K packs a Q2_K super-block.
func packQ2K(o, blk []byte, i int) {
	copy(o[2*i:][:2], blk[80:82])
	copy(o[32+2*i:][:2], blk[82:84])
	for sub := range 16 {
		o[64+sub*packRows+i] = blk[sub]
	}
	for h := range 2 {
		for s := range 8 {
			copy(o[320+512*h+64*s+4*i:][:4], blk[16+32*h+4*s:][:4])
		}
	}
}

// packQ5K packs a Q5_K super-block: slice s of
// chunk k holds the row's quant bytes s, s+8, s+16, s+24 of that chunk, whose
// low nibbles are lane s of sub-block 2k and high nibbles lane s of 2k+1.
func packQ5K(o, blk []byte, i int) {
	copy(o[2*i:][:2], blk[0:2])
	copy(o[32+2*i:][:2], blk[2:4])
	for sub := range 8 {
		sc, mn := q4KScaleMin(sub, blk[4:16])
		o[64+sub*packRows+i] = sc
		o[192+(sub/2)*2*packRows+2*i+sub%2] = mn
	}
	qh, qs := blk[16:48], blk[48:176]
	for k := range 4 {
		p := o[320+640*k:][:640]
		for s := range 8 {
			for c := range 4 {
				l := s + 8*c
				p[64*s+4*i+c] = qs[32*k+l]
				lo, hi := qh[l]>>(2*k)&1, qh[l]>>(2*k+1)&1
				p[512+64*(s/4)+4*i+c] |= lo<<(s%4) | hi<<(4+s%4)
			}
		}
	}
}

// packQ3K packs a Q3_K super-block: lane s of a
// half's quant bytes and of the hmask as Q5_K's slices, the hmask inverted.
func packQ3K(o, blk []byte, i int) {
	copy(o[2*i:][:2], blk[108:110])
	sc := q3KScales(blk[96:108])
	for c := range 8 {
		o[32+32*c+2*i] = byte(int8(sc[2*c]))
		o[32+32*c+2*i+1] = byte(int8(sc[2*c+1]))
	}
	hm, qs := blk[0:32], blk[32:96]
	for s := range 8 {
		for c := range 4 {
			l := s + 8*c
			o[288+64*s+4*i+c] = ^hm[l]
			o[800+64*s+4*i+c] = qs[l]
			o[1312+64*s+4*i+c] = qs[32+l]
		}
	}
}

// laneOrder reorders each 32-element sub-block of Q8_K activations as the
// packed Q3_K and Q5_K layouts order their quants: position 4s+c takes
// element s+8c.
func laneOrder(x *q8K) {
	for sub := range 8 {
		q := x.qs[32*sub : 32*sub+32]
		var t [32]int8
		for s := range 8 {
			for c := range 4 {
				t[4*s+c] = q[s+8*c]
			}
		}
		copy(q, t[:])
	}
}

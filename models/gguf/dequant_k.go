package gguf

import "encoding/binary"

// K-quant super-blocks of 256 elements (and IQ4_XS, laid out alike). Products
// are converted to float32 explicitly wherever GGML's C rounds them, so the
// compiler cannot fuse a multiply with the following add.

// scaleMinK4 unpacks sub-block j's 6-bit scale and min from a Q4_K block's 12
// scale bytes: sub-blocks 0..3 keep theirs in the low 6 bits of bytes j and j+4;
// sub-blocks 4..7 keep their low 4 bits in byte j+4 (scale low nibble, min high
// nibble) and their top 2 bits in the top bits of bytes j-4 (scale) and j (min).
func scaleMinK4(j int, q []byte) (sc, m uint8) {
	if j < 4 {
		return q[j] & 63, q[j+4] & 63
	}
	return q[j+4]&0xf | (q[j-4]>>6)<<4, q[j+4]>>4 | (q[j]>>6)<<4
}

// Q4_K super-block of 256: f16 d, f16 dmin, 12 bytes of packed 6-bit scales and
// mins for 8 sub-blocks of 32, then 128 bytes of nibbles. Each 32 bytes of
// nibbles hold two sub-blocks: low nibbles the first, high nibbles the second.
// x = d*scale*q - dmin*min.
func dequantQ4K(data []byte, dst []float32) {
	const bs = 2 + 2 + 12 + QKK/2
	for i := 0; i < len(dst)/QKK; i++ {
		b := (*[bs]byte)(data[i*bs:])
		y := (*[QKK]float32)(dst[i*QKK:])
		d := F16ToF32(binary.LittleEndian.Uint16(b[0:]))
		dmin := F16ToF32(binary.LittleEndian.Uint16(b[2:]))
		scales := b[4:16]
		qs := b[16:bs]
		for k := range 4 { // 64 elements, two sub-blocks, per pass
			sc, m := scaleMinK4(2*k, scales)
			d1, m1 := d*float32(sc), dmin*float32(m)
			sc, m = scaleMinK4(2*k+1, scales)
			d2, m2 := d*float32(sc), dmin*float32(m)
			q := qs[32*k : 32*k+32]
			lo, hi := y[64*k:64*k+32], y[64*k+32:64*k+64]
			for l := range 32 {
				// Explicit conversions keep each product rounded, as GGML's C
				// does, instead of letting the compiler fuse a multiply-add.
				lo[l] = float32(d1*float32(q[l]&0xf)) - m1
				hi[l] = float32(d2*float32(q[l]>>4)) - m2
			}
		}
	}
}

// Q6_K super-block of 256: 128 bytes of low 4 bits, 64 bytes of high 2 bits, 16
// int8 scales (one per 16 elements), f16 d. Each half of 128 elements uses 64 low
// bytes, 32 high bytes and 8 scales; x = d*scale*(q-32).
func dequantQ6K(data []byte, dst []float32) {
	const bs = QKK/2 + QKK/4 + QKK/16 + 2
	for i := 0; i < len(dst)/QKK; i++ {
		b := (*[bs]byte)(data[i*bs:])
		y := (*[QKK]float32)(dst[i*QKK:])
		d := F16ToF32(binary.LittleEndian.Uint16(b[bs-2:]))
		for h := range 2 {
			ql := b[64*h : 64*h+64]
			qh := b[QKK/2+32*h : QKK/2+32*h+32]
			sc := b[QKK/2+QKK/4+8*h : QKK/2+QKK/4+8*h+8]
			yh := y[128*h : 128*h+128]
			for l := range 32 {
				is := l / 16
				q1 := int(ql[l]&0xf|(qh[l]&3)<<4) - 32
				q2 := int(ql[l+32]&0xf|(qh[l]>>2&3)<<4) - 32
				q3 := int(ql[l]>>4|(qh[l]>>4&3)<<4) - 32
				q4 := int(ql[l+32]>>4|(qh[l]>>6&3)<<4) - 32
				yh[l] = d * float32(int8(sc[is])) * float32(q1)
				yh[l+32] = d * float32(int8(sc[is+2])) * float32(q2)
				yh[l+64] = d * float32(int8(sc[is+4])) * float32(q3)
				yh[l+96] = d * float32(int8(sc[is+6])) * float32(q4)
			}
		}
	}
}

// Q2_K super-block: 16 scale bytes (low nibble scale, high nibble min, one per
// 16 elements), 64 bytes of 2-bit quants, f16 d, f16 dmin. Each half of 128
// elements reads 32 quant bytes four times, at shifts 0, 2, 4, 6; every 32
// elements so read are two sub-blocks of 16 (bytes 0..15 and 16..31).
// x = (d*scale)*q - dmin*min.
func dequantQ2K(data []byte, dst []float32) {
	const bs = QKK/16 + QKK/4 + 2 + 2
	for i := 0; i < len(dst)/QKK; i++ {
		b := (*[bs]byte)(data[i*bs:])
		y := (*[QKK]float32)(dst[i*QKK:])
		sc := b[0:16]
		d := F16ToF32(binary.LittleEndian.Uint16(b[80:]))
		dmin := F16ToF32(binary.LittleEndian.Uint16(b[82:]))
		for h := range 2 {
			q := b[16+32*h : 16+32*h+32]
			for j := range 4 {
				shift := 2 * j
				for s := range 2 { // two sub-blocks of 16
					c := sc[8*h+2*j+s]
					dl, ml := d*float32(c&0xf), dmin*float32(c>>4)
					o := y[128*h+32*j+16*s : 128*h+32*j+16*s+16]
					for l := range 16 {
						o[l] = float32(dl*float32(q[16*s+l]>>shift&3)) - ml
					}
				}
			}
		}
	}
}

// q3KScale returns sub-block j's (0..15) signed scale from a Q3_K block's 12
// scale bytes: its low 4 bits are the low (j < 8) or high nibble of byte j%8,
// its top 2 bits are bits 2*(j/4), 2*(j/4)+1 of byte 8+j%4; stored offset by 32.
func q3KScale(j int, s []byte) int {
	lo := s[j%8] & 0xf
	if j >= 8 {
		lo = s[j%8] >> 4
	}
	hi := s[8+j%4] >> (2 * (j / 4)) & 3
	return int(lo|hi<<4) - 32
}

// Q3_K super-block: 32 bytes of high bits (hmask), 64 bytes of low 2-bit
// quants, 12 bytes of packed 6-bit scales (one per 16 elements), f16 d. The
// quant bytes are walked as in Q2_K; element e's high bit is bit e/32 of
// hmask[e%32], and a clear high bit subtracts 4. x = (d*scale)*q.
func dequantQ3K(data []byte, dst []float32) {
	const bs = QKK/8 + QKK/4 + 12 + 2
	for i := 0; i < len(dst)/QKK; i++ {
		b := (*[bs]byte)(data[i*bs:])
		y := (*[QKK]float32)(dst[i*QKK:])
		hm := b[0:32]
		scales := b[96:108]
		d := F16ToF32(binary.LittleEndian.Uint16(b[108:]))
		for h := range 2 {
			q := b[32+32*h : 32+32*h+32]
			for j := range 4 {
				shift := 2 * j
				m := uint8(1) << (4*h + j)
				for s := range 2 {
					dl := d * float32(q3KScale(8*h+2*j+s, scales))
					o := y[128*h+32*j+16*s : 128*h+32*j+16*s+16]
					for l := range 16 {
						v := int(q[16*s+l] >> shift & 3)
						if hm[16*s+l]&m == 0 {
							v -= 4
						}
						o[l] = dl * float32(v)
					}
				}
			}
		}
	}
}

// Q5_K super-block: f16 d, f16 dmin, 12 bytes of scales and mins packed as in
// Q4_K, 32 bytes of fifth bits, 128 bytes of nibbles walked as in Q4_K. Element
// 64*k+32*s+l takes bit 2*k+s of qh[l] as its fifth bit.
// x = (d*scale)*q - dmin*min.
func dequantQ5K(data []byte, dst []float32) {
	const bs = 2 + 2 + 12 + QKK/8 + QKK/2
	for i := 0; i < len(dst)/QKK; i++ {
		b := (*[bs]byte)(data[i*bs:])
		y := (*[QKK]float32)(dst[i*QKK:])
		d := F16ToF32(binary.LittleEndian.Uint16(b[0:]))
		dmin := F16ToF32(binary.LittleEndian.Uint16(b[2:]))
		scales := b[4:16]
		qh := b[16:48]
		qs := b[48:bs]
		for k := range 4 {
			sc, m := scaleMinK4(2*k, scales)
			d1, m1 := d*float32(sc), dmin*float32(m)
			sc, m = scaleMinK4(2*k+1, scales)
			d2, m2 := d*float32(sc), dmin*float32(m)
			u1, u2 := uint8(1)<<(2*k), uint8(2)<<(2*k)
			q := qs[32*k : 32*k+32]
			lo, hi := y[64*k:64*k+32], y[64*k+32:64*k+64]
			for l := range 32 {
				v1, v2 := q[l]&0xf, q[l]>>4
				if qh[l]&u1 != 0 {
					v1 += 16
				}
				if qh[l]&u2 != 0 {
					v2 += 16
				}
				lo[l] = float32(d1*float32(v1)) - m1
				hi[l] = float32(d2*float32(v2)) - m2
			}
		}
	}
}

// IQ4XSScale returns sub-block j's (0..7) scale from an IQ4_XS block: its low 4
// bits from nibble j of scales_l, its top 2 bits from bits 2j, 2j+1 of
// scales_h; stored offset by 32.
func IQ4XSScale(j int, scalesH uint16, scalesL []byte) int {
	lo := scalesL[j/2] >> (4 * (j % 2)) & 0xf
	hi := uint8(scalesH>>(2*j)) & 3
	return int(lo|hi<<4) - 32
}

// IQ4_XS super-block: f16 d, u16 scales_h, 4 bytes scales_l (a 6-bit scale per
// 32 elements), then 8 groups of 16 bytes whose low nibbles are elements 0..15
// and high nibbles 16..31 of that group, each selecting a codebook level.
// x = (d*scale)*level.
func dequantIQ4XS(data []byte, dst []float32) {
	const bs = 2 + 2 + QKK/64 + QKK/2
	for i := 0; i < len(dst)/QKK; i++ {
		b := (*[bs]byte)(data[i*bs:])
		y := (*[QKK]float32)(dst[i*QKK:])
		d := F16ToF32(binary.LittleEndian.Uint16(b[0:]))
		sh := binary.LittleEndian.Uint16(b[2:])
		sl := b[4:8]
		for ib := range 8 {
			dl := d * float32(IQ4XSScale(ib, sh, sl))
			q := b[8+16*ib : 8+16*ib+16]
			o := y[32*ib : 32*ib+32]
			for j := range 16 {
				o[j] = dl * float32(IQ4NLValues[q[j]&0xf])
				o[j+16] = dl * float32(IQ4NLValues[q[j]>>4])
			}
		}
	}
}

package kernels

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/bulkhead-ai/bulkhead/models/gguf"
)

// allTypes are the weight types MatMul supports, with a column count that
// exercises each one (a float tail of k%8 != 0; several quant blocks).
var allTypes = []struct {
	t    gguf.Type
	cols int
}{
	{gguf.TypeF32, 203},
	{gguf.TypeF32, 576}, // a multiple of 16: the AVX-512 16-lane kernels
	{gguf.TypeF16, 203},
	{gguf.TypeF16, 576}, // a multiple of 8: the AVX2 4x3 kernel's whole tiles
	{gguf.TypeBF16, 203},
	{gguf.TypeBF16, 576},
	{gguf.TypeQ8_0, 160},
	{gguf.TypeQ4_0, 160},
	{gguf.TypeQ4_1, 160},
	{gguf.TypeQ5_0, 160},
	{gguf.TypeQ5_1, 160},
	{gguf.TypeIQ4_NL, 160},
	{gguf.TypeQ2_K, 512},
	{gguf.TypeQ3_K, 512},
	{gguf.TypeQ4_K, 512},
	{gguf.TypeQ5_K, 512},
	{gguf.TypeQ6_K, 512},
	{gguf.TypeIQ4_XS, 512},
}

func putHalf(b []byte, f float32) {
	h := gguf.F32ToF16(f)
	b[0], b[1] = byte(h), byte(h>>8)
}

// randMatrix makes a rows x cols matrix of type t with random contents of a
// realistic magnitude.
func randMatrix(t *testing.T, rng *rand.Rand, typ gguf.Type, rows, cols int) Matrix {
	t.Helper()
	rs, err := typ.RowSize(cols)
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, rows*rs)
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	for r := range rows {
		row := data[r*rs : (r+1)*rs]
		switch typ {
		case gguf.TypeF32:
			for k := range cols {
				v := math.Float32bits(float32(rng.NormFloat64()))
				row[4*k], row[4*k+1], row[4*k+2], row[4*k+3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
			}
		case gguf.TypeF16:
			for k := range cols {
				putHalf(row[2*k:], float32(rng.NormFloat64()))
			}
		case gguf.TypeBF16:
			for k := range cols {
				h := gguf.F32ToBF16(float32(rng.NormFloat64()))
				row[2*k], row[2*k+1] = byte(h), byte(h>>8)
			}
		case gguf.TypeQ8_0:
			for b := 0; b < cols/32; b++ {
				putHalf(row[b*34:], float32(0.001+0.02*rng.Float64()))
			}
		case gguf.TypeQ4_0:
			for b := 0; b < cols/32; b++ {
				putHalf(row[b*18:], float32(0.001+0.02*rng.Float64()))
			}
		case gguf.TypeQ4_K:
			for b := 0; b < cols/256; b++ {
				putHalf(row[b*144:], float32(0.0005+0.005*rng.Float64()))
				putHalf(row[b*144+2:], float32(0.0005+0.005*rng.Float64()))
			}
		case gguf.TypeQ6_K:
			for b := 0; b < cols/256; b++ {
				putHalf(row[b*210+208:], float32(0.0005+0.005*rng.Float64()))
			}
		default:
			// Other types: a finite scale (and min) at their f16 offsets.
			bs := typ.TypeSize()
			for b := 0; b < cols/typ.BlockSize(); b++ {
				blk := row[b*bs : (b+1)*bs]
				d := float32(0.001 + 0.02*rng.Float64())
				switch typ {
				case gguf.TypeQ4_1, gguf.TypeQ5_1:
					putHalf(blk, d)
					putHalf(blk[2:], float32(0.3*rng.NormFloat64()))
				case gguf.TypeQ5_0, gguf.TypeIQ4_NL:
					putHalf(blk, d)
				case gguf.TypeQ2_K:
					putHalf(blk[80:], d/4)
					putHalf(blk[82:], d/4)
				case gguf.TypeQ3_K:
					putHalf(blk[108:], d/4)
				case gguf.TypeQ5_K:
					putHalf(blk, d/8)
					putHalf(blk[2:], d/8)
				case gguf.TypeIQ4_XS:
					putHalf(blk, d/32)
				default:
					t.Fatalf("randMatrix: no layout for %s", typ)
				}
			}
		}
	}
	m, err := Active().NewMatrix(typ, rows, cols, data)
	if err != nil {
		t.Fatal(err)
	}
	// Pack whatever the active path, so a test of the AVX-512 path runs it
	// even when BULKHEAD_KERNELS forces the process lower.
	m.pack = repack(m)
	return m
}

func randVec(rng *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(rng.NormFloat64())
	}
	return v
}

func rd16(b []byte) uint16 { return uint16(b[0]) | uint16(b[1])<<8 }

// refRow dequantizes weight row i in float64, written independently of the
// package: element by element from the GGML block layouts for the types with
// assembly, and through gguf.Dequantize (checked bit for bit against llama.cpp
// there) for the others.
func refRow(m Matrix, i int) []float64 {
	rs, _ := m.Type.RowSize(m.Cols)
	w := m.Data[i*rs : (i+1)*rs]
	out := make([]float64, m.Cols)
	switch m.Type {
	case gguf.TypeF32, gguf.TypeF16, gguf.TypeBF16, gguf.TypeQ8_0, gguf.TypeQ4_0, gguf.TypeQ4_K, gguf.TypeQ6_K:
	default:
		f := make([]float32, m.Cols)
		if err := gguf.Dequantize(m.Type, w, f); err != nil {
			panic(err)
		}
		for k, v := range f {
			out[k] = float64(v)
		}
		return out
	}
	h := func(b []byte) float64 { return float64(gguf.F16ToF32(rd16(b))) }
	for k := range out {
		switch m.Type {
		case gguf.TypeF32:
			out[k] = float64(math.Float32frombits(uint32(w[4*k]) | uint32(w[4*k+1])<<8 | uint32(w[4*k+2])<<16 | uint32(w[4*k+3])<<24))
		case gguf.TypeF16:
			out[k] = h(w[2*k:])
		case gguf.TypeBF16:
			out[k] = float64(gguf.BF16ToF32(rd16(w[2*k:])))
		case gguf.TypeQ8_0:
			blk := w[k/32*34:]
			out[k] = h(blk) * float64(int8(blk[2+k%32]))
		case gguf.TypeQ4_0:
			blk := w[k/32*18:]
			j := k % 32
			q := blk[2+j%16]
			if j >= 16 {
				q >>= 4
			}
			out[k] = h(blk) * float64(int(q&15)-8)
		case gguf.TypeQ4_K:
			blk := w[k/256*144:]
			j := k % 256
			sub := j / 32 // sub-block of 32, scale index
			q := blk[16+j/64*32+j%32]
			if sub%2 == 1 {
				q >>= 4
			}
			sc := blk[4:16]
			var s, mn int
			if sub < 4 {
				s, mn = int(sc[sub]&63), int(sc[sub+4]&63)
			} else {
				s = int(sc[sub+4]&15) | int(sc[sub-4]>>6)<<4
				mn = int(sc[sub+4]>>4) | int(sc[sub]>>6)<<4
			}
			out[k] = h(blk)*float64(s)*float64(q&15) - h(blk[2:])*float64(mn)
		case gguf.TypeQ6_K:
			blk := w[k/256*210:]
			j := k % 256
			half, l := j/128, j%128
			ql := blk[half*64:]
			qh := blk[128+half*32:]
			quad := l / 32 // which of the four 32-runs in this half
			ll := l % 32
			var lo4 int
			switch quad {
			case 0:
				lo4 = int(ql[ll] & 15)
			case 1:
				lo4 = int(ql[ll+32] & 15)
			case 2:
				lo4 = int(ql[ll] >> 4)
			case 3:
				lo4 = int(ql[ll+32] >> 4)
			}
			hi2 := int(qh[ll]>>(2*quad)) & 3
			q := lo4 | hi2<<4 - 32
			sc := int8(blk[192+half*8+quad*2+ll/16])
			out[k] = h(blk[208:]) * float64(sc) * float64(q)
		}
	}
	return out
}

// checkClose fails unless |got-want| <= tol * scale.
func checkClose(t *testing.T, what string, got float32, want, scale, tol float64) {
	t.Helper()
	if d := math.Abs(float64(got) - want); !(d <= tol*scale) {
		t.Fatalf("%s: got %g, want %g (diff %g > %g)", what, got, want, d, tol*scale)
	}
}

// filled returns n bytes, each from f.
func filled(n int, f func() byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = f()
	}
	return b
}

// eachSet runs f as one subtest per kernel set this CPU and build have,
// named for the set: every path of an op in one process.
func eachSet(t *testing.T, f func(t *testing.T, ks Set)) {
	t.Helper()
	for _, ks := range Available() {
		t.Run(ks.String(), func(t *testing.T) { f(t, ks) })
	}
}

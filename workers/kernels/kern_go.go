package kernels

import "github.com/bulkhead-ai/bulkhead/models/gguf"

// Portable kernels. They are the only path on non-amd64 builds and with the
// purego tag, and the reference the assembly is tested against.
//
// Float kernels keep one accumulator of 8 lanes per output element, advanced over
// k in steps of 8, reduced as ((a0+a1)+(a2+a3)) + ((a4+a5)+(a6+a7)); the k%8
// tail is then added element by element. The assembly follows the same order
// (with fused multiply-adds), so the two paths agree closely but not bitwise.
// Explicit float32 conversions keep the compiler from fusing here.

// hsum8 reduces 8 lanes in the fixed order shared with the assembly.
func hsum8(a *[8]float32) float32 {
	return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]))
}

// dotF32Go is the portable f32 dot product with the kernel accumulation order.
func dotF32Go(w, x []float32) float32 {
	n := len(x)
	w = w[:n]
	var acc [8]float32
	k := 0
	for ; k+8 <= n; k += 8 {
		ww, xx := w[k:k+8:k+8], x[k:k+8:k+8]
		for l := range 8 {
			acc[l] = acc[l] + float32(ww[l]*xx[l])
		}
	}
	s := hsum8(&acc)
	for ; k < n; k++ {
		s = s + float32(w[k]*x[k])
	}
	return s
}

// dotF16Go is the portable f16·f16 dot product (both converted to f32).
func dotF16Go(w, x []uint16) float32 {
	n := len(x)
	w = w[:n]
	var acc [8]float32
	k := 0
	for ; k+8 <= n; k += 8 {
		ww, xx := w[k:k+8:k+8], x[k:k+8:k+8]
		for l := range 8 {
			acc[l] = acc[l] + float32(gguf.F16ToF32(ww[l])*gguf.F16ToF32(xx[l]))
		}
	}
	s := hsum8(&acc)
	for ; k < n; k++ {
		s = s + float32(gguf.F16ToF32(w[k])*gguf.F16ToF32(x[k]))
	}
	return s
}

// dotBF16Go is the portable bf16·f32 dot product.
func dotBF16Go(w []uint16, x []float32) float32 {
	n := len(x)
	w = w[:n]
	var acc [8]float32
	k := 0
	for ; k+8 <= n; k += 8 {
		ww, xx := w[k:k+8:k+8], x[k:k+8:k+8]
		for l := range 8 {
			acc[l] = acc[l] + float32(gguf.BF16ToF32(ww[l])*xx[l])
		}
	}
	s := hsum8(&acc)
	for ; k < n; k++ {
		s = s + float32(gguf.BF16ToF32(w[k])*x[k])
	}
	return s
}

// half reads a little-endian f16 at b[0:2] as float32.
func half(b []byte) float32 { return gguf.F16ToF32(uint16(b[0]) | uint16(b[1])<<8) }

// dotQ8Go is the Q8_0 weight row · Q8_0 activation row product over nb blocks:
// sum += (d_w*d_x) * isum per block, in block order. The assembly is bitwise equal.
func dotQ8Go(w, x []byte, nb int) float32 {
	var sum float32
	for b := range nb {
		wb := w[b*34 : b*34+34 : b*34+34]
		xb := x[b*34 : b*34+34 : b*34+34]
		var isum int32
		for j := 2; j < 34; j++ {
			isum += int32(int8(wb[j])) * int32(int8(xb[j]))
		}
		d := float32(half(wb) * half(xb))
		sum = sum + float32(d*float32(isum))
	}
	return sum
}

// dotQ4Go is the Q4_0 weight row · Q8_0 activation row product over nb blocks,
// with the same float order as dotQ8Go.
func dotQ4Go(w, x []byte, nb int) float32 {
	var sum float32
	for b := range nb {
		wb := w[b*18 : b*18+18 : b*18+18]
		xb := x[b*34 : b*34+34 : b*34+34]
		var isum int32
		for j := range 16 {
			q := wb[2+j]
			isum += (int32(q&15) - 8) * int32(int8(xb[2+j]))
			isum += (int32(q>>4) - 8) * int32(int8(xb[18+j]))
		}
		d := float32(half(wb) * half(xb))
		sum = sum + float32(d*float32(isum))
	}
	return sum
}

// dotF16F32Go is the portable f16 weight · f32 activation product, the fallback
// of the F16 MatMul kernel (whose activations are already rounded to f16).
func dotF16F32Go(w []uint16, x []float32) float32 {
	n := len(x)
	w = w[:n]
	var acc [8]float32
	k := 0
	for ; k+8 <= n; k += 8 {
		ww, xx := w[k:k+8:k+8], x[k:k+8:k+8]
		for l := range 8 {
			acc[l] = acc[l] + float32(gguf.F16ToF32(ww[l])*xx[l])
		}
	}
	s := hsum8(&acc)
	for ; k < n; k++ {
		s = s + float32(gguf.F16ToF32(w[k])*x[k])
	}
	return s
}

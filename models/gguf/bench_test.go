package gguf

import "testing"

const benchN = 1 << 16 // elements per call: a 256x256 matrix

func benchDequantize(b *testing.B, typ Type, data []byte) {
	dst := make([]float32, benchN)
	b.SetBytes(benchN * 4) // float32s produced
	for b.Loop() {
		if err := Dequantize(typ, data, dst); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDequantizeQ8_0(b *testing.B) {
	benchDequantize(b, TypeQ8_0, QuantizeQ8_0(normals(1, benchN, 0.02)))
}

func BenchmarkDequantizeQ4_0(b *testing.B) {
	benchDequantize(b, TypeQ4_0, QuantizeQ4_0(normals(1, benchN, 0.02)))
}

func BenchmarkDequantizeQ4_K(b *testing.B) {
	var q [QKK]uint8
	for i := range q {
		q[i] = uint8(i % 16)
	}
	var data []byte
	for range benchN / QKK {
		data = append(data, packQ4K(0.01, 0.001, [8]uint8{1, 2, 3, 4, 50, 60, 7, 8}, [8]uint8{9, 8, 7, 6, 45, 44, 3, 2}, q)...)
	}
	benchDequantize(b, TypeQ4_K, data)
}

func BenchmarkDequantizeQ6_K(b *testing.B) {
	var q [QKK]uint8
	for i := range q {
		q[i] = uint8(i % 64)
	}
	var data []byte
	for range benchN / QKK {
		data = append(data, packQ6K(0.01, [16]int8{1, -2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}, q)...)
	}
	benchDequantize(b, TypeQ6_K, data)
}

func BenchmarkQuantizeQ8_0(b *testing.B) {
	src := normals(1, benchN, 0.02)
	dst := make([]byte, benchN/QK*34)
	b.SetBytes(benchN * 4) // float32s consumed
	for b.Loop() {
		if err := QuantizeQ8_0Into(dst, src); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkQuantizeQ4_0(b *testing.B) {
	src := normals(1, benchN, 0.02)
	dst := make([]byte, benchN/QK*18)
	b.SetBytes(benchN * 4)
	for b.Loop() {
		if err := QuantizeQ4_0Into(dst, src); err != nil {
			b.Fatal(err)
		}
	}
}

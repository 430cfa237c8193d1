package kernels

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/bulkhead-ai/bulkhead/models/gguf"
)

// BenchmarkMatMul reports weight bytes streamed per second (GB/s, the decode
// bound) and GFLOP/s for smollm2-135m shapes. -cpu sets the pool's threads.
func BenchmarkMatMul(b *testing.B) {
	shapes := []struct {
		name       string
		rows, cols int
		n          int
	}{
		{"decode-attn-576x576", 576, 576, 1},
		// Larger than a server's L3 for every type: the weights stream from
		// DRAM, as a real model's do in decode.
		{"decode-dram-32768x2048", 32768, 2048, 1},
		{"verify4-dram-32768x2048", 32768, 2048, 4},
		{"verify9-dram-32768x2048", 32768, 2048, 9},
		{"batch16-dram-32768x2048", 32768, 2048, 16},
		{"decode-ffn-1536x576", 1536, 576, 1},
		{"decode-ffn-576x1536", 576, 1536, 1},
		{"decode-vocab-49152x576", 49152, 576, 1},
		{"batch16-1536x576", 1536, 576, 16},
		{"batch16-vocab-49152x576", 49152, 576, 16},
		{"prefill64-1536x576", 1536, 576, 64},
		{"prefill512-1536x576", 1536, 576, 512},
	}
	types := []gguf.Type{gguf.TypeF32, gguf.TypeF16, gguf.TypeBF16, gguf.TypeQ8_0, gguf.TypeQ4_0,
		gguf.TypeQ4_1, gguf.TypeQ5_0, gguf.TypeQ5_1, gguf.TypeIQ4_NL,
		gguf.TypeQ2_K, gguf.TypeQ3_K, gguf.TypeQ4_K, gguf.TypeQ5_K, gguf.TypeQ6_K, gguf.TypeIQ4_XS}
	rng := rand.New(rand.NewPCG(41, 42))
	t := &testing.T{}
	for _, typ := range types {
		for _, s := range shapes {
			cols := s.cols
			if typ.BlockSize() == 256 && cols%256 != 0 {
				cols = 512 // K-quants need whole super-blocks; 576 is not one
			}
			m := randMatrix(t, rng, typ, s.rows, cols)
			x := randVec(rng, s.n*cols)
			out := make([]float32, s.n*s.rows)
			for _, threads := range benchThreads {
				b.Run(fmt.Sprintf("%s/%s/t%d", typ, s.name, threads), func(b *testing.B) {
					p := NewPool(threads)
					defer p.Close()
					b.ReportAllocs()
					for b.Loop() {
						p.MatMul(out, m, x, s.n)
					}
					sec := b.Elapsed().Seconds() / float64(b.N)
					b.ReportMetric(float64(len(m.Data))/sec/1e9, "GB/s")
					b.ReportMetric(2*float64(s.rows*cols*s.n)/sec/1e9, "GFLOP/s")
				})
			}
		}
	}
}

// benchThreads are the pool sizes benchmarked. Pools are sized explicitly:
// with b.Loop the body runs once, before -cpu takes effect.
var benchThreads = []int{1, 2}

func BenchmarkDotF16(b *testing.B) {
	rng := rand.New(rand.NewPCG(43, 44))
	for _, n := range []int{64, 576} {
		x, y := halves(rng, n), halves(rng, n)
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			var s float32
			for b.Loop() {
				s += Active().DotF16(x, y)
			}
			b.ReportMetric(2*float64(n)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			_ = s
		})
	}
}

// BenchmarkDots4F16 is attention's scores for 4 queries (4 prompt rows of a
// head, or 4 query heads sharing a KV head) against 512 keys of 128
// dimensions in an f16 KV page run (stride: a 1024-wide KV row), as a
// prefill of 512 tokens reads them.
func BenchmarkDots4F16(b *testing.B) {
	ks := Active()
	rng := rand.New(rand.NewPCG(45, 46))
	const hd, nk, stride = 128, 512, 1024
	q := halves(rng, 4*hd)
	qf := make([]float32, 4*hd)
	ks.F16ToF32s(qf, q)
	k := halves(rng, nk*stride)
	var out [4][]float32
	for i := range out {
		out[i] = make([]float32, nk)
	}
	for b.Loop() {
		ks.Dots4F16(&out, q, qf, k, stride, 0.125)
	}
	b.ReportMetric(2*4*hd*nk*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}

// BenchmarkPoolRun is the hand-off cost of one Run with trivial work.
func BenchmarkPoolRun(b *testing.B) {
	for _, threads := range benchThreads {
		b.Run(fmt.Sprintf("t%d", threads), func(b *testing.B) {
			p := NewPool(threads)
			defer p.Close()
			var sink [64]int
			fn := func(lo, hi int) { sink[lo%64] += hi - lo }
			for b.Loop() {
				p.Run(64, fn)
			}
		})
	}
}

// BenchmarkDotsT times a rank-16 LoRA B·t for one row of a 1B model's
// feed-forward (8192 outputs).
func BenchmarkDotsT(b *testing.B) {
	ks := Active()
	rng := rand.New(rand.NewPCG(1, 2))
	const n, cols = 16, 8192
	w, x := randVec(rng, n*cols), randVec(rng, n)
	out := make([]float32, cols)
	for b.Loop() {
		ks.DotsT(out, w, cols, x)
	}
	b.SetBytes(4 * n * cols)
}

// BenchmarkQuantize is the activation quantizers on a 2048-float row (the
// 1B shape's hidden size), per path: what every matmul of a quantized
// weight does to its input first.
func BenchmarkQuantize(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	x := make([]float32, 2048)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	q8 := make([]byte, len(x)/32*q8Block)
	q81 := make([]byte, len(x)/32*q81Block)
	q8k := make([]q8K, len(x)/256)
	for _, c := range []struct {
		name string
		p    path
		run  func()
	}{
		{"q8_0/go", pathGo, func() { quantizeQ8(q8, x) }},
		{"q8_0/avx2", pathAVX2, func() { quantQ8AVX2(&q8[0], &x[0], len(x)/32, nil, 0) }},
		{"q8_0/avx512", pathAVX512, func() { quantQ8AVX512(&q8[0], &x[0], len(x)/32, nil, 0) }},
		{"q8_1/go", pathGo, func() { quantizeQ8_1(q81, x) }},
		{"q8_1/avx2", pathAVX2, func() { quantQ81AVX2(&q81[0], &x[0], len(x)/32) }},
		{"q8_1/avx512", pathAVX512, func() { quantQ81AVX512(&q81[0], &x[0], len(x)/32, nil) }},
		{"q8_k/go", pathGo, func() { quantizeQ8K(q8k, x) }},
		{"q8_k/avx2", pathAVX2, func() { quantQ8KAVX2(&q8k[0], &x[0], len(x)/256) }},
		{"q8_k/avx512", pathAVX512, func() { quantQ8KAVX512(&q8k[0], &x[0], len(x)/256) }},
	} {
		b.Run(c.name, func(b *testing.B) {
			if detectPath() < c.p {
				b.Skipf("no %s here", c.p)
			}
			b.SetBytes(int64(4 * len(x)))
			for b.Loop() {
				c.run()
			}
		})
	}
}

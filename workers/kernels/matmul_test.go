package kernels

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"testing"
	"unsafe"

	"github.com/bulkhead-ai/bulkhead/models/gguf"
)

// refMatMul is a float64 reference. For quantized types it dots with x as the
// kernel sees it: rounded to f16/bf16, or quantized to Q8_0/Q8_1/Q8_K (through
// the package's quantizers, checked separately) — so tolerances can be tight.
// Q4_1 and Q5_1 take the min term as GGML does, through the activation block's
// f16 sum s: sum over blocks of d_w*q_w·x + m_w*s.
func refMatMul(m Matrix, x []float32, n int) (want, scale []float64) {
	want = make([]float64, n*m.Rows)
	scale = make([]float64, n*m.Rows)
	for r := range n {
		xr := refX(m.Type, x[r*m.Cols:(r+1)*m.Cols])
		for i := range m.Rows {
			var s, a float64
			if m.Type == gguf.TypeQ4_1 || m.Type == gguf.TypeQ5_1 {
				s, a = refDotQ8_1(m, i, x[r*m.Cols:(r+1)*m.Cols])
			} else {
				w := refRow(m, i)
				for k := range w {
					s += w[k] * xr[k]
					a += math.Abs(w[k] * xr[k])
				}
			}
			want[r*m.Rows+i], scale[r*m.Rows+i] = s, a+1e-30
		}
	}
	return want, scale
}

// refDotQ8_1 is weight row i of a Q4_1/Q5_1 matrix dotted with x quantized to
// Q8_1, with the weights' quants read from the block layout directly.
func refDotQ8_1(m Matrix, i int, x []float32) (s, a float64) {
	rs, _ := m.Type.RowSize(m.Cols)
	w := m.Data[i*rs : (i+1)*rs]
	bs := m.Type.TypeSize()
	xq := make([]byte, len(x)/32*36)
	quantizeQ8_1(xq, x)
	h := func(b []byte) float64 { return float64(gguf.F16ToF32(rd16(b))) }
	for b := 0; b < m.Cols/32; b++ {
		blk, xb := w[b*bs:(b+1)*bs], xq[b*36:(b+1)*36]
		d, mn, dx, sx := h(blk), h(blk[2:]), h(xb), h(xb[2:])
		for j := range 32 {
			var q int
			if m.Type == gguf.TypeQ4_1 {
				q = int(blk[4+j%16])
			} else {
				q = int(blk[8+j%16])
				qh := uint32(blk[4]) | uint32(blk[5])<<8 | uint32(blk[6])<<16 | uint32(blk[7])<<24
				q |= int(qh>>j&1) << 8 // bit 8 stands in for bit 4 once the nibble is chosen
			}
			nib := q & 0xff
			if j >= 16 {
				nib >>= 4
			}
			v := nib&15 | (q>>8)<<4
			p := d * float64(v) * dx * float64(int8(xb[4+j]))
			s += p
			a += math.Abs(p) + math.Abs(mn*dx*float64(int8(xb[4+j])))
		}
		s += mn * sx
	}
	return s, a
}

// refX is one activation row as the kernel for weight type t consumes it.
func refX(t gguf.Type, x []float32) []float64 {
	out := make([]float64, len(x))
	switch t {
	case gguf.TypeF32:
		for i, v := range x {
			out[i] = float64(v)
		}
	case gguf.TypeF16:
		for i, v := range x {
			out[i] = float64(gguf.F16ToF32(gguf.F32ToF16(v)))
		}
	case gguf.TypeBF16:
		for i, v := range x {
			out[i] = float64(gguf.BF16ToF32(gguf.F32ToBF16(v)))
		}
	case gguf.TypeQ8_0, gguf.TypeQ4_0, gguf.TypeQ5_0, gguf.TypeIQ4_NL:
		q := make([]byte, len(x)/32*34)
		quantizeQ8(q, x)
		for k := range out {
			blk := q[k/32*34:]
			out[k] = float64(gguf.F16ToF32(rd16(blk))) * float64(int8(blk[2+k%32]))
		}
	case gguf.TypeQ2_K, gguf.TypeQ3_K, gguf.TypeQ4_K, gguf.TypeQ5_K, gguf.TypeQ6_K, gguf.TypeIQ4_XS:
		q := make([]q8K, len(x)/256)
		quantizeQ8K(q, x)
		for k := range out {
			out[k] = float64(q[k/256].d) * float64(q[k/256].qs[k%256])
		}
	}
	return out
}

// paths lists the code paths this binary and CPU have; TestPathsAvailable says
// which are skipped.
func paths() []path { return availablePaths() }

// asmPaths lists the available paths other than the portable one.
func asmPaths() []path { return paths()[1:] }

func TestPathsAvailable(t *testing.T) {
	for p := pathAVX2; p <= pathAMX; p++ {
		t.Run(p.String(), func(t *testing.T) {
			if p > detectPath() {
				t.Skipf("this CPU or build lacks the %s kernels (best here: %s); they are not tested", p, detectPath())
			}
		})
	}
	t.Logf("kernels in use: %s (%s=%q)", Active(), EnvKernels, os.Getenv(EnvKernels))
}

// TestSets: Available lists every path the CPU has, lowest first, each Set
// naming and running its own; the zero Set is Active.
func TestSets(t *testing.T) {
	sets := Available()
	if len(sets) != int(detectPath())+1 || !sets[0].Portable() || sets[len(sets)-1].path() != detectPath() {
		t.Fatalf("Available() = %v; want every path up to %s, portable first", sets, detectPath())
	}
	for i, ks := range sets {
		if ks.path() != path(i) || ks.String() != path(i).String() || ks.Portable() != (i == 0) {
			t.Errorf("set %d: path %v, name %q, portable %v", i, ks.path(), ks, ks.Portable())
		}
	}
	if (Set{}).path() != active || Active().path() != active || Active().String() != (Set{}).String() {
		t.Errorf("zero Set %v, Active %v; want both %v", Set{}, Active(), active)
	}
}

func TestChoosePath(t *testing.T) {
	for _, tc := range []struct {
		best path
		env  string
		want path
		err  bool
	}{
		{pathAMX, "", pathAMX, false},
		{pathAMX, "avx512", pathAVX512, false},
		{pathAVX512, "amx", pathAVX512, true},
		{pathAVX512, "", pathAVX512, false},
		{pathAVX512, "avx2", pathAVX2, false},
		{pathAVX512, "go", pathGo, false},
		{pathAVX2, "avx512", pathAVX2, true},
		{pathGo, "avx2", pathGo, true},
		{pathAVX2, "sse", pathAVX2, true},
	} {
		t.Run(tc.best.String()+"/"+tc.env, func(t *testing.T) {
			got, err := choosePath(tc.best, tc.env)
			if got != tc.want || (err != nil) != tc.err || (err != nil && !errors.Is(err, ErrKernels)) {
				t.Fatalf("choosePath(%s, %q) = %s, %v; want %s, error %v", tc.best, tc.env, got, err, tc.want, tc.err)
			}
		})
	}
}

func TestMatMulMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, tc := range allTypes {
		for _, kp := range paths() {
			for _, shape := range []struct{ rows, n int }{{1, 1}, {5, 1}, {13, 4}, {8, 14}, {16, 1}, {32, 7}} {
				t.Run(fmt.Sprintf("%s/%s/%dx%d/n%d", tc.t, kp, shape.rows, tc.cols, shape.n), func(t *testing.T) {
					m := randMatrix(t, rng, tc.t, shape.rows, tc.cols)
					x := randVec(rng, shape.n*tc.cols)
					p := NewPool(2)
					defer p.Close()
					out := make([]float32, shape.n*shape.rows)
					p.matMul(out, m, x, shape.n, kp)
					want, scale := refMatMul(m, x, shape.n)
					for i := range out {
						checkClose(t, fmt.Sprintf("out[%d]", i), out[i], want[i], scale[i], 1e-5)
					}
				})
			}
		}
	}
}

// TestMatMulUnquantizedX checks the whole pipeline, activation quantization
// included, against a float64 product with the caller's x.
func TestMatMulUnquantizedX(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	tols := map[gguf.Type]float64{gguf.TypeF32: 1e-5, gguf.TypeF16: 2e-3, gguf.TypeBF16: 1e-2,
		gguf.TypeQ8_0: 2e-2, gguf.TypeQ4_0: 2e-2, gguf.TypeQ4_K: 2e-2, gguf.TypeQ6_K: 2e-2,
		gguf.TypeQ4_1: 2e-2, gguf.TypeQ5_0: 2e-2, gguf.TypeQ5_1: 2e-2, gguf.TypeIQ4_NL: 2e-2,
		gguf.TypeQ2_K: 2e-2, gguf.TypeQ3_K: 2e-2, gguf.TypeQ5_K: 2e-2, gguf.TypeIQ4_XS: 2e-2}
	for _, tc := range allTypes {
		t.Run(tc.t.String(), func(t *testing.T) {
			m := randMatrix(t, rng, tc.t, 9, tc.cols)
			x := randVec(rng, 2*tc.cols)
			p := NewPool(1)
			defer p.Close()
			out := make([]float32, 2*9)
			p.MatMul(out, m, x, 2)
			for r := range 2 {
				for i := range 9 {
					w := refRow(m, i)
					var s, a float64
					for k, wk := range w {
						s += wk * float64(x[r*tc.cols+k])
						a += math.Abs(wk * float64(x[r*tc.cols+k]))
					}
					checkClose(t, fmt.Sprintf("row %d x %d", i, r), out[r*9+i], s, a, tols[tc.t])
				}
			}
		})
	}
}

// TestMatMulInvariance checks bitwise that an output element does not depend on
// the batch size, the row's position in the batch, or the thread count.
func TestMatMulInvariance(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, rows := range []int{13, 32} {
		for _, tc := range allTypes {
			for _, kp := range paths() {
				t.Run(fmt.Sprintf("%s/%s/rows%d", tc.t, kp, rows), func(t *testing.T) {
					m := randMatrix(t, rng, tc.t, rows, tc.cols)
					base := randVec(rng, 64*tc.cols) // 64 distinct activation rows
					p1 := NewPool(1)
					defer p1.Close()
					// Reference: each activation row alone, one thread.
					single := make([]float32, 64*rows)
					for r := range 64 {
						p1.matMul(single[r*rows:(r+1)*rows], m, base[r*tc.cols:(r+1)*tc.cols], 1, kp)
					}
					for _, threads := range []int{1, 2, 3} {
						p := NewPool(threads)
						for _, n := range []int{1, 3, 13, 64} {
							// Batch of n rows taken from base in a shuffled order.
							perm := rng.Perm(64)[:n]
							x := make([]float32, n*tc.cols)
							for r, src := range perm {
								copy(x[r*tc.cols:], base[src*tc.cols:(src+1)*tc.cols])
							}
							out := make([]float32, n*rows)
							p.matMul(out, m, x, n, kp)
							for r, src := range perm {
								for i := range rows {
									got, want := out[r*rows+i], single[src*rows+i]
									if math.Float32bits(got) != math.Float32bits(want) {
										t.Fatalf("threads %d n %d: row %d (source %d) col %d: %x != single %x",
											threads, n, r, src, i, math.Float32bits(got), math.Float32bits(want))
									}
								}
							}
						}
						p.Close()
					}
				})
			}
		}
	}
}

// TestDecodeRowsMatchBlocks checks the float types' one-row decode kernels,
// which take many weight rows a call (rowsDecode), against the block
// kernels a batch takes: every output bitwise equal. The matrix is tall
// enough for a pool piece to hold many rows, and 603 rows leave a tail for
// the block kernels in each piece.
func TestDecodeRowsMatchBlocks(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	const rows, cols = 603, 256
	for _, typ := range []gguf.Type{gguf.TypeF32, gguf.TypeF16, gguf.TypeBF16} {
		for _, kp := range paths() {
			t.Run(fmt.Sprintf("%s/%s", typ, kp), func(t *testing.T) {
				m := randMatrix(t, rng, typ, rows, cols)
				x := randVec(rng, cols)
				x3 := append(append(append([]float32{}, x...), x...), x...)
				p := NewPool(1)
				defer p.Close()
				one, three := make([]float32, rows), make([]float32, 3*rows)
				p.matMul(one, m, x, 1, kp)
				p.matMul(three, m, x3, 3, kp)
				for r := range 3 {
					for i := range rows {
						if a, b := one[i], three[r*rows+i]; math.Float32bits(a) != math.Float32bits(b) {
							t.Fatalf("row %d: decode %x != batch row %d's %x", i, math.Float32bits(a), r, math.Float32bits(b))
						}
					}
				}
			})
		}
	}
}

// TestAsmMatchesGo compares the assembly MatMul with the portable one: exactly
// for the integer-dot types, within a tight tolerance for float types.
func TestAsmMatchesGo(t *testing.T) {
	if len(asmPaths()) == 0 {
		t.Skip("this build or CPU has no assembly path (purego, non-amd64, or no AVX2/FMA/F16C)")
	}
	rng := rand.New(rand.NewPCG(7, 8))
	exact := map[gguf.Type]bool{gguf.TypeQ8_0: true, gguf.TypeQ4_0: true, gguf.TypeQ4_K: true, gguf.TypeQ6_K: true,
		gguf.TypeQ4_1: true, gguf.TypeQ5_0: true, gguf.TypeQ5_1: true, gguf.TypeIQ4_NL: true,
		gguf.TypeQ2_K: true, gguf.TypeQ3_K: true, gguf.TypeQ5_K: true, gguf.TypeIQ4_XS: true}
	for _, kp := range asmPaths() {
		for _, rows := range []int{11, 32} {
			for _, tc := range allTypes {
				t.Run(fmt.Sprintf("%s/%s/rows%d", tc.t, kp, rows), func(t *testing.T) {
					m := randMatrix(t, rng, tc.t, rows, tc.cols)
					x := randVec(rng, 9*tc.cols)
					p := NewPool(2)
					defer p.Close()
					a, g := make([]float32, 9*rows), make([]float32, 9*rows)
					p.matMul(a, m, x, 9, kp)
					p.matMul(g, m, x, 9, pathGo)
					_, scale := refMatMul(m, x, 9)
					for i := range a {
						if exact[tc.t] {
							if math.Float32bits(a[i]) != math.Float32bits(g[i]) {
								t.Fatalf("out[%d]: asm %g != go %g", i, a[i], g[i])
							}
							continue
						}
						checkClose(t, fmt.Sprintf("out[%d]", i), a[i], float64(g[i]), scale[i], 1e-6)
					}
				})
			}
		}
	}
}

// TestQuantKernelsExtremes drives the Q8_0/Q4_0/Q5_0 assembly with extreme bytes
// (-128 weights, ±127 activations) and compares it with the Go kernels bitwise.
func TestQuantKernelsExtremes(t *testing.T) {
	if detectPath() < pathAVX2 {
		t.Skip("this build has no assembly path")
	}
	rng := rand.New(rand.NewPCG(9, 10))
	for _, fill := range []struct {
		name string
		w, x func() byte
	}{
		{"random", func() byte { return byte(rng.Uint32()) }, func() byte { return byte(rng.IntN(255) - 127) }},
		{"min-max", func() byte { return 0x80 }, func() byte { return 127 }},
		{"min-min", func() byte { return 0x80 }, func() byte { return 0x81 }},
		{"max-max", func() byte { return 0x7f }, func() byte { return 127 }},
	} {
		t.Run(fill.name, func(t *testing.T) {
			const nb = 7
			w8, w4, w5 := filled(4*nb*34, fill.w), filled(4*nb*18, fill.w), filled(4*nb*22, fill.w)
			x := filled(nb*34, fill.x)
			for b := range nb { // finite scales
				putHalf(x[b*34:], 0.01)
				for r := range 4 {
					putHalf(w8[r*nb*34+b*34:], 0.02)
					putHalf(w4[r*nb*18+b*18:], 0.03)
					putHalf(w5[r*nb*22+b*22:], 0.05)
				}
			}
			var o8, o4, o5 [4]float32
			dot4Q8AVX(&w8[0], nb*34, &x[0], nb, &o8)
			dot4Q4AVX(&w4[0], nb*18, &x[0], nb, &o4)
			dot4Q5AVX(&w5[0], nb*22, &x[0], nb, &o5)
			for r := range 4 {
				if g := dotQ8Go(w8[r*nb*34:], x, nb); math.Float32bits(g) != math.Float32bits(o8[r]) {
					t.Errorf("Q8_0 row %d: asm %g go %g", r, o8[r], g)
				}
				if g := dotQ4Go(w4[r*nb*18:], x, nb); math.Float32bits(g) != math.Float32bits(o4[r]) {
					t.Errorf("Q4_0 row %d: asm %g go %g", r, o4[r], g)
				}
				if g := dotQ5_0Go(w5[r*nb*22:], x, nb); math.Float32bits(g) != math.Float32bits(o5[r]) {
					t.Errorf("Q5_0 row %d: asm %g go %g", r, o5[r], g)
				}
			}
		})
	}
}

// TestKQuantAVX2Extremes drives the AVX2 Q2_K/Q3_K/Q4_K/Q5_K/Q6_K/IQ4_XS kernels with extreme
// bytes (every weight and scale bit set or clear, activations -128 and 127)
// and compares them with the Go kernels bitwise.
func TestKQuantAVX2Extremes(t *testing.T) {
	if detectPath() < pathAVX2 {
		t.Skip("this build or CPU has no AVX2 path")
	}
	rng := rand.New(rand.NewPCG(11, 12))
	for _, fill := range []struct {
		name string
		w    func() byte
		x    func() int8
	}{
		{"random", func() byte { return byte(rng.Uint32()) }, func() int8 { return int8(rng.Uint32()) }},
		{"max-max", func() byte { return 0xff }, func() int8 { return 127 }},
		{"max-min", func() byte { return 0xff }, func() int8 { return -128 }},
		{"zero-min", func() byte { return 0 }, func() int8 { return -128 }},
	} {
		t.Run(fill.name, func(t *testing.T) {
			const nb = 3
			x := make([]q8K, nb)
			for b := range x {
				x[b].d = 0.01
				for i := range x[b].qs {
					x[b].qs[i] = fill.x()
				}
				for j := range 16 {
					var s int16
					for _, q := range x[b].qs[j*16 : j*16+16] {
						s += int16(q)
					}
					x[b].bsums[j] = s
				}
			}
			w4, w5, w6 := filled(nb*q4KBlock, fill.w), filled(nb*q5KBlock, fill.w), filled(nb*q6KBlock, fill.w)
			for b := range nb { // finite scales
				putHalf(w4[b*q4KBlock:], 0.02)
				putHalf(w4[b*q4KBlock+2:], 0.03)
				putHalf(w5[b*q5KBlock:], 0.05)
				putHalf(w5[b*q5KBlock+2:], 0.06)
				putHalf(w6[b*q6KBlock+208:], 0.04)
			}
			if a, g := dotQ4KAVX2(&w4[0], &x[0], nb), dotQ4KGo(w4, x); math.Float32bits(a) != math.Float32bits(g) {
				t.Errorf("Q4_K: asm %g go %g", a, g)
			}
			if a, g := dotQ5KAVX2(&w5[0], &x[0], nb), dotQ5KGo(w5, x); math.Float32bits(a) != math.Float32bits(g) {
				t.Errorf("Q5_K: asm %g go %g", a, g)
			}
			if a, g := dotQ6KAVX2(&w6[0], &x[0], nb), dotQ6KGo(w6, x); math.Float32bits(a) != math.Float32bits(g) {
				t.Errorf("Q6_K: asm %g go %g", a, g)
			}
			// The IQ4_XS kernel moves the levels' signs onto the activations
			// (as the Q8_0 family's does), so it takes what quantizeQ8K
			// makes: -127..127.
			for b := range x {
				for i, q := range x[b].qs {
					x[b].qs[i] = max(q, -127)
				}
			}
			wx := filled(nb*iq4XSBlock, fill.w)
			for b := range nb {
				putHalf(wx[b*iq4XSBlock:], 0.03)
			}
			if a, g := dotIQ4XSAVX2(&wx[0], &x[0], nb), dotIQ4XSGo(wx, x); math.Float32bits(a) != math.Float32bits(g) {
				t.Errorf("IQ4_XS: asm %g go %g", a, g)
			}
			w3 := filled(nb*q3KBlock, fill.w)
			for b := range nb {
				putHalf(w3[b*q3KBlock+108:], 0.05)
			}
			if a, g := dotQ3KAVX2(&w3[0], &x[0], nb), dotQ3KGo(w3, x); math.Float32bits(a) != math.Float32bits(g) {
				t.Errorf("Q3_K: asm %g go %g", a, g)
			}
			w2 := filled(nb*q2KBlock, fill.w)
			for b := range nb {
				putHalf(w2[b*q2KBlock+80:], 0.05)
				putHalf(w2[b*q2KBlock+82:], 0.02)
			}
			if a, g := dotQ2KAVX2(&w2[0], &x[0], nb), dotQ2KGo(w2, x); math.Float32bits(a) != math.Float32bits(g) {
				t.Errorf("Q2_K: asm %g go %g", a, g)
			}
		})
	}
}

func TestRow(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	for _, tc := range allTypes {
		t.Run(tc.t.String(), func(t *testing.T) {
			m := randMatrix(t, rng, tc.t, 3, tc.cols)
			dst := make([]float32, tc.cols)
			for i := range 3 {
				m.Row(i, dst)
				want := refRow(m, i)
				for k := range want {
					checkClose(t, fmt.Sprintf("row %d [%d]", i, k), dst[k], want[k], math.Abs(want[k])+1e-6, 1e-6)
				}
			}
		})
	}
}

// TestNewTable: a table is the matrix without copies (Packed is false, Data
// is the caller's), its rows and products those of NewMatrix's; DecodeRow of
// a row's bytes read elsewhere is Row, and refuses a wrong length.
func TestNewTable(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 16))
	for _, tc := range allTypes {
		t.Run(tc.t.String(), func(t *testing.T) {
			m := randMatrix(t, rng, tc.t, 32, tc.cols)
			tb, err := m.Set().NewTable(m.Type, m.Rows, m.Cols, m.Data)
			if err != nil {
				t.Fatal(err)
			}
			if tb.Packed() || &tb.Data[0] != &m.Data[0] {
				t.Fatal("table is packed or copied")
			}
			x := randVec(rng, 3*m.Cols)
			p := NewPool(2)
			defer p.Close()
			a, b := make([]float32, 3*m.Rows), make([]float32, 3*m.Rows)
			p.MatMul(a, m, x, 3)
			p.MatMul(b, tb, x, 3)
			for i := range a {
				if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
					t.Fatalf("out[%d]: table %g, matrix %g", i, b[i], a[i])
				}
			}
			got, want := make([]float32, m.Cols), make([]float32, m.Cols)
			for i := range m.Rows {
				row := append([]byte(nil), m.Data[i*m.RowBytes():(i+1)*m.RowBytes()]...)
				tb.DecodeRow(row, got)
				m.Row(i, want)
				for k := range want {
					if math.Float32bits(got[k]) != math.Float32bits(want[k]) {
						t.Fatalf("row %d [%d]: DecodeRow %g, Row %g", i, k, got[k], want[k])
					}
				}
			}
			defer func() {
				if recover() == nil {
					t.Fatal("DecodeRow of a short row did not panic")
				}
			}()
			tb.DecodeRow(m.Data[:m.RowBytes()-1], got)
		})
	}
}

func TestNewMatrix(t *testing.T) {
	for _, tc := range []struct {
		name       string
		t          gguf.Type
		rows, cols int
		len        int
		err        error
	}{
		{"f32 ok", gguf.TypeF32, 2, 3, 24, nil},
		{"q8 ok", gguf.TypeQ8_0, 2, 64, 2 * 68, nil},
		{"q4k ok", gguf.TypeQ4_K, 1, 256, 144, nil},
		{"q5k ok", gguf.TypeQ5_K, 1, 256, 176, nil},
		{"iq4_nl ok", gguf.TypeIQ4_NL, 2, 64, 4 * 18, nil},
		{"unsupported", gguf.TypeIQ2_XXS, 1, 256, 66, ErrUnsupportedType},
		{"unknown", gguf.Type(99), 1, 1, 4, ErrUnsupportedType},
		{"partial block", gguf.TypeQ8_0, 1, 40, 34, ErrShape},
		{"short data", gguf.TypeF32, 2, 3, 20, ErrShape},
		{"long data", gguf.TypeF32, 2, 3, 28, ErrShape},
		{"zero rows", gguf.TypeF32, 0, 3, 0, ErrShape},
		{"negative cols", gguf.TypeF32, 1, -4, 0, ErrShape},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Active().NewMatrix(tc.t, tc.rows, tc.cols, make([]byte, tc.len))
			if !errors.Is(err, tc.err) || (tc.err == nil) != (err == nil) {
				t.Fatalf("err = %v, want %v", err, tc.err)
			}
		})
	}
}

// FuzzMatrix feeds arbitrary weight bytes (as from an untrusted file) through
// NewMatrix, Row and MatMul: no panics, and the paths agree for quant types.
func FuzzMatrix(f *testing.F) {
	f.Add(uint8(8), uint8(1), uint16(32), []byte{})
	f.Add(uint8(12), uint8(2), uint16(256), make([]byte, 288))
	f.Add(uint8(0), uint8(3), uint16(9), make([]byte, 108))
	f.Add(uint8(13), uint8(1), uint16(256), make([]byte, 176))
	f.Add(uint8(7), uint8(2), uint16(32), make([]byte, 48))
	f.Fuzz(func(t *testing.T, typ uint8, rows uint8, cols uint16, data []byte) {
		m, err := Active().NewMatrix(gguf.Type(typ), int(rows), int(cols), data)
		if err != nil {
			return
		}
		dst := make([]float32, m.Cols)
		for i := range m.Rows {
			m.Row(i, dst)
		}
		x := make([]float32, 2*m.Cols)
		for i := range x {
			x[i] = float32(i%7) - 3
		}
		p := NewPool(2)
		defer p.Close()
		a, g := make([]float32, 2*m.Rows), make([]float32, 2*m.Rows)
		p.matMul(g, m, x, 2, pathGo)
		m.pack = repack(m)
		for _, kp := range asmPaths() {
			p.matMul(a, m, x, 2, kp)
			if m.Type == gguf.TypeQ8_0 || m.Type == gguf.TypeQ4_0 {
				for i := range a {
					if math.Float32bits(a[i]) != math.Float32bits(g[i]) && !(a[i] != a[i] && g[i] != g[i]) {
						t.Fatalf("out[%d]: asm %g go %g", i, a[i], g[i])
					}
				}
			}
		}
	})
}

// TestPackedKernelsExtremes drives the packed kernels of every path the CPU
// has (Q8_0, Q4_0, Q5_0, IQ4_NL, Q4_1, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS) with
// extreme weight bytes and activations that quantize to the ends of their
// range, against the portable kernels bitwise, for 1..9 activation rows.
func TestPackedKernelsExtremes(t *testing.T) {
	if detectPath() < pathAVX2 {
		t.Skipf("this CPU or build has no packed kernels (best here: %s)", detectPath())
	}
	for _, kp := range asmPaths() {
		t.Run(kp.String(), func(t *testing.T) { testPackedExtremes(t, kp) })
	}
}

func testPackedExtremes(t *testing.T, kp path) {
	rng := rand.New(rand.NewPCG(11, 12))
	const rows = 32
	for _, typ := range []gguf.Type{gguf.TypeQ8_0, gguf.TypeQ4_0, gguf.TypeQ5_0, gguf.TypeIQ4_NL, gguf.TypeQ4_1, gguf.TypeQ5_1,
		gguf.TypeQ2_K, gguf.TypeQ3_K, gguf.TypeQ4_K, gguf.TypeQ5_K, gguf.TypeQ6_K, gguf.TypeIQ4_XS} {
		if !packs(kp, typ) {
			continue
		}
		cols := 7 * 32
		if typ.BlockSize() == 256 {
			cols = 3 * 256
		}
		for _, fill := range []struct {
			name string
			w    func() byte
			x    func(k int) float32
		}{
			{"random", func() byte { return byte(rng.Uint32()) }, func(int) float32 { return float32(rng.NormFloat64()) }},
			{"min-max", func() byte { return 0x80 }, func(int) float32 { return 1 }},
			{"min-min", func() byte { return 0x80 }, func(int) float32 { return -1 }},
			{"max-alt", func() byte { return 0x7f }, func(k int) float32 { return float32(1 - 2*(k&1)) }},
			{"ff-max", func() byte { return 0xff }, func(int) float32 { return 1 }},
		} {
			t.Run(typ.String()+"/"+fill.name, func(t *testing.T) {
				bs := typ.TypeSize()
				data := make([]byte, rows*cols/typ.BlockSize()*bs)
				for i := range data {
					data[i] = fill.w()
				}
				for b := 0; b < rows*cols/typ.BlockSize(); b++ {
					switch typ {
					case gguf.TypeQ4_K, gguf.TypeQ5_K:
						putHalf(data[b*bs:], 0.002)
						putHalf(data[b*bs+2:], 0.001)
					case gguf.TypeQ6_K:
						putHalf(data[b*bs+208:], 0.002)
					case gguf.TypeQ3_K:
						putHalf(data[b*bs+108:], 0.002)
					case gguf.TypeQ2_K:
						putHalf(data[b*bs+80:], 0.002)
						putHalf(data[b*bs+82:], 0.001)
					case gguf.TypeQ4_1, gguf.TypeQ5_1:
						putHalf(data[b*bs:], 0.02)
						putHalf(data[b*bs+2:], -0.1)
					default:
						putHalf(data[b*bs:], 0.02)
					}
				}
				m, err := kp.set().NewMatrix(typ, rows, cols, data)
				if err != nil {
					t.Fatal(err)
				}
				m.pack = repack(m)
				for n := 1; n <= 9; n++ {
					x := make([]float32, n*cols)
					for k := range x {
						x[k] = fill.x(k)
					}
					p := NewPool(2)
					a, g := make([]float32, n*rows), make([]float32, n*rows)
					p.matMul(a, m, x, n, kp)
					p.matMul(g, m, x, n, pathGo)
					p.Close()
					for i := range a {
						if math.Float32bits(a[i]) != math.Float32bits(g[i]) {
							t.Fatalf("n %d out[%d]: %s %g != go %g", n, i, kp, a[i], g[i])
						}
					}
				}
			})
		}
	}
}

// TestPackedLayouts pins the struct layouts the assembly reads at fixed offsets.
func TestPackedLayouts(t *testing.T) {
	var x q8K
	var a q8KAux
	for _, c := range []struct {
		name      string
		got, want uintptr
	}{
		{"q8K size", unsafe.Sizeof(x), 292},
		{"q8K.qs", unsafe.Offsetof(x.qs), 4},
		{"q8KAux size", unsafe.Sizeof(a), 96},
		{"q8KAux.bs32", unsafe.Offsetof(a.bs32), 16},
		{"q8KAux.c16", unsafe.Offsetof(a.c16), 32},
		{"q8Aux size", unsafe.Sizeof(q8Aux{}), 8},
	} {
		if c.got != c.want {
			t.Errorf("%s = %d, want %d", c.name, c.got, c.want)
		}
	}
}

// TestF16TileKernels checks that the AVX2 F16 tile kernels, activations widened
// as they are read (dot4x3HHAVX) and widened before (dot4x3HFAVX, f16TileF32),
// give the same bits, and the bits of each activation row alone. The CPU
// chooses one of them; this runs both.
func TestF16TileKernels(t *testing.T) {
	if detectPath() < pathAVX2 {
		t.Skipf("this CPU or build lacks the avx2 kernels (best here: %s)", detectPath())
	}
	rng := rand.New(rand.NewPCG(7, 8))
	const rows, cols, n = 32, 576, 27
	m := randMatrix(t, rng, gguf.TypeF16, rows, cols)
	x := randVec(rng, n*cols)
	p := NewPool(2)
	defer p.Close()
	single := make([]float32, n*rows)
	for r := range n {
		p.matMul(single[r*rows:(r+1)*rows], m, x[r*cols:(r+1)*cols], 1, pathAVX2)
	}
	defer func(v bool) { f16TileF32 = v }(f16TileF32)
	for _, wide := range []bool{false, true} {
		f16TileF32 = wide
		out := make([]float32, n*rows)
		p.matMul(out, m, x, n, pathAVX2)
		for i := range out {
			if math.Float32bits(out[i]) != math.Float32bits(single[i]) {
				t.Fatalf("f16TileF32 %v: out[%d] = %x, the row alone %x", wide, i, math.Float32bits(out[i]), math.Float32bits(single[i]))
			}
		}
	}
}

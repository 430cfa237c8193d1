package kernels

import (
	"fmt"

	"github.com/bulkhead-ai/bulkhead/models/gguf"
)

// xTile is how many activation rows are multiplied against one block of 4
// weight rows before moving to the next block, so prefill reuses each weight row
// from cache. A multiple of 12, the widths of the float micro-kernels (3 on
// AVX2, 4 on AVX-512).
const xTile = 12

// xTileF32Bytes bounds the activation rows of a tile on the AVX-512 F32 path:
// as many as fit in this many bytes, a share of L2, so that a tile's rows stay
// there while every block of the weights passes over them once. The weights
// then stream from memory once per tile, and F32 weights are the largest.
const xTileF32Bytes = 256 << 10

// tile is the number of activation rows per tile for this product.
func (j *matJob) tile() int {
	if j.m.Type == gguf.TypeF32 && j.p >= pathAVX512 {
		return max(xTile, xTileF32Bytes/(4*max(1, j.m.Cols))/xTile*xTile)
	}
	return xTile
}

// matJob is one MatMul call's state; the Pool keeps one and reuses its buffers.
type matJob struct {
	m   Matrix
	rs  int // bytes per weight row
	out []float32
	x   []float32 // caller's activations
	n   int
	p   path

	xf   []float32 // F32/F16/BF16: activations as float32, rounded to the weight's precision for F16/BF16
	xh   []uint16  // F16: scratch for the rounding
	xq   []byte    // 32-element block types: activations as Q8_0 or Q8_1 blocks
	xk   []q8K     // K-quants and IQ4_XS: activations as Q8_K blocks
	xqs  int       // bytes per Q8_0/Q8_1 activation row
	xa   []q8Aux   // packed kernels: per activation block, d as f32 and the offset term
	xaT  []q8Aux   // AMX tiles: xa block-major per 16 rows ([r/16][block][r%16]; tiled)
	xka  []q8KAux  // packed K-quant kernels: per Q8_K block, its sums as they take them
	xkaT []q8KAux  // AMX tiles: xka block-major per 16 rows (tiled)
	xm   []q81Aux  // packed Q4_1/Q5_1 kernels: per Q8_1 block, d and s as float32

	// tileKern and tileKKern are the AMX path's tile kernels: nil means the
	// type's assembly (gemmQ8AMX, gemmQ4AMX, gemmQ4KAMX, gemmQ6KAMX); the
	// tests put their Go models (tileModel, tileModelQ4K, tileModelQ6K) here
	// to run the tile path without AMX.
	tileKern  tileQ8Kernel
	tileKKern tileKKernel

	// wide holds one buffer per pool thread for rowsWide's chunks of F16
	// weight rows widened to float32 (grown on first use).
	wide chan []byte
}

// q8KAux is what the packed K-quant kernels need of one Q8_K activation block
// beyond its quants (96 bytes, read by the assembly at fixed offsets): d, the
// 32-element sums bsums[2s]+bsums[2s+1] as int16 (Q4_K's mins), and 32 times
// each 16-element sum as int32 (Q6_K's offset of 32).
type q8KAux struct {
	d    float32
	_    [3]int32
	bs32 [8]int16
	c16  [16]int32
}

// fill computes a's fields from Q8_K block x.
func (a *q8KAux) fill(x *q8K) {
	a.d = x.d
	for s := range 8 {
		a.bs32[s] = x.bsums[2*s] + x.bsums[2*s+1]
	}
	for s := range 16 {
		a.c16[s] = 32 * int32(x.bsums[s])
	}
}

// q81Aux is what the packed Q4_1 and Q5_1 kernels need of one Q8_1
// activation block beyond its quants: its d and s as float32, converted once
// per product rather than once per group of weight rows.
type q81Aux struct {
	d, s float32
}

// q81AuxRow fills aux with the d and s of each Q8_1 block of the row xq (the
// AVX-512 quantizer writes them as it goes).
func q81AuxRow(aux []q81Aux, xq []byte) {
	for b := range aux {
		blk := xq[b*q81Block : b*q81Block+4]
		aux[b] = q81Aux{d: half(blk[0:2]), s: half(blk[2:4])}
	}
}

// q8Aux is what the packed kernels need of one Q8_0 activation block beyond its
// quants: the scale as float32 and K*sum(q), K being the offset the packed
// weights carry (128 for Q8_0's flipped sign bit, 8 for Q4_0's nibbles).
type q8Aux struct {
	d float32
	c int32
}

// packed says whether this job runs the packed kernels on interleaved weights.
func (j *matJob) packed() bool { return j.m.pack != nil && packs(j.p, j.m.Type) }

// MatMul computes out[r*m.Rows+i] = dot(weight row i, x row r) for r < n, where
// x holds n rows of m.Cols float32. Work is split over the pool by weight rows.
// Each element is computed by the same sequence of operations whatever n, r and
// the thread count are. It runs the kernels of the Set m was laid out for. It
// panics if x or out is too short.
func (p *Pool) MatMul(out []float32, m Matrix, x []float32, n int) {
	p.matMul(out, m, x, n, m.set.path())
}

// matMul is MatMul with the code path chosen by the caller (tests compare them).
func (p *Pool) matMul(out []float32, m Matrix, x []float32, n int, kp path) {
	if n <= 0 {
		return
	}
	if len(x) < n*m.Cols || len(out) < n*m.Rows {
		panic(fmt.Sprintf("kernels: MatMul %dx%d by %d rows: x has %d, out %d", m.Rows, m.Cols, n, len(x), len(out)))
	}
	if m.Rows*m.rowSize() > len(m.Data) {
		panic("kernels: MatMul on a matrix whose data is too short")
	}
	p.matMu.Lock()
	defer p.matMu.Unlock()
	j := &p.job
	j.m, j.rs, j.out, j.x, j.n, j.p = m, m.rowSize(), out, x, n, kp
	j.prepare(p)
	if j.packed() {
		p.Run(m.Rows/packRows, p.groupsFn)
	} else {
		p.Run((m.Rows+3)/4, p.rowsFn)
	}
	j.out, j.x, j.m.Data = nil, nil, nil
}

// prepare converts the activations to the form the weight type's kernel takes.
func (j *matJob) prepare(p *Pool) {
	c, n := j.m.Cols, j.n
	switch j.m.Type {
	case gguf.TypeF32:
		j.xf = j.x[:n*c]
		return
	case gguf.TypeF16:
		j.xf = grow(j.xf, n*c)
		j.xh = grow(j.xh, n*c)
	case gguf.TypeBF16:
		j.xf = grow(j.xf, n*c)
	case gguf.TypeQ8_0, gguf.TypeQ4_0, gguf.TypeQ5_0, gguf.TypeIQ4_NL:
		j.xqs = c / 32 * q8Block
		j.xq = grow(j.xq, n*j.xqs)
		if j.packed() {
			j.xa = grow(j.xa, n*c/32)
		}
		if j.tiled() {
			j.xaT = grow(j.xaT, (n+amxRows-1)/amxRows*amxRows*c/32)
		}
	case gguf.TypeQ4_1, gguf.TypeQ5_1:
		j.xqs = c / 32 * q81Block
		j.xq = grow(j.xq, n*j.xqs)
		if j.packed() {
			j.xm = grow(j.xm, n*c/32)
		}
	case gguf.TypeQ2_K, gguf.TypeQ3_K, gguf.TypeQ4_K, gguf.TypeQ5_K, gguf.TypeQ6_K, gguf.TypeIQ4_XS:
		j.xk = grow(j.xk, n*c/256)
		if j.packed() {
			j.xka = grow(j.xka, n*c/256)
		}
		if j.tiled() {
			j.xkaT = grow(j.xkaT, (n+amxRows-1)/amxRows*amxRows*c/256)
		}
	default:
		panic("kernels: MatMul on unsupported type " + j.m.Type.String())
	}
	if n*c >= 1<<14 {
		p.Run(n, p.prepFn)
	} else {
		j.prepRows(0, n)
	}
}

func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

// prepRows converts activation rows [lo,hi). Each row is converted on its own,
// so the split does not change the result.
func (j *matJob) prepRows(lo, hi int) {
	c := j.m.Cols
	for r := lo; r < hi; r++ {
		x := j.x[r*c : (r+1)*c]
		switch j.m.Type {
		case gguf.TypeF16:
			ks := j.p.set()
			ks.F32ToF16s(j.xh[r*c:(r+1)*c], x)
			ks.F16ToF32s(j.xf[r*c:(r+1)*c], j.xh[r*c:(r+1)*c])
		case gguf.TypeBF16:
			xf := j.xf[r*c : (r+1)*c]
			for i, v := range x {
				xf[i] = gguf.BF16ToF32(gguf.F32ToBF16(v))
			}
		case gguf.TypeQ8_0, gguf.TypeQ4_0, gguf.TypeQ5_0, gguf.TypeIQ4_NL:
			xq := j.xq[r*j.xqs : (r+1)*j.xqs]
			switch {
			case j.p >= pathAVX2:
				var aux *q8Aux
				var k int32
				if j.packed() {
					aux, k = &j.xa[r*c/32], j.auxK()
				}
				if j.p >= pathAVX512 {
					quantQ8AVX512(&xq[0], &x[0], c/32, aux, k)
				} else {
					quantQ8AVX2(&xq[0], &x[0], c/32, aux, k)
				}
				if j.tiled() {
					blockMajor(j.xaT, j.xa, r, c/32)
				}
			default:
				quantizeQ8(xq, x)
				if j.packed() {
					j.auxRow(j.xa[r*c/32:(r+1)*c/32], xq)
				}
			}
		case gguf.TypeQ4_1, gguf.TypeQ5_1:
			xq := j.xq[r*j.xqs : (r+1)*j.xqs]
			switch {
			case j.p >= pathAVX512:
				var aux *q81Aux
				if j.packed() {
					aux = &j.xm[r*c/32]
				}
				quantQ81AVX512(&xq[0], &x[0], c/32, aux)
			case j.p == pathAVX2:
				quantQ81AVX2(&xq[0], &x[0], c/32)
				if j.packed() {
					q81AuxRow(j.xm[r*c/32:(r+1)*c/32], xq)
				}
			default:
				quantizeQ8_1(xq, x)
			}
		case gguf.TypeQ2_K, gguf.TypeQ3_K, gguf.TypeQ4_K, gguf.TypeQ5_K, gguf.TypeQ6_K, gguf.TypeIQ4_XS:
			xk := j.xk[r*c/256 : (r+1)*c/256]
			switch {
			case j.p >= pathAVX512:
				quantQ8KAVX512(&xk[0], &x[0], c/256)
			case j.p == pathAVX2:
				quantQ8KAVX2(&xk[0], &x[0], c/256)
			default:
				quantizeQ8K(xk, x)
			}
			if j.packed() {
				for b := range xk {
					j.xka[r*c/256+b].fill(&xk[b])
					if j.m.Type == gguf.TypeQ5_K || j.m.Type == gguf.TypeQ3_K {
						laneOrder(&xk[b])
					}
				}
				if j.tiled() {
					blockMajor(j.xkaT, j.xka, r, c/256)
				}
			}
		}
	}
}

// rowChunkBytes bounds the weights rows takes at a time: they stay in L2
// while every tile of activation rows passes over them, so a batch streams
// the weights from memory once, not once per tile.
const rowChunkBytes = 256 << 10

// rows computes the outputs of weight-row blocks [lo,hi) (4 rows per block) for
// every activation row, tiled so a block is reused across tile() activation
// rows, a chunk of blocks of at most rowChunkBytes at a time.
func (j *matJob) rows(lo, hi int) {
	rlo, rhi := lo*4, min(hi*4, j.m.Rows)
	if j.widens() {
		j.rowsWide(rlo, rhi)
		return
	}
	tile := j.tile()
	chunk := max(4, rowChunkBytes/max(1, j.rs)&^3)
	for c0 := rlo; c0 < rhi; c0 += chunk {
		c1 := min(c0+chunk, rhi)
		for x0 := 0; x0 < j.n; x0 += tile {
			x1 := min(x0+tile, j.n)
			i := j.rowsDecode(c0, c1)
			for ; i+4 <= c1; i += 4 {
				j.block(i, j.rs, 4, x0, x1)
			}
			for ; i < c1; i++ {
				// A lone row goes through the same 4-row kernel with stride 0,
				// so its bits equal those it would get inside a block.
				j.block(i, 0, 1, x0, x1)
			}
		}
	}
}

// wideMinRows is the batch from which F16 products widen their weights
// (widens): a chunk is widened once and passed over once per xTile rows. On
// the 2-core Zen 2 (1536x1024, one thread, GFLOP/s, F16 tile kernel ->
// widened): 12 rows 61-62 -> 63, 24 rows 62 -> 75, 48 rows 62-63 -> 80-83,
// 512 rows 61 -> 83-86.
const wideMinRows = 2 * xTile

// widens says whether this product runs rowsWide: F16 weights on a CPU whose
// F16 tile kernel reads float32 activations (f16TileF32, no AVX-512), at
// least wideMinRows activation rows, whole 8-element steps.
func (j *matJob) widens() bool {
	return j.m.Type == gguf.TypeF16 && j.p == pathAVX2 && f16TileF32 && j.wide != nil &&
		j.n >= wideMinRows && j.m.Cols%8 == 0
}

// rowsWide is rows for F16 weights that widens each chunk of weight rows to
// float32 once and runs the F32 kernels over the copy: dot4x3F32AVX and
// dot4F32AVX do the arithmetic of dot4x3HFAVX and dot4F16AVX, and the
// widening is exact, so every result has the same bits, but the F32 tile
// kernel converts nothing in its loop (the F16 one spends 4 conversions per 12
// multiply-adds). A chunk is rowChunkBytes of float32 weights, half of rows'.
func (j *matJob) rowsWide(rlo, rhi int) {
	c := j.m.Cols
	buf := <-j.wide
	chunk := max(4, rowChunkBytes/(4*c)&^3)
	if len(buf) < 4*chunk*c {
		buf = make([]byte, 4*chunk*c)
	}
	wf, rs := f32s(buf), 4*c
	for c0 := rlo; c0 < rhi; c0 += chunk {
		c1 := min(c0+chunk, rhi)
		for r := c0; r < c1; r++ {
			Active().F16ToF32s(wf[(r-c0)*c:(r-c0+1)*c], u16s(j.m.Data[r*j.rs:(r+1)*j.rs]))
		}
		for x0 := 0; x0 < j.n; x0 += xTile {
			x1 := min(x0+xTile, j.n)
			i := c0
			for ; i+4 <= c1; i += 4 {
				j.blockFloat(gguf.TypeF32, &buf[(i-c0)*rs], rs, i, 4, x0, x1)
			}
			for ; i < c1; i++ {
				j.blockFloat(gguf.TypeF32, &buf[(i-c0)*rs], 0, i, 1, x0, x1)
			}
		}
	}
	j.wide <- buf
}

// rowsDecode computes, for a single activation row of a float matrix, the
// whole blocks of weight rows from i below rhi in one call, and returns the
// first row it left (i where no kernel applies): F32 on the AVX-512 path 4
// rows a block (dotRowsF32Z, the kernel block uses for one row), F32 on the
// AVX2 path and F16 on either vector path 8 (dotRowsF32AVX, dotRowsF16AVX:
// each row's bits those dot4F32AVX and dot4F16AVX give it). Decode streams
// the weights from memory, and a call per block of 4 rows costs a sixth of
// that time.
func (j *matJob) rowsDecode(i, rhi int) int {
	if j.n != 1 {
		return i
	}
	w, c := &j.m.Data[i*j.rs], j.m.Cols
	switch {
	case j.m.Type == gguf.TypeF32 && j.p >= pathAVX512 && c%16 == 0 && rhi-i >= 4:
		nb := (rhi - i) / 4
		dotRowsF32Z(w, uintptr(j.rs), &j.xf[0], c, nb, &j.out[i])
		return i + 4*nb
	case j.m.Type == gguf.TypeF16 && j.p >= pathAVX2 && c%8 == 0 && rhi-i >= 8:
		nb := (rhi - i) / 8
		dotRowsF16AVX(w, uintptr(j.rs), &j.xf[0], c, nb, &j.out[i], rowsAhead(j.rs))
		return i + 8*nb
	case j.m.Type == gguf.TypeF32 && j.p >= pathAVX2 && c%8 == 0 && rhi-i >= 8:
		nb := (rhi - i) / 8
		dotRowsF32AVX(w, uintptr(j.rs), &j.xf[0], c, nb, &j.out[i], rowsAhead(j.rs))
		return i + 8*nb
	}
	return i
}

// block computes weight rows i..i+nw-1 (read with stride wstride; 0 repeats row
// i) against activation rows [x0,x1).
func (j *matJob) block(i, wstride, nw, x0, x1 int) {
	if j.p == pathGo {
		j.blockGo(i, nw, x0, x1)
		return
	}
	c, rows := j.m.Cols, j.m.Rows
	w := &j.m.Data[i*j.rs]
	var t [12]float32
	switch j.m.Type {
	case gguf.TypeF32, gguf.TypeF16, gguf.TypeBF16:
		if j.m.Type == gguf.TypeF32 && j.p >= pathAVX512 && c%16 == 0 {
			j.blockF32Z(w, wstride, i, nw, x0, x1)
			return
		}
		j.blockFloat(j.m.Type, w, wstride, i, nw, x0, x1)
	case gguf.TypeQ8_0, gguf.TypeQ4_0, gguf.TypeQ5_0, gguf.TypeIQ4_NL:
		t4 := (*[4]float32)(t[:4])
		for r := x0; r < x1; r++ {
			switch j.m.Type {
			case gguf.TypeQ8_0:
				dot4Q8AVX(w, uintptr(wstride), &j.xq[r*j.xqs], c/32, t4)
			case gguf.TypeQ4_0:
				dot4Q4AVX(w, uintptr(wstride), &j.xq[r*j.xqs], c/32, t4)
			case gguf.TypeIQ4_NL:
				dot4IQ4NLAVX(w, uintptr(wstride), &j.xq[r*j.xqs], c/32, t4)
			default:
				dot4Q5AVX(w, uintptr(wstride), &j.xq[r*j.xqs], c/32, t4)
			}
			copy(j.out[r*rows+i:r*rows+i+nw], t[:nw])
		}
	case gguf.TypeQ2_K, gguf.TypeQ3_K, gguf.TypeQ4_K, gguf.TypeQ5_K, gguf.TypeQ6_K, gguf.TypeIQ4_XS:
		j.blockK(i, nw, x0, x1)
	default:
		j.blockGo(i, nw, x0, x1)
	}
}

// blockFloat is block for weights of float type t at w (F32 on the AVX2
// path, F16, BF16; t is F32 for rowsWide's widened F16 rows).
func (j *matJob) blockFloat(t gguf.Type, w *byte, wstride, i, nw, x0, x1 int) {
	c, rows := j.m.Cols, j.m.Rows
	var tt [12]float32
	r := x0
	if nw == 4 && c%8 == 0 && x1-x0 >= 3 {
		// The kernel stores the results itself, a whole tile in one call;
		// a last partial group of 3 is taken as the tile's last 3 rows,
		// whose bits come out the same again.
		g := (x1 - x0) / 3
		j.float4x3(t, w, wstride, i, x0, g, &j.out[x0*rows+i], rows*4)
		if x0+3*g < x1 {
			j.float4x3(t, w, wstride, i, x1-3, 1, &j.out[(x1-3)*rows+i], rows*4)
		}
		return
	}
	for ; r+3 <= x1; r += 3 {
		j.float4x3(t, w, wstride, i, r, 1, &tt[0], 16)
		for q := range 3 {
			j.store(tt[4*q:4*q+4], i, nw, r+q)
		}
	}
	for ; r < x1; r++ {
		t4 := (*[4]float32)(tt[:4])
		switch t {
		case gguf.TypeF32:
			dot4F32AVX(w, uintptr(wstride), &j.xf[r*c], c, t4)
		case gguf.TypeF16:
			dot4F16AVX(w, uintptr(wstride), &j.xf[r*c], c, t4)
		default:
			dot4BF16AVX(w, uintptr(wstride), &j.xf[r*c], c, t4)
		}
		j.store(tt[:4], i, nw, r)
	}
}

// float4x3 runs float type t's 4x3 kernel on weight rows i.. (stride
// wstride) against groups*3 activation rows from r, storing each row's 4
// results at out + row*ostride bytes.
func (j *matJob) float4x3(t gguf.Type, w *byte, wstride, i, r, groups int, out *float32, ostride int) {
	c := j.m.Cols
	switch t {
	case gguf.TypeF32:
		dot4x3F32AVX(w, uintptr(wstride), &j.xf[r*c], uintptr(c*4), c, groups, out, uintptr(ostride))
	case gguf.TypeF16:
		if f16TileF32 {
			dot4x3HFAVX(w, uintptr(wstride), &j.xf[r*c], uintptr(c*4), c, groups, out, uintptr(ostride))
			return
		}
		dot4x3HHAVX(w, uintptr(wstride), &j.xh[r*c], uintptr(c*2), c, groups, out, uintptr(ostride))
	default:
		dot4x3BF16AVX(w, uintptr(wstride), &j.xf[r*c], uintptr(c*4), c, groups, out, uintptr(ostride))
	}
}

// blockK is block for Q2_K, Q3_K, Q4_K, Q5_K, Q6_K and IQ4_XS weights in the file's layout (the
// AVX-512 path packs Q4_K and Q6_K; see groups): one AVX2 row product per
// weight row and activation row, each bitwise equal to the portable one.
func (j *matJob) blockK(i, nw, x0, x1 int) {
	nb := j.m.Cols / 256
	for r := x0; r < x1; r++ {
		o := j.out[r*j.m.Rows+i : r*j.m.Rows+i+nw]
		for q := range o {
			w, x := &j.m.Data[(i+q)*j.rs], &j.xk[r*nb]
			switch j.m.Type {
			case gguf.TypeQ4_K:
				o[q] = dotQ4KAVX2(w, x, nb)
			case gguf.TypeQ5_K:
				o[q] = dotQ5KAVX2(w, x, nb)
			case gguf.TypeIQ4_XS:
				o[q] = dotIQ4XSAVX2(w, x, nb)
			case gguf.TypeQ3_K:
				o[q] = dotQ3KAVX2(w, x, nb)
			case gguf.TypeQ2_K:
				o[q] = dotQ2KAVX2(w, x, nb)
			default:
				o[q] = dotQ6KAVX2(w, x, nb)
			}
		}
	}
}

// store writes 4 float-kernel results for activation row r, first adding the
// k%8 tail, which the assembly leaves out, element by element.
func (j *matJob) store(t []float32, i, nw, r int) {
	c := j.m.Cols
	o := j.out[r*j.m.Rows+i : r*j.m.Rows+i+nw]
	k0 := c &^ 7
	if k0 == c {
		copy(o, t[:nw])
		return
	}
	x := j.xf[r*c : (r+1)*c]
	for q := range nw {
		s := t[q]
		w := j.m.Data[(i+q)*j.rs : (i+q+1)*j.rs]
		for k := k0; k < c; k++ {
			s = s + float32(j.weight(w, k)*x[k])
		}
		o[q] = s
	}
}

// weight returns element k of a float-type weight row.
func (j *matJob) weight(w []byte, k int) float32 {
	switch j.m.Type {
	case gguf.TypeF16:
		return gguf.F16ToF32(uint16(w[2*k]) | uint16(w[2*k+1])<<8)
	case gguf.TypeBF16:
		return gguf.BF16ToF32(uint16(w[2*k]) | uint16(w[2*k+1])<<8)
	}
	return f32s(w[4*k : 4*k+4])[0]
}

// blockGo is block with the portable kernels, one element at a time.
func (j *matJob) blockGo(i, nw, x0, x1 int) {
	c, rows := j.m.Cols, j.m.Rows
	for r := x0; r < x1; r++ {
		var xq []byte // this row's activations in the weight type's format
		var xk []q8K
		switch {
		case j.m.Type.BlockSize() == 256:
			xk = j.xk[r*c/256 : (r+1)*c/256]
		case j.m.Type.BlockSize() == 32:
			xq = j.xq[r*j.xqs : (r+1)*j.xqs]
		}
		for q := range nw {
			w := j.m.Data[(i+q)*j.rs : (i+q+1)*j.rs]
			var s float32
			switch j.m.Type {
			case gguf.TypeF32:
				s = dotF32Go(f32s(w), j.xf[r*c:(r+1)*c])
			case gguf.TypeF16:
				s = dotF16F32Go(u16s(w), j.xf[r*c:(r+1)*c])
			case gguf.TypeBF16:
				s = dotBF16Go(u16s(w), j.xf[r*c:(r+1)*c])
			case gguf.TypeQ8_0:
				s = dotQ8Go(w, xq, c/32)
			case gguf.TypeQ4_0:
				s = dotQ4Go(w, xq, c/32)
			case gguf.TypeQ4_1:
				s = dotQ4_1Go(w, xq, c/32)
			case gguf.TypeQ5_0:
				s = dotQ5_0Go(w, xq, c/32)
			case gguf.TypeQ5_1:
				s = dotQ5_1Go(w, xq, c/32)
			case gguf.TypeIQ4_NL:
				s = dotIQ4NLGo(w, xq, c/32)
			case gguf.TypeQ2_K:
				s = dotQ2KGo(w, xk)
			case gguf.TypeQ3_K:
				s = dotQ3KGo(w, xk)
			case gguf.TypeQ4_K:
				s = dotQ4KGo(w, xk)
			case gguf.TypeQ5_K:
				s = dotQ5KGo(w, xk)
			case gguf.TypeQ6_K:
				s = dotQ6KGo(w, xk)
			case gguf.TypeIQ4_XS:
				s = dotIQ4XSGo(w, xk)
			}
			j.out[r*rows+i+q] = s
		}
	}
}

// auxRow fills the packed kernels' side data for one Q8_0 activation row.
func (j *matJob) auxRow(a []q8Aux, xq []byte) {
	k := j.auxK()
	for b := range a {
		blk := xq[b*q8Block : (b+1)*q8Block]
		var s int32
		for _, q := range blk[2:] {
			s += int32(int8(q))
		}
		a[b] = q8Aux{d: half(blk), c: k * s}
	}
}

// auxK is the offset factor of the packed weights: 128 for Q8_0, 8 for Q4_0,
// 16 for Q5_0.
func (j *matJob) auxK() int32 {
	switch j.m.Type {
	case gguf.TypeQ4_0:
		return 8
	case gguf.TypeQ5_0:
		return 16
	}
	return 128
}

// blockF32Z is block for F32 rows a multiple of 16 long on the AVX-512 path:
// 4 weight rows by 4 activation rows per call, then one at a time, all with
// the same 16-lane order.
func (j *matJob) blockF32Z(w *byte, wstride, i, nw, x0, x1 int) {
	c, rows := j.m.Cols, j.m.Rows
	var t [16]float32
	r := x0
	for ; r+4 <= x1; r += 4 {
		dot4x4F32Z(w, uintptr(wstride), &j.xf[r*c], uintptr(c*4), c, &t)
		for q := range 4 {
			copy(j.out[(r+q)*rows+i:(r+q)*rows+i+nw], t[4*q:4*q+nw])
		}
	}
	for ; r < x1; r++ {
		dotRowsF32Z(w, uintptr(wstride), &j.xf[r*c], c, 1, &t[0])
		copy(j.out[r*rows+i:r*rows+i+nw], t[:nw])
	}
}

// rowsAhead is how far past the start of the next block of 8 rows (rs bytes
// each) dotRowsF16AVX and dotRowsF32AVX ask for weights: decodeAhead bytes
// ahead of the block they read, or the next block where a block is longer.
func rowsAhead(rs int) uintptr { return uintptr(max(0, decodeAhead-8*rs)) }

// decodeAhead: with the next block only, short blocks (8 rows of 2048 F16 or
// 576 F32 weights: 32 or 18 KiB) were asked for too late. On the 2-core Zen 2,
// 5 alternated runs each: llama-3.2-1b F16 decode at 2 threads 12.7 -> 13.7
// tokens/s, smollm2-135m F32 at 1 thread 30.7 -> 32.4; qwen3-0.6b F16 level.
const decodeAhead = 64 << 10

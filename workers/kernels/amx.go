package kernels

import (
	"unsafe"

	"github.com/bulkhead-ai/bulkhead/models/gguf"
)

// AMX tiles (Intel's Advanced Matrix Extensions: eight 1 KiB tile registers
// and TDPB*D, a 16x64-byte by 64x16-byte int8 product per instruction) serve
// the AMX path's batched Q8_0, Q4_0, Q4_K and Q6_K products: per 32-element block,
// one tile of up to 16 activation rows times one of 16 packed weight rows
// gives every exact int32 block sum at once, and the float steps that follow
// are the AVX-512 kernels' (QFIN), so the results are bitwise the portable
// ones. The kernels' Go models (tileModel, tileModelQ4K, tileModelQ6K) are
// in the tests.

// amxInfo is what this process found of AMX tiles when it started.
type amxInfo struct {
	usable   bool   // the CPU has AMX-TILE and AMX-INT8 and the OS granted tile data
	emulated bool   // a test build (amxemu): the tile instructions are emulated
	why      string // why not, when not usable
}

// amx is read once at start-up (detectAMX), before any path is chosen.
var amx = detectAMX()

// AMX says whether this process computes with AMX tiles, and if not, why not:
// the CPU lacks them, the OS refused them, or EnvKernels asked for a lower
// path. Serving processes log it and `bulkhead bench engine` reports it.
func AMX() string {
	switch {
	case active == pathAMX && amx.emulated:
		return "on, emulated (a test build: -tags amxemu)"
	case active == pathAMX:
		return "on"
	case amx.usable:
		return "off: " + EnvKernels + "=" + active.String()
	default:
		return "off: " + amx.why
	}
}

// amxRows is the most activation rows one tile product takes; a product of
// fewer rows than this runs the AVX-512 kernels instead.
const amxRows = 16

// tileQ8Kernel computes, for activation rows [0,m) (m <= 16) and one packed
// Q8_0 or Q4_0 group (w, nb blocks), out[r*16+i] = dot(weight row i, row r)
// as dotQ8Go or dotQ4Go does; aux holds the rows' q8Aux block-major
// ([nb][16]) and x the rows' Q8_0 blocks, xstride bytes apart. Rows m..15 of
// out are undefined. gemmQ8AMX and gemmQ4AMX are the assembly ones.
type tileQ8Kernel func(w *byte, nb int, x *byte, xstride uintptr, m int, aux *q8Aux, out *[256]float32)

// The packed Q8_0 block (repack.go: 16 f16 scales, then 8 slices of 64
// bytes, slice s holding bytes 4s..4s+3 of each row) is an AMX B tile as it
// is: TDPB*D reads column i of a tile row as 4 consecutive bytes of weight
// row i. Q4_0's 4 slices of nibble bytes make one after masking (the low
// nibbles, elements 0..15) and shifting (the high ones, 16..31).

// tiles computes the outputs of the packed group at w (weight rows
// i..i+15) for every activation row, up to 16 rows per tile product.
func (j *matJob) tiles(w *byte, i int) {
	rows := j.m.Rows
	var out [256]float32
	for r := 0; r < j.n; r += amxRows {
		m := min(amxRows, j.n-r)
		j.tileProduct(w, r, m, &out)
		for k := range m {
			copy(j.out[(r+k)*rows+i:(r+k)*rows+i+packRows], out[k*16:k*16+16])
		}
	}
}

// tileProduct runs the type's tile kernel on activation rows r..r+m-1 (one
// panel: j.xaT or j.xkaT holds their aux block-major, prepRows). out does
// not escape: the test hooks get a copy.
func (j *matJob) tileProduct(w *byte, r, m int, out *[256]float32) {
	if j.m.Type.BlockSize() == 256 {
		nb := j.m.Cols / 256
		x, a, xs := &j.xk[r*nb], &j.xkaT[r/amxRows*nb*amxRows], uintptr(nb)*unsafe.Sizeof(q8K{})
		switch {
		case j.tileKKern != nil:
			tmp := new([256]float32)
			j.tileKKern(w, nb, x, xs, m, a, tmp)
			*out = *tmp
		case j.m.Type == gguf.TypeQ6_K:
			gemmQ6KAMX(w, nb, x, xs, m, a, out)
		default:
			gemmQ4KAMX(w, nb, x, xs, m, a, out)
		}
		return
	}
	nb := j.m.Cols / 32
	x, a, xs := &j.xq[r*j.xqs], &j.xaT[r/amxRows*nb*amxRows], uintptr(j.xqs)
	switch {
	case j.tileKern != nil:
		tmp := new([256]float32)
		j.tileKern(w, nb, x, xs, m, a, tmp)
		*out = *tmp
	case j.m.Type == gguf.TypeQ4_0:
		gemmQ4AMX(w, nb, x, xs, m, a, out)
	default:
		gemmQ8AMX(w, nb, x, xs, m, a, out)
	}
}

// tiled says whether this product runs on AMX tiles.
func (j *matJob) tiled() bool {
	switch j.m.Type {
	case gguf.TypeQ8_0, gguf.TypeQ4_0, gguf.TypeQ4_K, gguf.TypeQ6_K:
		return j.p == pathAMX && j.n >= amxRows && j.packed()
	}
	return false
}

// blockMajor copies activation row r's per-block aux (src, nb blocks a
// row) into dst, where a tile kernel reads a block's entries for 16 rows
// together ([r/16][block][r%16]).
func blockMajor[T any](dst, src []T, r, nb int) {
	t := dst[r/amxRows*nb*amxRows:]
	for b, a := range src[r*nb : (r+1)*nb] {
		t[b*amxRows+r%amxRows] = a
	}
}

// tileKKernel is tileQ8Kernel for a packed Q4_K or Q6_K group: x holds the rows'
// Q8_K blocks, xstride bytes apart, and aux their q8KAux block-major
// ([nb][16]).
type tileKKernel func(w *byte, nb int, x *q8K, xstride uintptr, m int, aux *q8KAux, out *[256]float32)

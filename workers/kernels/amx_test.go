package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"unsafe"

	"github.com/bulkhead-ai/bulkhead/models/gguf"
)

// amxShapes are Q8_0 products the tile path takes: whole panels of 16
// activation rows and partial last ones, one block and several.
var amxShapes = []struct{ rows, cols, n int }{
	{16, 32, 16}, {16, 256, 17}, {32, 64, 31}, {48, 512, 40}, {16, 2048, 33},
}

// amxTypes are the types the AMX path puts on tiles.
var amxTypes = []gguf.Type{gguf.TypeQ8_0, gguf.TypeQ4_0, gguf.TypeQ4_K, gguf.TypeQ6_K}

// shapesFor is amxShapes with the K-quants' columns a multiple of 256.
func shapesFor(typ gguf.Type, shapes []struct{ rows, cols, n int }) []struct{ rows, cols, n int } {
	if typ.BlockSize() != 256 {
		return shapes
	}
	out := slices.Clone(shapes)
	for i := range out {
		out[i].cols = (out[i].cols + 255) / 256 * 256
	}
	return out
}

// useModel puts the Go model of typ's tile kernel into p's job, counting
// its calls in calls (when not nil).
func useModel(p *Pool, typ gguf.Type, calls *atomic.Int64) {
	count := func() {
		if calls != nil {
			calls.Add(1)
		}
	}
	if typ.BlockSize() == 256 {
		model := tileModelQ4K
		if typ == gguf.TypeQ6_K {
			model = tileModelQ6K
		}
		p.job.tileKKern = func(w *byte, nb int, x *q8K, xstride uintptr, m int, aux *q8KAux, out *[256]float32) {
			count()
			model(w, nb, x, xstride, m, aux, out)
		}
		return
	}
	model := tileModel(typ)
	p.job.tileKern = func(w *byte, nb int, x *byte, xstride uintptr, m int, aux *q8Aux, out *[256]float32) {
		count()
		model(w, nb, x, xstride, m, aux, out)
	}
}

// TestTilePathModel runs the AMX path's tile driver (activation aux laid out
// block-major, panels of up to 16 rows, outputs copied from the tile) with
// the Go model of the tile kernel: every output must be bitwise the portable
// product's, and the tiles must have been used. It needs the AVX-512
// quantizer, so it runs on any AVX-512 CPU, AMX or not.
func TestTilePathModel(t *testing.T) {
	if detectPath() < pathAVX512 {
		t.Skipf("this CPU or build lacks the AVX-512 kernels (best here: %s); the AMX tile path is not tested", detectPath())
	}
	rng := rand.New(rand.NewPCG(11, 12))
	for _, typ := range amxTypes {
		for _, sh := range shapesFor(typ, amxShapes) {
			for _, threads := range []int{1, 2} {
				t.Run(fmt.Sprintf("%s/%dx%d/n%d/t%d", typ, sh.rows, sh.cols, sh.n, threads), func(t *testing.T) {
					m := amxMatrix(t, rng, typ, sh.rows, sh.cols)
					x := randVec(rng, sh.n*sh.cols)
					p := NewPool(threads)
					defer p.Close()
					var calls atomic.Int64
					useModel(p, typ, &calls)
					got := make([]float32, sh.n*sh.rows)
					p.matMul(got, m, x, sh.n, pathAMX)
					want := make([]float32, sh.n*sh.rows)
					p.matMul(want, m, x, sh.n, pathGo)
					sameBits(t, got, want, sh.rows)
					if w := int64(sh.rows / 16 * ((sh.n + 15) / 16)); calls.Load() != w {
						t.Fatalf("%d tile products, want %d", calls.Load(), w)
					}
				})
			}
		}
	}
}

// amxMatrix is a random matrix of type typ laid out for the AMX path.
func amxMatrix(t *testing.T, rng *rand.Rand, typ gguf.Type, rows, cols int) Matrix {
	t.Helper()
	m, err := pathAMX.set().NewMatrix(typ, rows, cols, randMatrix(t, rng, typ, rows, cols).Data)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestTileKernelAMX checks the AMX assembly against its Go model, bitwise,
// for every panel height 1..16 (through MatMul, so the tile config sees each
// height) and the shapes above. It runs where the CPU has AMX tiles and the
// OS grants them, and, built with -tags amxemu (make test), on any AVX-512
// CPU with the tile instructions emulated.
func TestTileKernelAMX(t *testing.T) {
	if !amx.usable {
		t.Skipf("no AMX here (%s); the AMX kernels gemmQ8AMX, gemmQ4AMX, gemmQ4KAMX and gemmQ6KAMX are not tested on this machine (-tags amxemu runs them with the tile instructions emulated)", amx.why)
	}
	t.Logf("AMX: %s", AMX())
	rng := rand.New(rand.NewPCG(13, 14))
	shapes := amxShapes
	for n := 16; n < 32; n++ {
		shapes = append(shapes, struct{ rows, cols, n int }{16, 96, n})
	}
	for _, typ := range amxTypes {
		for _, sh := range shapesFor(typ, shapes) {
			t.Run(fmt.Sprintf("%s/%dx%d/n%d", typ, sh.rows, sh.cols, sh.n), func(t *testing.T) {
				m := amxMatrix(t, rng, typ, sh.rows, sh.cols)
				x := randVec(rng, sh.n*sh.cols)
				p := NewPool(2)
				defer p.Close()
				got := make([]float32, sh.n*sh.rows)
				p.matMul(got, m, x, sh.n, pathAMX)
				useModel(p, typ, nil)
				want := make([]float32, sh.n*sh.rows)
				p.matMul(want, m, x, sh.n, pathAMX)
				sameBits(t, got, want, sh.rows)
			})
		}
	}
}

func sameBits(t *testing.T, got, want []float32, rows int) {
	t.Helper()
	for i := range got {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("row %d col %d: %g (%#x), want %g (%#x)", i/rows, i%rows, got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
		}
	}
}

// TestAMXStatus: AMX() says on or off, and why off.
func TestAMXStatus(t *testing.T) {
	s := AMX()
	switch {
	case active == pathAMX && !strings.HasPrefix(s, "on"):
		t.Fatalf("AMX() = %q with the AMX path active", s)
	case active != pathAMX && !strings.HasPrefix(s, "off: "):
		t.Fatalf("AMX() = %q with the %s path active", s, active)
	case amx.usable && active != pathAMX && !strings.Contains(s, EnvKernels):
		t.Fatalf("AMX() = %q: usable here, so only %s can have turned it off", s, EnvKernels)
	}
	t.Logf("AMX: %s", s)
}

// TestTilePathAllocs: once its buffers have grown, a product on tiles
// allocates nothing (the tile kernels' output stays on the stack).
func TestTilePathAllocs(t *testing.T) {
	if !amx.usable {
		t.Skipf("no AMX here (%s); -tags amxemu runs this with the tile instructions emulated", amx.why)
	}
	rng := rand.New(rand.NewPCG(15, 16))
	for _, typ := range amxTypes {
		m := amxMatrix(t, rng, typ, 32, 512)
		x := randVec(rng, 20*512)
		out := make([]float32, 20*32)
		p := NewPool(2)
		p.matMul(out, m, x, 20, pathAMX)
		if n := testing.AllocsPerRun(10, func() { p.matMul(out, m, x, 20, pathAMX) }); n != 0 {
			t.Errorf("%s: %v allocations per product", typ, n)
		}
		p.Close()
	}
}

// tileModel is the tile kernel of packed type t (Q8_0 or Q4_0) in Go: the
// reference its assembly is tested against, and what the tile driver's tests
// run on CPUs without AMX. c is what TDPBSUD leaves in the accumulator tile:
// signed activation bytes times the weights' unsigned bytes (Q8_0's
// sign-flipped quants, Q4_0's nibbles), over the block; the aux offset term
// takes the flip or the nibbles' 8 back off.
func tileModel(t gguf.Type) tileQ8Kernel {
	bs := packBlock(t)
	weight := func(blk []byte, k, i int) int32 { // Q8_0: B's row k/4, column i, byte k%4
		return int32(blk[2*packRows+64*(k/4)+4*i+k%4])
	}
	if t == gguf.TypeQ4_0 { // low nibbles of the slices are k < 16, high ones 16 on
		weight = func(blk []byte, k, i int) int32 {
			b := blk[2*packRows+64*(k%16/4)+4*i+k%4]
			return int32(b>>(4*(k/16))) & 15
		}
	}
	return func(w *byte, nb int, x *byte, xstride uintptr, m int, aux *q8Aux, out *[256]float32) {
		wb := unsafe.Slice(w, nb*bs)
		xb := unsafe.Slice(x, (m-1)*int(xstride)+nb*q8Block)
		ab := unsafe.Slice(aux, nb*amxRows)
		var acc [256]float32
		for b := range nb {
			blk := wb[b*bs : (b+1)*bs]
			for r := range m {
				xs := xb[r*int(xstride)+b*q8Block+2 : r*int(xstride)+(b+1)*q8Block]
				a := ab[b*amxRows+r]
				for i := range packRows {
					var c int32
					for k := range 32 {
						c += int32(int8(xs[k])) * weight(blk, k, i)
					}
					d := half(blk[2*i:2*i+2]) * a.d
					acc[r*16+i] = acc[r*16+i] + float32(d*float32(c-a.c))
				}
			}
		}
		*out = acc
	}
}

// tileModelK is the Go model of a K-quant tile kernel of type t: for each
// super-block, activation row and weight row, step takes the row's float
// sum to the next super-block (blk: the packed super-block, i: the weight
// row in the group).
func tileModelK(t gguf.Type, step func(blk []byte, xb *q8K, a *q8KAux, i int, sum float32) float32) tileKKernel {
	bs := packBlock(t)
	return func(w *byte, nb int, x *q8K, xstride uintptr, m int, aux *q8KAux, out *[256]float32) {
		wb := unsafe.Slice(w, nb*bs)
		ab := unsafe.Slice(aux, nb*amxRows)
		var acc [256]float32
		for b := range nb {
			blk := wb[b*bs : (b+1)*bs]
			for r := range m {
				xb := (*q8K)(unsafe.Add(unsafe.Pointer(x), uintptr(r)*xstride+uintptr(b)*unsafe.Sizeof(q8K{})))
				for i := range packRows {
					acc[r*16+i] = step(blk, xb, &ab[b*amxRows+r], i, acc[r*16+i])
				}
			}
		}
		*out = acc
	}
}

// tileModelQ4K is gemmQ4KAMX in Go: per super-block and sub-block t, the
// exact tile sums of the nibbles (chunk t/2's slices, low nibbles for even
// t) times the sub-block's scales, the mins against the activations'
// 32-element sums, then dotQ4KGo's float steps.
var tileModelQ4K = tileModelK(gguf.TypeQ4_K, func(blk []byte, xb *q8K, a *q8KAux, i int, sum float32) float32 {
	var isum, msum int32
	for t := range 8 {
		var c int32
		for k := range 32 {
			q := blk[320+512*(t/2)+64*(k/4)+4*i+k%4] >> (4 * (t % 2)) & 15
			c += int32(xb.qs[32*t+k]) * int32(q)
		}
		isum += int32(blk[64+16*t+i]) * c
		msum += int32(blk[192+32*(t/2)+2*i+t%2]) * int32(a.bs32[t])
	}
	d := half(blk[2*i:2*i+2]) * a.d
	dmin := half(blk[32+2*i:32+2*i+2]) * a.d
	sum = sum + float32(d*float32(isum))
	return sum - float32(dmin*float32(msum))
})

// tileModelQ6K is gemmQ6KAMX in Go: per super-block and 16-element
// sub-block sb, the exact sums of the 6-bit values (sb's two nibble slices
// and its slice of 2-bit pairs) against the activations, less 32 times
// their sum, times the sub-block's scales; then dotQ6KGo's float step.
var tileModelQ6K = tileModelK(gguf.TypeQ6_K, func(blk []byte, xb *q8K, a *q8KAux, i int, sum float32) float32 {
	var isum int32
	for sb := range 16 {
		p := blk[288+192*sb:]
		var c int32
		for k := range 16 { // B row k/4: elements 4(k/4)+k%4
			t, col := k/4, 4*i+k%4
			q := p[64*(t/2)+col] >> (4 * (t % 2)) & 15
			q |= (p[128+col] >> (2 * t) & 3) << 4
			c += int32(xb.qs[16*sb+k]) * int32(q)
		}
		isum += int32(int8(blk[32+16*sb+i])) * (c - a.c16[sb])
	}
	d := half(blk[2*i:2*i+2]) * a.d
	return sum + float32(d*float32(isum))
})

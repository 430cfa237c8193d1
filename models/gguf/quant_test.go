package gguf

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"testing"
)

// quantFiles are the llama-quantize outputs of stories15m-shape-f32.gguf.
var quantFiles = []struct {
	rel  string
	main Type // the type of most weight matrices
}{
	{"models/synth/stories15m-shape-q8_0.gguf", TypeQ8_0},
	{"models/synth/stories15m-shape-q4_0.gguf", TypeQ4_0},
}

const f32File = "models/synth/stories15m-shape-f32.gguf"

// TestQuantizeMatchesLlamaQuantize runs our quantizers on every F32 source
// tensor that llama-quantize quantized and requires the file's exact blocks.
func TestQuantizeMatchesLlamaQuantize(t *testing.T) {
	src := openShared(t, f32File)
	for _, qf := range quantFiles {
		t.Run(qf.main.String(), func(t *testing.T) {
			f := openShared(t, qf.rel)
			checked := map[Type]int{}
			for _, ti := range f.Tensors {
				if ti.Type == TypeF32 {
					continue
				}
				x := tensorF32(t, src, ti.Name)
				_, want, _ := f.Tensor(ti.Name)
				var got []byte
				switch ti.Type {
				case TypeQ8_0:
					got = QuantizeQ8_0(x)
				case TypeQ4_0:
					got = QuantizeQ4_0(x)
				default:
					t.Fatalf("tensor %q has unexpected type %s", ti.Name, ti.Type)
				}
				if !bytes.Equal(got, want) {
					bs := ti.Type.TypeSize()
					for i := 0; i < len(want); i += bs {
						if !bytes.Equal(got[i:i+bs], want[i:i+bs]) {
							t.Fatalf("%s (%s) block %d: got %x, want %x", ti.Name, ti.Type, i/bs, got[i:i+bs], want[i:i+bs])
						}
					}
				}
				checked[ti.Type]++
			}
			if checked[qf.main] < 6*7 {
				t.Errorf("checked %v tensors, want all %d weight matrices in %s", checked, 6*7, qf.main)
			}
		})
	}
}

// TestQuantizedFileLayout pins what llama-quantize did to each tensor: norms
// stay F32 with unchanged bytes, Q4_0 keeps token_embd in Q8_0.
func TestQuantizedFileLayout(t *testing.T) {
	src := openShared(t, f32File)
	for _, qf := range quantFiles {
		t.Run(qf.main.String(), func(t *testing.T) {
			f := openShared(t, qf.rel)
			if len(f.Tensors) != len(src.Tensors) {
				t.Fatalf("%d tensors, source has %d", len(f.Tensors), len(src.Tensors))
			}
			for _, ti := range f.Tensors {
				want := qf.main
				switch {
				case len(ti.Shape) == 1:
					want = TypeF32
				case ti.Name == "token_embd.weight":
					want = TypeQ8_0
				}
				if ti.Type != want {
					t.Errorf("%s is %s, want %s", ti.Name, ti.Type, want)
				}
				if ti.Type == TypeF32 {
					_, a, _ := f.Tensor(ti.Name)
					_, b, _ := src.Tensor(ti.Name)
					if !bytes.Equal(a, b) {
						t.Errorf("F32 tensor %s differs from the source", ti.Name)
					}
				}
			}
		})
	}
}

func TestQuantizeQ8_0Blocks(t *testing.T) {
	ramp := make([]float32, QK)
	for i := range ramp {
		ramp[i] = float32(i-16) * 0.25 // -4 .. 3.75; amax 4, d = 4/127
	}
	half := make([]float32, QK)
	half[0] = 127 // d = 1, id = 1
	half[1], half[2], half[3] = 2.5, -2.5, 0.49999997
	for _, tc := range []struct {
		name  string
		x     []float32
		wantD uint16
		wantQ []int8 // nil: not checked element by element
	}{
		{"zeros", make([]float32, QK), 0, make([]int8, QK)},
		{"halves round away from zero", half, 0x3c00, append([]int8{127, 3, -3, 0}, make([]int8, QK-4)...)},
		{"ramp", ramp, F32ToF16(float32(4) / 127), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := QuantizeQ8_0(tc.x)
			if len(b) != 34 {
				t.Fatalf("%d bytes, want 34", len(b))
			}
			if d := binary.LittleEndian.Uint16(b); d != tc.wantD {
				t.Errorf("d = %#04x, want %#04x", d, tc.wantD)
			}
			for j, w := range tc.wantQ {
				if int8(b[2+j]) != w {
					t.Errorf("q[%d] = %d, want %d", j, int8(b[2+j]), w)
				}
			}
			if tc.name == "ramp" && (int8(b[2]) != -127 || int8(b[2+31]) != 119) {
				t.Errorf("ramp ends quantized to %d and %d, want -127 and 119", int8(b[2]), int8(b[2+31]))
			}
		})
	}
}

func TestQuantizeQ4_0Blocks(t *testing.T) {
	negMax := make([]float32, QK)
	negMax[0] = -8 // max keeps its sign: d = -8/-8 = 1
	negMax[1] = 8  // the opposite extreme clamps to 15
	negMax[16] = 3 // second half goes to the high nibble
	negMax[17] = -2.5
	tie := make([]float32, QK)
	tie[3], tie[4] = 4, -4 // the first of equal magnitudes wins: d = 4/-8
	for _, tc := range []struct {
		name  string
		x     []float32
		wantD uint16
		want  []uint8 // quants by element
	}{
		{"zeros give d = -0 and quants 8", make([]float32, QK), 0x8000, nil},
		{"negative max", negMax, 0x3c00, map16(map[int]uint8{0: 0, 1: 15, 16: 11, 17: 6})},
		{"tie keeps first", tie, F32ToF16(-0.5), map16(map[int]uint8{3: 0, 4: 15})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := QuantizeQ4_0(tc.x)
			if len(b) != 18 {
				t.Fatalf("%d bytes, want 18", len(b))
			}
			if d := binary.LittleEndian.Uint16(b); d != tc.wantD {
				t.Errorf("d = %#04x, want %#04x", d, tc.wantD)
			}
			want := tc.want
			if want == nil {
				want = map16(nil)
			}
			for j := range QK {
				got := b[2+j%16] & 0xf
				if j >= 16 {
					got = b[2+j%16] >> 4
				}
				if got != want[j] {
					t.Errorf("q[%d] = %d, want %d", j, got, want[j])
				}
			}
		})
	}
}

// map16 returns 32 quants of 8 (zero) with the given exceptions.
func map16(m map[int]uint8) []uint8 {
	q := bytes.Repeat([]byte{8}, QK)
	for i, v := range m {
		q[i] = v
	}
	return q
}

func TestQuantizeSizeErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		fn   func() error
	}{
		{"q8_0 partial block", func() error { return QuantizeQ8_0Into(make([]byte, 34), make([]float32, 31)) }},
		{"q8_0 short dst", func() error { return QuantizeQ8_0Into(make([]byte, 33), make([]float32, 32)) }},
		{"q4_0 partial block", func() error { return QuantizeQ4_0Into(make([]byte, 18), make([]float32, 33)) }},
		{"q4_0 long dst", func() error { return QuantizeQ4_0Into(make([]byte, 19), make([]float32, 32)) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.fn(); !errors.Is(err, ErrSize) {
				t.Fatalf("got %v, want ErrSize", err)
			}
		})
	}
	t.Run("QuantizeQ8_0 panics on a partial block", func(t *testing.T) {
		defer func() {
			if recover() == nil {
				t.Fatal("no panic")
			}
		}()
		QuantizeQ8_0(make([]float32, 5))
	})
}

// ggmlF32ToF16 is GGML's scalar float-to-half conversion (the bit trick of the
// FP16 library that ggml_compute_fp32_to_fp16 uses without F16C), written out
// here to check F32ToF16, on which the quantizers' bit-exactness rests.
func ggmlF32ToF16(f float32) uint16 {
	scaleToInf := math.Float32frombits(0x77800000)  // 2^112
	scaleToZero := math.Float32frombits(0x08800000) // 2^-110
	base := float32(abs32(f)*scaleToInf) * scaleToZero
	w := math.Float32bits(f)
	shl1 := w + w
	sign := w & 0x80000000
	bias := shl1 & 0xff000000
	if bias < 0x71000000 {
		bias = 0x71000000
	}
	base = math.Float32frombits(bias>>1+0x07800000) + base
	bits := math.Float32bits(base)
	nonsign := (bits>>13)&0x7c00 + bits&0x0fff
	if shl1 > 0xff000000 {
		nonsign = 0x7e00
	}
	return uint16(sign>>16) | uint16(nonsign)
}

func TestF32ToF16MatchesGGML(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	check := func(f float32) {
		t.Helper()
		if math.IsNaN(float64(f)) {
			return // GGML drops NaN payloads; no quantizer produces a NaN scale from finite input
		}
		if got, want := F32ToF16(f), ggmlF32ToF16(f); got != want {
			t.Fatalf("F32ToF16(%g = %#08x) = %#04x, GGML gives %#04x", f, math.Float32bits(f), got, want)
		}
	}
	for _, f := range []float32{0, 65504, 65520, 65519.998, 1e-8, 2.9802322e-08, 2.9802326e-08, 6.1035156e-05, 6.097555e-05, float32(math.Inf(1))} {
		check(f)
		check(-f)
	}
	for range 1 << 20 {
		check(math.Float32frombits(r.Uint32()))
		check(float32(r.NormFloat64() * 0.02 / 127)) // the range of real Q8_0 scales
	}
}

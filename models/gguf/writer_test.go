package gguf

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/bulkhead-ai/bulkhead/models/refdatatest"
)

// copyToWriter rebuilds f in a Writer: same keys in the same order, same tensors.
func copyToWriter(t testing.TB, f *File) *Writer {
	t.Helper()
	w := NewWriter()
	for _, k := range f.Keys {
		if err := w.Set(k, f.KV[k]); err != nil {
			t.Fatalf("Set(%q): %v", k, err)
		}
	}
	for _, ti := range f.Tensors {
		_, data, err := f.Tensor(ti.Name)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.AddTensor(ti.Name, ti.Shape, ti.Type, data); err != nil {
			t.Fatalf("AddTensor(%q): %v", ti.Name, err)
		}
	}
	return w
}

func writeBytes(t testing.TB, w *Writer) []byte {
	t.Helper()
	var buf bytes.Buffer
	n, err := w.WriteTo(&buf)
	if err != nil {
		t.Fatalf("WriteTo: %v", err)
	}
	if n != int64(buf.Len()) {
		t.Fatalf("WriteTo returned %d, wrote %d", n, buf.Len())
	}
	size, err := w.Size()
	if err != nil || size != n {
		t.Fatalf("Size() = %d, %v; WriteTo wrote %d", size, err, n)
	}
	return buf.Bytes()
}

// allValues is one metadata value of every kind the format has.
func allValues() []struct {
	key string
	v   Value
} {
	return []struct {
		key string
		v   Value
	}{
		{"u8", Value{Type: ValUint8, V: uint8(200)}},
		{"i8", Value{Type: ValInt8, V: int8(-100)}},
		{"u16", Value{Type: ValUint16, V: uint16(60000)}},
		{"i16", Value{Type: ValInt16, V: int16(-30000)}},
		{"u32", Value{Type: ValUint32, V: uint32(4000000000)}},
		{"i32", Value{Type: ValInt32, V: int32(-2000000000)}},
		{"f32", Value{Type: ValFloat32, V: float32(3.25)}},
		{"bool", Value{Type: ValBool, V: true}},
		{"str", Value{Type: ValString, V: "héllo ▁world"}},
		{"emptystr", Value{Type: ValString, V: ""}},
		{"u64", Value{Type: ValUint64, V: uint64(1) << 60}},
		{"i64", Value{Type: ValInt64, V: int64(-1) << 60}},
		{"f64", Value{Type: ValFloat64, V: 2.5e-300}},
		{"a.u8", Value{Type: ValArray, Elem: ValUint8, V: []uint8{1, 2, 255}}},
		{"a.i8", Value{Type: ValArray, Elem: ValInt8, V: []int8{-1, 0, 127}}},
		{"a.u16", Value{Type: ValArray, Elem: ValUint16, V: []uint16{1, 65535}}},
		{"a.i16", Value{Type: ValArray, Elem: ValInt16, V: []int16{-32768, 7}}},
		{"a.u32", Value{Type: ValArray, Elem: ValUint32, V: []uint32{1 << 31, 3}}},
		{"a.i32", Value{Type: ValArray, Elem: ValInt32, V: []int32{-5, 5}}},
		{"a.f32", Value{Type: ValArray, Elem: ValFloat32, V: []float32{-0.5, 1e30}}},
		{"a.bool", Value{Type: ValArray, Elem: ValBool, V: []bool{true, false, true}}},
		{"a.str", Value{Type: ValArray, Elem: ValString, V: []string{"a", "", "<0x0A>"}}},
		{"a.u64", Value{Type: ValArray, Elem: ValUint64, V: []uint64{1 << 63}}},
		{"a.i64", Value{Type: ValArray, Elem: ValInt64, V: []int64{-1 << 63}}},
		{"a.f64", Value{Type: ValArray, Elem: ValFloat64, V: []float64{1.5, -2}}},
		{"a.empty", Value{Type: ValArray, Elem: ValInt32, V: []int32{}}},
		{"a.arr", Value{Type: ValArray, Elem: ValArray, V: []Value{
			{Type: ValArray, Elem: ValString, V: []string{"x", "yz"}},
			{Type: ValArray, Elem: ValFloat32, V: []float32{1, 2, 3}},
		}}},
	}
}

func TestWriterRoundTrip(t *testing.T) {
	f32data := make([]byte, 4*8*3)
	for i := range f32data {
		f32data[i] = byte(i * 7)
	}
	q8 := QuantizeQ8_0(make([]float32, 64))
	q8[5] = 9
	streamed := bytes.Repeat([]byte{0xAB, 0xCD}, 2*5) // F16 [5, 2]
	for _, tc := range []struct {
		name  string
		align uint32 // 0: default
	}{
		{"default alignment", 0},
		{"alignment 64", 64},
		{"alignment 1", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := NewWriter()
			w.SetString("general.architecture", "llama")
			if tc.align != 0 {
				w.SetUint32("general.alignment", tc.align)
			}
			for _, kv := range allValues() {
				if err := w.Set(kv.key, kv.v); err != nil {
					t.Fatalf("Set(%q): %v", kv.key, err)
				}
			}
			if err := w.AddTensor("a", []uint64{8, 3}, TypeF32, f32data); err != nil {
				t.Fatal(err)
			}
			if err := w.AddTensorSource("b", []uint64{5, 2}, TypeF16, func(dst io.Writer) error {
				_, err := dst.Write(streamed)
				return err
			}); err != nil {
				t.Fatal(err)
			}
			if err := w.AddTensor("c", []uint64{32, 1, 2, 1}, TypeQ8_0, q8); err != nil {
				t.Fatal(err)
			}
			b := writeBytes(t, w)
			f, err := Parse(b)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			wantAlign := uint64(DefaultAlignment)
			if tc.align != 0 {
				wantAlign = uint64(tc.align)
			}
			if f.Version != 3 || f.Alignment != wantAlign {
				t.Errorf("version %d alignment %d, want 3 and %d", f.Version, f.Alignment, wantAlign)
			}
			var wantKeys []string
			wantKeys = append(wantKeys, "general.architecture")
			if tc.align != 0 {
				wantKeys = append(wantKeys, "general.alignment")
			}
			for _, kv := range allValues() {
				wantKeys = append(wantKeys, kv.key)
				if got := f.KV[kv.key]; !reflect.DeepEqual(got, kv.v) {
					t.Errorf("key %q: got %#v, want %#v", kv.key, got, kv.v)
				}
			}
			if !reflect.DeepEqual(f.Keys, wantKeys) {
				t.Errorf("keys %v, want %v", f.Keys, wantKeys)
			}
			if !reflect.DeepEqual(f.Tensors, w.Tensors()) {
				t.Errorf("tensors %+v, want %+v", f.Tensors, w.Tensors())
			}
			for name, want := range map[string][]byte{"a": f32data, "b": streamed, "c": q8} {
				ti, got, err := f.Tensor(name)
				if err != nil || !bytes.Equal(got, want) {
					t.Errorf("tensor %q: %v, data equal %v", name, err, bytes.Equal(got, want))
				}
				if ti.Offset%wantAlign != 0 {
					t.Errorf("tensor %q at unaligned offset %d", name, ti.Offset)
				}
			}
		})
	}
}

func TestWriterSetKeepsFirstPosition(t *testing.T) {
	w := NewWriter()
	w.SetUint32("a", 1)
	w.SetString("b", "x")
	w.SetUint32("a", 2)
	f, err := Parse(writeBytes(t, w))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(f.Keys, []string{"a", "b"}) {
		t.Errorf("keys %v, want [a b]", f.Keys)
	}
	if v, _ := f.Uint("a"); v != 2 {
		t.Errorf("a = %d, want 2", v)
	}
}

// TestWriterRewriteIsByteIdentical parses each reference file and writes it
// back: the output must be the original byte for byte, which pins the header
// encoding, the alignment padding and the tensor layout to GGML's writer.
func TestWriterRewriteIsByteIdentical(t *testing.T) {
	for _, rel := range []string{
		"models/stories260K.gguf",
		"models/synth/stories15m-shape-q8_0.gguf",
		"models/synth/stories15m-shape-q4_0.gguf",
		"models/synth/stories15m-shape-f32.gguf",
	} {
		t.Run(filepath.Base(rel), func(t *testing.T) {
			orig, err := os.ReadFile(refdatatest.Path(t, rel))
			if err != nil {
				t.Fatal(err)
			}
			f, err := Parse(orig)
			if err != nil {
				t.Fatal(err)
			}
			got := writeBytes(t, copyToWriter(t, f))
			if !bytes.Equal(got, orig) {
				i := 0
				for i < len(got) && i < len(orig) && got[i] == orig[i] {
					i++
				}
				t.Fatalf("rewrite differs: %d bytes vs %d, first difference at %d", len(got), len(orig), i)
			}
		})
	}
}

func TestWriteFile(t *testing.T) {
	src := openShared(t, "models/stories260K.gguf")
	path := filepath.Join(t.TempDir(), "out.gguf")
	if err := copyToWriter(t, src).WriteFile(path); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(refdatatest.Path(t, "models/stories260K.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("WriteFile output differs from the source (%d vs %d bytes)", len(got), len(want))
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Errorf("temporary files left behind: %v", entries)
	}
}

func TestWriterErrors(t *testing.T) {
	errBoom := errors.New("boom")
	for _, tc := range []struct {
		name  string
		build func(w *Writer) error
		want  error
	}{
		{"empty key", func(w *Writer) error { return w.Set("", Value{Type: ValBool, V: true}) }, ErrInvalid},
		{"value type mismatch", func(w *Writer) error { return w.Set("k", Value{Type: ValUint32, V: int32(1)}) }, ErrInvalid},
		{"unknown value type", func(w *Writer) error { return w.Set("k", Value{Type: 99, V: 1}) }, ErrInvalid},
		{"array elem mismatch", func(w *Writer) error {
			return w.Set("k", Value{Type: ValArray, Elem: ValString, V: []int32{1}})
		}, ErrInvalid},
		{"array nested too deep", func(w *Writer) error {
			inner := Value{Type: ValArray, Elem: ValArray, V: []Value{{Type: ValArray, Elem: ValInt8, V: []int8{}}}}
			return w.Set("k", Value{Type: ValArray, Elem: ValArray, V: []Value{inner}})
		}, ErrInvalid},
		{"alignment not power of two", func(w *Writer) error {
			w.SetUint32("general.alignment", 48)
			return w.Err()
		}, ErrInvalid},
		{"alignment wrong type", func(w *Writer) error { return w.Set("general.alignment", Value{Type: ValString, V: "32"}) }, ErrInvalid},
		{"duplicate tensor", func(w *Writer) error {
			_ = w.AddTensor("t", []uint64{1}, TypeF32, make([]byte, 4))
			return w.AddTensor("t", []uint64{1}, TypeF32, make([]byte, 4))
		}, ErrInvalid},
		{"empty tensor name", func(w *Writer) error { return w.AddTensor("", []uint64{1}, TypeF32, make([]byte, 4)) }, ErrInvalid},
		{"no dimensions", func(w *Writer) error { return w.AddTensor("t", nil, TypeF32, nil) }, ErrInvalid},
		{"five dimensions", func(w *Writer) error {
			return w.AddTensor("t", []uint64{1, 1, 1, 1, 1}, TypeF32, make([]byte, 4))
		}, ErrInvalid},
		{"zero dimension", func(w *Writer) error { return w.AddTensor("t", []uint64{4, 0}, TypeF32, nil) }, ErrInvalid},
		{"row not whole blocks", func(w *Writer) error { return w.AddTensor("t", []uint64{16}, TypeQ8_0, make([]byte, 17)) }, ErrInvalid},
		{"unknown tensor type", func(w *Writer) error { return w.AddTensor("t", []uint64{1}, Type(99), nil) }, ErrUnsupportedType},
		{"data size", func(w *Writer) error { return w.AddTensor("t", []uint64{2}, TypeF32, make([]byte, 4)) }, ErrSize},
		{"nil source", func(w *Writer) error { return w.AddTensorSource("t", []uint64{2}, TypeF32, nil) }, ErrInvalid},
		{"source short", func(w *Writer) error {
			_ = w.AddTensorSource("t", []uint64{2}, TypeF32, func(dst io.Writer) error {
				_, err := dst.Write(make([]byte, 7))
				return err
			})
			_, err := w.WriteTo(io.Discard)
			return err
		}, ErrSize},
		{"source fails", func(w *Writer) error {
			_ = w.AddTensorSource("t", []uint64{2}, TypeF32, func(io.Writer) error { return errBoom })
			_, err := w.WriteTo(io.Discard)
			return err
		}, errBoom},
		{"sticky error reaches WriteTo", func(w *Writer) error {
			w.SetUint32("general.alignment", 3)
			w.SetString("fine", "x")
			_, err := w.WriteTo(io.Discard)
			return err
		}, ErrInvalid},
		{"sticky error reaches WriteFile", func(w *Writer) error {
			w.SetUint32("general.alignment", 0)
			return w.WriteFile(filepath.Join(os.TempDir(), "never-written.gguf"))
		}, ErrInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.build(NewWriter())
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want an error wrapping %v", err, tc.want)
			}
		})
	}
}

type failWriter struct{ after int }

func (f *failWriter) Write(p []byte) (int, error) {
	if len(p) > f.after {
		n := f.after
		f.after = 0
		return n, errors.New("disk full")
	}
	f.after -= len(p)
	return len(p), nil
}

func TestWriterReportsWriteErrors(t *testing.T) {
	w := NewWriter()
	w.SetString("k", "v")
	if err := w.AddTensor("t", []uint64{1 << 20}, TypeF32, make([]byte, 4<<20)); err != nil {
		t.Fatal(err)
	}
	if _, err := w.WriteTo(&failWriter{after: 1000}); err == nil {
		t.Fatal("WriteTo succeeded on a failing writer")
	}
}

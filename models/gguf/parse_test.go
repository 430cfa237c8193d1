package gguf

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"os"
	"runtime"
	"slices"
	"testing"

	"github.com/bulkhead-ai/bulkhead/models/refdatatest"
)

// smallFile is a valid GGUF image with a little of everything: scalar, string,
// array and nested-array metadata, and tensors of three types. It seeds the fuzzer.
func smallFile(t testing.TB) []byte {
	t.Helper()
	w := NewWriter()
	w.SetString("general.architecture", "llama")
	w.SetUint32("llama.block_count", 1)
	w.SetFloat32("llama.rope.freq_base", 10000)
	w.SetBool("tokenizer.ggml.add_bos_token", true)
	w.SetStrings("tokenizer.ggml.tokens", []string{"<unk>", "<s>", "</s>", "▁a"})
	w.SetFloat32s("tokenizer.ggml.scores", []float32{0, 0, 0, -1})
	w.SetInt32s("tokenizer.ggml.token_type", []int32{2, 3, 3, 1})
	_ = w.Set("nested", Value{Type: ValArray, Elem: ValArray, V: []Value{{Type: ValArray, Elem: ValUint8, V: []uint8{1, 2}}}})
	_ = w.AddTensor("norm", []uint64{4}, TypeF32, make([]byte, 16))
	_ = w.AddTensor("w", []uint64{32, 2}, TypeQ4_0, QuantizeQ4_0(normals(1, 64, 1)))
	_ = w.AddTensor("e", []uint64{32, 1}, TypeQ8_0, QuantizeQ8_0(normals(2, 32, 1)))
	var buf bytes.Buffer
	if _, err := w.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func isParseError(err error) bool {
	for _, e := range []error{ErrNotGGUF, ErrVersion, ErrCorrupt, ErrUnsupportedType} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// FuzzParse feeds arbitrary bytes to Parse. It must return a package error or a
// File whose every tensor slice lies inside the input, dequantizes, and
// survives a rewrite: writing the File and parsing that output again gives the
// same bytes when written once more.
func FuzzParse(f *testing.F) {
	small := smallFile(f)
	f.Add(small)
	for _, n := range []int{0, 4, 8, 23, 24, 60, len(small) / 2, len(small) - 1} {
		f.Add(small[:n])
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		file, err := Parse(b)
		if err != nil {
			if !isParseError(err) {
				t.Fatalf("error %v wraps no package sentinel", err)
			}
			return
		}
		rewritable := true
		for _, k := range file.Keys {
			rewritable = rewritable && k != ""
		}
		for _, ti := range file.Tensors {
			rewritable = rewritable && ti.Name != ""
			_, data, err := file.Tensor(ti.Name)
			if err != nil || uint64(len(data)) != ti.Size {
				t.Fatalf("tensor %q: %v, %d bytes of %d", ti.Name, err, len(data), ti.Size)
			}
			if ti.Type.Supported() {
				if err := Dequantize(ti.Type, data, make([]float32, ti.Elements())); err != nil {
					t.Fatalf("Dequantize %q: %v", ti.Name, err)
				}
			}
		}
		if !rewritable { // the writer refuses empty names, which the reader tolerates
			return
		}
		once := writeBytes(t, copyToWriter(t, file))
		again, err := Parse(once)
		if err != nil {
			t.Fatalf("Parse of our own rewrite: %v", err)
		}
		if twice := writeBytes(t, copyToWriter(t, again)); !bytes.Equal(once, twice) {
			t.Fatalf("rewrite is not stable: %d then %d bytes", len(once), len(twice))
		}
	})
}

// TestParseTruncated cuts stories260K.gguf at every offset of its header and at
// many offsets through its tensor data: each prefix must be refused with
// ErrNotGGUF or ErrCorrupt, never accepted and never a panic.
func TestParseTruncated(t *testing.T) {
	full, err := os.ReadFile(refdatatest.Path(t, "models/stories260K.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	f, err := Parse(full)
	if err != nil {
		t.Fatal(err)
	}
	header := len(full) - len(f.data)
	var cuts []int
	for n := 0; n < header+64; n++ {
		cuts = append(cuts, n)
	}
	for n := header + 64; n < len(full); n += 997 {
		cuts = append(cuts, n)
	}
	cuts = append(cuts, len(full)-1)
	for _, n := range cuts {
		_, err := Parse(full[:n:n])
		if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrNotGGUF) {
			t.Fatalf("truncated at %d of %d: got %v, want ErrCorrupt or ErrNotGGUF", n, len(full), err)
		}
	}
}

// raw builds a GGUF image by hand, for inputs the Writer would never produce.
type raw struct{ encoder }

func newRaw(version uint32, nTensors, nKV uint64) *raw {
	r := &raw{}
	r.u32(Magic)
	r.u32(version)
	r.u64(nTensors)
	r.u64(nKV)
	return r
}

func (r *raw) kv(key string, vt ValueType, payload ...byte) *raw {
	r.str(key)
	r.u32(uint32(vt))
	r.buf.Write(payload)
	return r
}

func (r *raw) tensor(name string, shape []uint64, typ Type, off uint64) *raw {
	r.str(name)
	r.u32(uint32(len(shape)))
	for _, d := range shape {
		r.u64(d)
	}
	r.u32(uint32(typ))
	r.u64(off)
	return r
}

func (r *raw) bytes(n int) []byte {
	for r.buf.Len()%32 != 0 {
		r.buf.WriteByte(0)
	}
	r.buf.Write(make([]byte, n))
	return r.buf.Bytes()
}

func le32(v uint32) []byte { return binary.LittleEndian.AppendUint32(nil, v) }
func le64(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }

func TestParseRejects(t *testing.T) {
	cat := func(p ...[]byte) []byte { return bytes.Join(p, nil) }
	for _, tc := range []struct {
		name string
		b    []byte
		want error
	}{
		{"empty", nil, ErrNotGGUF},
		{"bad magic", append([]byte("GGUG"), make([]byte, 20)...), ErrNotGGUF},
		{"version 1", newRaw(1, 0, 0).bytes(0), ErrVersion},
		{"version 4", newRaw(4, 0, 0).bytes(0), ErrVersion},
		{"truncated version", []byte("GGUF\x03\x00"), ErrCorrupt},
		{"huge key count", newRaw(3, 0, math.MaxUint64).bytes(0), ErrCorrupt},
		{"huge tensor count", newRaw(3, math.MaxUint64/2, 0).bytes(0), ErrCorrupt},
		{"huge string length", newRaw(3, 0, 1).kv("k", ValString, le64(math.MaxUint64)...).bytes(0), ErrCorrupt},
		{"huge array", newRaw(3, 0, 1).kv("k", ValArray, cat(le32(uint32(ValUint64)), le64(1<<40))...).bytes(64), ErrCorrupt},
		{"unknown value type", newRaw(3, 0, 1).kv("k", 13, 0).bytes(0), ErrCorrupt},
		{"unknown array element type", newRaw(3, 0, 1).kv("k", ValArray, cat(le32(99), le64(1))...).bytes(8), ErrCorrupt},
		{"bool of 2", newRaw(3, 0, 1).kv("k", ValBool, 2).bytes(0), ErrCorrupt},
		{"arrays nested three deep", newRaw(3, 0, 1).kv("k", ValArray, cat(le32(uint32(ValArray)), le64(1), le32(uint32(ValArray)), le64(1), le32(uint32(ValArray)), le64(0))...).bytes(0), ErrCorrupt},
		{"duplicate key", newRaw(3, 0, 2).kv("k", ValUint8, 1).kv("k", ValUint8, 2).bytes(0), ErrCorrupt},
		{"alignment not a power of two", newRaw(3, 0, 1).kv("general.alignment", ValUint32, le32(24)...).bytes(0), ErrCorrupt},
		{"alignment a string", newRaw(3, 0, 1).kv("general.alignment", ValString, cat(le64(2), []byte("32"))...).bytes(0), ErrCorrupt},
		{"zero dimensions", newRaw(3, 1, 0).tensor("t", nil, TypeF32, 0).bytes(64), ErrCorrupt},
		{"five dimensions", newRaw(3, 1, 0).tensor("t", []uint64{1, 1, 1, 1, 1}, TypeF32, 0).bytes(64), ErrCorrupt},
		{"zero-length dimension", newRaw(3, 1, 0).tensor("t", []uint64{4, 0}, TypeF32, 0).bytes(64), ErrCorrupt},
		{"overflowing shape", newRaw(3, 1, 0).tensor("t", []uint64{1 << 30, 1 << 30, 1 << 30}, TypeF32, 0).bytes(64), ErrCorrupt},
		{"unknown tensor type", newRaw(3, 1, 0).tensor("t", []uint64{4}, Type(40), 0).bytes(64), ErrUnsupportedType},
		{"row not whole blocks", newRaw(3, 1, 0).tensor("t", []uint64{16}, TypeQ8_0, 0).bytes(64), ErrCorrupt},
		{"unaligned offset", newRaw(3, 1, 0).tensor("t", []uint64{4}, TypeF32, 4).bytes(64), ErrCorrupt},
		{"past the end", newRaw(3, 1, 0).tensor("t", []uint64{32}, TypeF32, 0).bytes(64), ErrCorrupt},
		{"offset past the end", newRaw(3, 1, 0).tensor("t", []uint64{1}, TypeF32, 1<<62).bytes(64), ErrCorrupt},
		{"duplicate tensor", newRaw(3, 2, 0).tensor("t", []uint64{1}, TypeF32, 0).tensor("t", []uint64{1}, TypeF32, 32).bytes(64), ErrCorrupt},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := Parse(tc.b); !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
}

// TestParseAllocationIsBounded gives Parse inputs whose counts claim as much as
// the remaining bytes allow, and checks the heap it uses stays within a small
// multiple of the input's size.
func TestParseAllocationIsBounded(t *testing.T) {
	const n = 1 << 20
	cat := func(p ...[]byte) []byte { return bytes.Join(p, nil) }
	for _, tc := range []struct {
		name string
		b    []byte
	}{
		{"array of empty strings", newRaw(3, 0, 1).kv("k", ValArray, cat(le32(uint32(ValString)), le64(n/8))...).bytes(n)},
		{"array of empty arrays", newRaw(3, 0, 1).kv("k", ValArray, cat(le32(uint32(ValArray)), le64(n/12), bytes.Repeat(cat(le32(uint32(ValUint8)), le64(0)), n/12))...).bytes(0)},
		{"array of bools", newRaw(3, 0, 1).kv("k", ValArray, cat(le32(uint32(ValBool)), le64(n))...).bytes(n)},
		{"many empty keys", newRaw(3, 0, n/13).bytes(n)},
		{"many tensors claimed", newRaw(3, n/32, 0).bytes(n)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			_, err := Parse(tc.b)
			runtime.ReadMemStats(&after)
			used := after.TotalAlloc - before.TotalAlloc
			if limit := uint64(8*len(tc.b) + 1<<16); used > limit {
				t.Fatalf("Parse of %d bytes allocated %d (limit %d); err %v", len(tc.b), used, limit, err)
			}
			t.Logf("%d bytes in, %d allocated, err %v", len(tc.b), used, err)
		})
	}
}

// TestEvictKeepsData: evicting a mapped tensor's pages only drops them from
// memory; reading again gives the same bytes. Evicting memory-backed data
// (a file parsed from memory) does nothing.
func TestEvictKeepsData(t *testing.T) {
	f, err := Open(refdatatest.Path(t, "models/quant/llama-tiny-q4_0.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, ti := range f.Tensors {
		_, data, err := f.Tensor(ti.Name)
		if err != nil {
			t.Fatal(err)
		}
		before := append([]byte(nil), data...)
		f.Evict(data)
		if !bytes.Equal(before, data) {
			t.Fatalf("tensor %s changed after Evict", ti.Name)
		}
	}
	b, err := os.ReadFile(refdatatest.Path(t, "models/quant/llama-tiny-q4_0.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	mem, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	_, data, _ := mem.Tensor(mem.Tensors[len(mem.Tensors)-1].Name)
	before := append([]byte(nil), data...)
	mem.Evict(data)
	if !bytes.Equal(before, data) {
		t.Fatal("Evict changed memory-backed data")
	}
}

// TestCopyData: CopyData gives a tensor's bytes, or any slice of them, read
// from the file (a mapped file) or copied (one parsed from memory); Size is
// the file's; a length mismatch is an error.
func TestCopyData(t *testing.T) {
	path := refdatatest.Path(t, "models/quant/llama-tiny-q4_0.gguf")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	mem, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range []*File{f, mem} {
		if g.Size() != int64(len(b)) {
			t.Fatalf("Size %d, file is %d bytes", g.Size(), len(b))
		}
		for _, ti := range g.Tensors {
			_, data, err := g.Tensor(ti.Name)
			if err != nil {
				t.Fatal(err)
			}
			g.Evict(data)
			for _, part := range [][]byte{data, data[len(data)/3 : len(data)/2]} {
				dst := make([]byte, len(part))
				if err := g.CopyData(dst, part); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(dst, part) {
					t.Fatalf("tensor %s: CopyData differs from the data", ti.Name)
				}
			}
		}
		_, data, _ := g.Tensor(g.Tensors[0].Name)
		if err := g.CopyData(make([]byte, len(data)-1), data); err == nil {
			t.Fatal("CopyData into a shorter buffer did not fail")
		}
	}
}

// TestDropArrays: DropArrays removes every array value (nested ones
// included) and its key, keeps the scalars in their order, and leaves the
// tensors readable.
func TestDropArrays(t *testing.T) {
	f, err := Parse(smallFile(t))
	if err != nil {
		t.Fatal(err)
	}
	f.DropArrays()
	want := []string{"general.architecture", "llama.block_count", "llama.rope.freq_base", "tokenizer.ggml.add_bos_token"}
	if !slices.Equal(f.Keys, want) || len(f.KV) != len(want) {
		t.Fatalf("keys after DropArrays: %v (%d values), want %v", f.Keys, len(f.KV), want)
	}
	if s, ok := f.String("general.architecture"); !ok || s != "llama" {
		t.Fatalf("general.architecture %q %v after DropArrays", s, ok)
	}
	if _, ok := f.Strings("tokenizer.ggml.tokens"); ok {
		t.Fatal("the tokens array is still there")
	}
	if _, data, err := f.Tensor("w"); err != nil || len(data) != 2*18 {
		t.Fatalf("tensor w after DropArrays: %d bytes, %v", len(data), err)
	}
}

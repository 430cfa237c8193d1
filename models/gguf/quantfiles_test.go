package gguf

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/bulkhead-ai/bulkhead/models/refdatatest"
)

// dequantRef is one tensor of a *.dequant.json file: llama.cpp's to_float of
// the tensor's first rows, as float32 bit patterns in hex.
type dequantRef struct {
	Type string     `json:"type"`
	Ne0  int        `json:"ne0"`
	Rows [][]string `json:"rows"`
}

// TestDequantizeQuantFiles dequantizes the first rows of every tensor of every
// file in ../shared/models/quant and compares them bit for bit with
// llama.cpp's own dequantization of the same bytes.
func TestDequantizeQuantFiles(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(refdatatest.Path(t, "models/quant"), "*.gguf"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no quant files: %v", err)
	}
	for _, path := range files {
		name := strings.TrimSuffix(filepath.Base(path), ".gguf")
		t.Run(name, func(t *testing.T) {
			raw, err := os.ReadFile(strings.TrimSuffix(path, ".gguf") + ".dequant.json")
			if err != nil {
				t.Fatal(err)
			}
			var ref map[string]dequantRef
			if err := json.Unmarshal(raw, &ref); err != nil {
				t.Fatal(err)
			}
			f := openShared(t, "models/quant/"+filepath.Base(path))
			if len(ref) != len(f.Tensors) {
				t.Errorf("reference has %d tensors, file %d", len(ref), len(f.Tensors))
			}
			for _, ti := range f.Tensors {
				r, ok := ref[ti.Name]
				if !ok {
					t.Errorf("%s: not in the reference", ti.Name)
					continue
				}
				compareDequant(t, f, ti, r)
			}
		})
	}
}

func compareDequant(t *testing.T, f *File, ti TensorInfo, r dequantRef) {
	t.Helper()
	if rt, err := ParseType(r.Type); err != nil || rt != ti.Type {
		t.Errorf("%s: type %s, reference %q", ti.Name, ti.Type, r.Type)
		return
	}
	if uint64(r.Ne0) != ti.Shape[0] || len(r.Rows) == 0 {
		t.Errorf("%s: ne0 %d with %d rows, file shape %v", ti.Name, r.Ne0, len(r.Rows), ti.Shape)
		return
	}
	_, data, err := f.Tensor(ti.Name)
	if err != nil {
		t.Fatal(err)
	}
	rs, err := ti.Type.RowSize(r.Ne0)
	if err != nil {
		t.Fatal(err)
	}
	n := len(r.Rows)
	got := make([]float32, n*r.Ne0)
	if err := Dequantize(ti.Type, data[:n*rs], got); err != nil {
		t.Fatalf("%s: %v", ti.Name, err)
	}
	bad := 0
	for i, row := range r.Rows {
		if len(row) != r.Ne0 {
			t.Fatalf("%s: reference row %d has %d values", ti.Name, i, len(row))
		}
		for j, h := range row {
			want, err := strconv.ParseUint(h, 16, 32)
			if err != nil {
				t.Fatalf("%s: %v", ti.Name, err)
			}
			if g := math.Float32bits(got[i*r.Ne0+j]); g != uint32(want) {
				if bad < 3 {
					t.Errorf("%s (%s) row %d [%d]: %08x (%g), llama.cpp %08x (%g)", ti.Name, ti.Type, i, j,
						g, got[i*r.Ne0+j], want, math.Float32frombits(uint32(want)))
				}
				bad++
			}
		}
	}
	if bad > 0 {
		t.Errorf("%s (%s): %d of %d values differ", ti.Name, ti.Type, bad, len(got))
	}
}

// TestUnsupportedTypeRefused writes files holding a tensor of a type Bulkhead
// cannot compute with and checks the reader refuses each by tensor and type
// name.
func TestUnsupportedTypeRefused(t *testing.T) {
	for _, tc := range []struct {
		name string
		typ  Type
		want string
	}{
		{"iq2_xxs", TypeIQ2_XXS, "tensor blk.0.attn_q.weight has type IQ2_XXS, which Bulkhead does not support"},
		{"iq1_m", TypeIQ1_M, "tensor blk.0.attn_q.weight has type IQ1_M, which Bulkhead does not support"},
		{"tq2_0", TypeTQ2_0, "tensor blk.0.attn_q.weight has type TQ2_0, which Bulkhead does not support"},
		{"mxfp4", TypeMXFP4, "tensor blk.0.attn_q.weight has type MXFP4, which Bulkhead does not support"},
		{"i32", TypeI32, "tensor blk.0.attn_q.weight has type I32, which Bulkhead does not support"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := NewWriter()
			w.SetString("general.architecture", "llama")
			rs, err := tc.typ.RowSize(256)
			if err != nil {
				t.Fatal(err)
			}
			if err := w.AddTensor("token_embd.weight", []uint64{256, 2}, TypeF32, make([]byte, 2*256*4)); err != nil {
				t.Fatal(err)
			}
			if err := w.AddTensor("blk.0.attn_q.weight", []uint64{256, 2}, tc.typ, make([]byte, 2*rs)); err != nil {
				t.Fatal(err)
			}
			var buf bytes.Buffer
			if _, err := w.WriteTo(&buf); err != nil {
				t.Fatal(err)
			}
			_, err = Parse(buf.Bytes())
			var ue *UnsupportedTypeError
			if !errors.Is(err, ErrUnsupportedType) || !errors.As(err, &ue) {
				t.Fatalf("Parse: %v, want an *UnsupportedTypeError", err)
			}
			if err.Error() != tc.want {
				t.Fatalf("error %q, want %q", err, tc.want)
			}
			if ue.Tensor != "blk.0.attn_q.weight" || ue.Type != tc.typ {
				t.Fatalf("error names %q %s", ue.Tensor, ue.Type)
			}
		})
	}
}

// TestTypeNames checks every type in GGML's numbering has its name and
// that a type number GGML never assigned prints as a number.
func TestTypeNames(t *testing.T) {
	for _, tc := range []struct {
		typ  Type
		want string
	}{
		{16, "IQ2_XXS"}, {17, "IQ2_XS"}, {18, "IQ3_XXS"}, {19, "IQ1_S"}, {20, "IQ4_NL"},
		{21, "IQ3_S"}, {22, "IQ2_S"}, {23, "IQ4_XS"}, {24, "I8"}, {25, "I16"}, {26, "I32"},
		{27, "I64"}, {28, "F64"}, {29, "IQ1_M"}, {30, "BF16"}, {34, "TQ1_0"}, {35, "TQ2_0"},
		{39, "MXFP4"}, {3, "Q4_1"}, {6, "Q5_0"}, {7, "Q5_1"}, {10, "Q2_K"}, {11, "Q3_K"},
		{13, "Q5_K"}, {4, "type(4)"}, {31, "type(31)"}, {77, "type(77)"},
	} {
		t.Run(tc.want, func(t *testing.T) {
			if got := tc.typ.String(); got != tc.want {
				t.Fatalf("Type(%d) is %q, want %q", uint32(tc.typ), got, tc.want)
			}
		})
	}
}

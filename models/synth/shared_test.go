package synth

import (
	"fmt"
	"testing"

	"github.com/bulkhead-ai/bulkhead/models/gguf"
	"github.com/bulkhead-ai/bulkhead/models/refdatatest"
)

// openShared opens a file of the reference data (see refdatatest.Path) and closes
// it at the end of the test.
func openShared(t *testing.T, rel string) *gguf.File {
	t.Helper()
	f, err := gguf.Open(refdatatest.Path(t, rel))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	return f
}

// TestMatchesLlamaCppFiles compares generated stories15m models with the
// reference synthetic files, which llama.cpp wrote (F32) and llama-quantize
// quantized: the same metadata keys with the same value types, and the same
// tensors with the same shapes and per-tensor types.
func TestMatchesLlamaCppFiles(t *testing.T) {
	for _, tc := range []struct {
		rel string
		typ gguf.Type
	}{
		{"models/synth/stories15m-shape-f32.gguf", gguf.TypeF32},
		{"models/synth/stories15m-shape-q8_0.gguf", gguf.TypeQ8_0},
		{"models/synth/stories15m-shape-q4_0.gguf", gguf.TypeQ4_0},
	} {
		t.Run(tc.typ.String(), func(t *testing.T) {
			ref := openShared(t, tc.rel)
			ours, err := gguf.Parse(generate(t, Config{"stories15m", tc.typ, 1}))
			if err != nil {
				t.Fatal(err)
			}
			if len(ours.Keys) != len(ref.Keys) {
				t.Errorf("%d metadata keys, reference has %d: %v vs %v", len(ours.Keys), len(ref.Keys), ours.Keys, ref.Keys)
			}
			for _, k := range ref.Keys {
				rv, ov := ref.KV[k], ours.KV[k]
				if rv.Type != ov.Type || rv.Elem != ov.Elem {
					t.Errorf("key %s: type %d/%d, reference %d/%d", k, ov.Type, ov.Elem, rv.Type, rv.Elem)
					continue
				}
				if k == "general.name" || rv.Type == gguf.ValArray {
					continue
				}
				if fmt.Sprint(rv.V) != fmt.Sprint(ov.V) {
					t.Errorf("key %s = %v, reference %v", k, ov.V, rv.V)
				}
			}
			if len(ours.Tensors) != len(ref.Tensors) {
				t.Fatalf("%d tensors, reference has %d", len(ours.Tensors), len(ref.Tensors))
			}
			for _, rt := range ref.Tensors {
				ot, _, err := ours.Tensor(rt.Name)
				if err != nil {
					t.Errorf("missing %s", rt.Name)
					continue
				}
				if fmt.Sprint(ot.Shape) != fmt.Sprint(rt.Shape) || ot.Type != rt.Type {
					t.Errorf("%s: %v %s, reference %v %s", rt.Name, ot.Shape, ot.Type, rt.Shape, rt.Type)
				}
			}
		})
	}
}

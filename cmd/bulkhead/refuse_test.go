package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/bulkhead-ai/bulkhead/models/gguf"
	"github.com/bulkhead-ai/bulkhead/models/refdatatest"
)

// rewriteModel copies a GGUF file with the metadata values in meta set (added
// when new) and each tensor replaced by what tensor returns, when given.
func rewriteModel(t *testing.T, src string, meta map[string]gguf.Value, tensor func(gguf.TensorInfo, []byte) (gguf.Type, []byte)) string {
	t.Helper()
	f, err := gguf.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w := gguf.NewWriter()
	for _, k := range f.Keys {
		v := f.KV[k]
		if nv, ok := meta[k]; ok {
			v = nv
		}
		if err := w.Set(k, v); err != nil {
			t.Fatal(err)
		}
	}
	for k, v := range meta {
		if _, ok := f.KV[k]; !ok {
			if err := w.Set(k, v); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, ti := range f.Tensors {
		_, data, err := f.Tensor(ti.Name)
		if err != nil {
			t.Fatal(err)
		}
		typ := ti.Type
		if tensor != nil {
			typ, data = tensor(ti, data)
		}
		if err := w.AddTensor(ti.Name, ti.Shape, typ, data); err != nil {
			t.Fatal(err)
		}
	}
	out := filepath.Join(t.TempDir(), "model.gguf")
	if err := w.WriteFile(out); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestNodesRefuseUnsupportedModels: dev and worker refuse to start on a file
// they cannot run, naming the file and what is wrong with it.
func TestNodesRefuseUnsupportedModels(t *testing.T) {
	src := refdatatest.Path(t, "models/quant/llama-tiny-f32.gguf")
	iq2 := rewriteModel(t, src, nil, func(ti gguf.TensorInfo, data []byte) (gguf.Type, []byte) {
		if ti.Name != "blk.0.attn_q.weight" {
			return ti.Type, data
		}
		n, _ := gguf.TypeIQ2_XXS.RowSize(int(ti.Shape[0]))
		return gguf.TypeIQ2_XXS, make([]byte, n*int(ti.Shape[1]))
	})
	mamba := rewriteModel(t, src, map[string]gguf.Value{
		"general.architecture": {Type: gguf.ValString, V: "mamba"},
		"mamba.context_length": {Type: gguf.ValUint32, V: uint32(2048)},
	}, nil)
	for _, tc := range []struct {
		name, file string
		want       []string
	}{
		{"IQ2_XXS tensor", iq2, []string{iq2, "blk.0.attn_q.weight", "IQ2_XXS", "does not support"}},
		{"unknown architecture", mamba, []string{mamba, `"mamba"`}},
	} {
		for _, node := range []string{"dev", "worker"} {
			t.Run(tc.name+"/"+node, func(t *testing.T) {
				args := []string{node, "--model", "@cf/test/bad=" + tc.file}
				if node == "dev" {
					args = append(args, "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0")
				} else {
					args = append(args, "--nats", "nats://127.0.0.1:1")
				}
				_, stderr, code := bulkhead(t, args...)
				if code == 0 {
					t.Fatal("started")
				}
				for _, w := range tc.want {
					if !strings.Contains(stderr, w) {
						t.Errorf("stderr does not name %q:\n%s", w, stderr)
					}
				}
			})
		}
	}
}

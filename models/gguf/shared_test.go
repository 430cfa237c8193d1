package gguf

import (
	"testing"

	"github.com/bulkhead-ai/bulkhead/models/refdatatest"
)

// openShared opens a GGUF file from the reference data and closes it at the end
// of the test.
func openShared(t testing.TB, rel string) *File {
	t.Helper()
	f, err := Open(refdatatest.Path(t, rel))
	if err != nil {
		t.Fatalf("Open(%s): %v", rel, err)
	}
	t.Cleanup(func() { _ = f.Close() })
	return f
}

// tensorF32 returns a tensor of f dequantized to float32.
func tensorF32(t testing.TB, f *File, name string) []float32 {
	t.Helper()
	info, data, err := f.Tensor(name)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]float32, info.Elements())
	if err := Dequantize(info.Type, data, out); err != nil {
		t.Fatalf("Dequantize %s (%s): %v", name, info.Type, err)
	}
	return out
}

package gguf

import (
	"os"
	"path/filepath"
	"testing"
)

// sharedPath returns the path of a file under the reference data directory, the
// repository's sibling ../shared (../../../shared from this package), failing
// the test when it is missing.
func sharedPath(t testing.TB, rel string) string {
	t.Helper()
	p := filepath.Join("..", "..", "..", "shared", rel)
	if _, err := os.Stat(p); err != nil {
		abs, _ := filepath.Abs(p)
		t.Fatalf("reference data %s is missing: %v", abs, err)
	}
	return p
}

// openShared opens a GGUF file from the reference data and closes it at the end
// of the test.
func openShared(t testing.TB, rel string) *File {
	t.Helper()
	f, err := Open(sharedPath(t, rel))
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

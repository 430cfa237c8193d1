package catalog

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/bulkhead-ai/bulkhead/models/gguf"
)

// writeGGUF writes a tensor-less GGUF file holding only the metadata the
// catalog reads. An empty arch leaves general.architecture out; a zero ctx
// leaves <arch>.context_length out.
func writeGGUF(t testing.TB, path, arch string, ctx uint32) string {
	t.Helper()
	w := gguf.NewWriter()
	if arch != "" {
		w.SetString("general.architecture", arch)
		if ctx != 0 {
			w.SetUint32(arch+".context_length", ctx)
		}
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := w.WriteFile(path); err != nil {
		t.Fatalf("writing %s: %v", path, err)
	}
	return path
}

// writeFile writes data to path, creating its directory.
func writeFile(t testing.TB, path, data string) string {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

package builtin

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bulkhead-ai/bulkhead/models/gguf"
	"github.com/bulkhead-ai/bulkhead/models/refdatatest"
)

func TestEmbeddedIsTheSharedModel(t *testing.T) {
	b, err := os.ReadFile(refdatatest.Path(t, "models/stories260K.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	if !Equal(b) || sum(Bytes()) != SHA256 {
		t.Fatal("the embedded model differs from ../shared/models/stories260K.gguf")
	}
	f, err := gguf.Parse(Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if a, _ := f.String("general.architecture"); a != "llama" {
		t.Errorf("architecture %q", a)
	}
	if !strings.Contains(License, "MIT License") || !strings.Contains(License, "Andrej Karpathy") {
		t.Error("licence notice missing")
	}
}

func TestWriteTo(t *testing.T) {
	dir := t.TempDir()
	path, err := WriteTo(dir)
	if err != nil {
		t.Fatal(err)
	}
	if path != filepath.Join(dir, FileName) {
		t.Errorf("path %s", path)
	}
	b, err := os.ReadFile(path)
	if err != nil || !Equal(b) {
		t.Fatalf("written file differs (%v)", err)
	}
	// A damaged copy is replaced, not served.
	if err := os.WriteFile(path, []byte("GGUF garbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := WriteTo(dir); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(path); !Equal(b) {
		t.Error("damaged copy was kept")
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "*.tmp")); len(left) != 0 {
		t.Errorf("temporary files left: %v", left)
	}
}

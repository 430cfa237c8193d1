package refdatatest

import (
	"os"
	"path/filepath"
	"testing"
)

func TestPath(t *testing.T) {
	for _, tc := range []struct {
		name, rel, want string
	}{
		{"folder", "", "shared"},
		{"file", "models/stories260K.gguf", "stories260K.gguf"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := Path(t, tc.rel)
			if !filepath.IsAbs(p) {
				t.Errorf("Path(%q) = %s, not absolute", tc.rel, p)
			}
			if filepath.Base(p) != tc.want {
				t.Errorf("Path(%q) = %s, want a path ending in %s", tc.rel, p, tc.want)
			}
			if _, err := os.Stat(p); err != nil {
				t.Error(err)
			}
		})
	}
}

func TestRepoRoot(t *testing.T) {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	want := filepath.Dir(filepath.Dir(wd)) // models/refdatatest -> repository root
	nested := t.TempDir()
	if err := os.WriteFile(filepath.Join(nested, "go.mod"), []byte("module example.com/other\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, dir, want string
		ok              bool
	}{
		{"package dir", wd, want, true},
		{"root itself", want, want, true},
		{"other module", nested, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := repoRoot(tc.dir)
			if (err == nil) != tc.ok {
				t.Fatalf("repoRoot(%s) error = %v, want ok=%v", tc.dir, err, tc.ok)
			}
			if got != tc.want {
				t.Errorf("repoRoot(%s) = %q, want %q", tc.dir, got, tc.want)
			}
		})
	}
}

func TestGoldenCompare(t *testing.T) {
	c := GoldenCase{CompletionTokens: []int32{1, 2, 3}, Margins: []float64{0.5, 0.01, 0.3}}
	if ex, err := c.Compare([]int32{1, 2, 3}); ex != "" || err != nil {
		t.Errorf("equal: %q, %v", ex, err)
	}
	if ex, err := c.Compare([]int32{1, 9, 9}); ex == "" || err != nil {
		t.Errorf("near-tie divergence: %q, %v", ex, err)
	}
	if _, err := c.Compare([]int32{9, 2, 3}); err == nil {
		t.Error("divergence at a clear margin was accepted")
	}
	if _, err := c.Compare([]int32{1, 2}); err == nil {
		t.Error("short completion was accepted")
	}
}

package catalog

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bulkhead-ai/bulkhead/models/gguf"
	"github.com/bulkhead-ai/bulkhead/models/refdatatest"
)

// TestResolveStories260K reads the trained context of a real model file.
func TestResolveStories260K(t *testing.T) {
	path := refdatatest.Path(t, "models/stories260K.gguf")
	tests := []struct {
		name       string
		window     string // context_window value, "" to leave it out
		wantWindow int
		wantErr    error
	}{
		{"trained context by default", "", 2048, nil},
		{"explicit zero means trained", "0", 2048, nil},
		{"smaller window", "256", 256, nil},
		{"equal window", "2048", 2048, nil},
		{"larger window", "2049", 0, ErrContextWindow},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			y := "models:\n  - name: stories\n    path: " + path + "\n"
			if tc.window != "" {
				y += "    context_window: " + tc.window + "\n"
			}
			c, err := Parse([]byte(y), t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			err = c.Resolve()
			if !errors.Is(err, tc.wantErr) || (err == nil) != (tc.wantErr == nil) {
				t.Fatalf("Resolve() = %v, want %v", err, tc.wantErr)
			}
			m, _ := c.Lookup("stories")
			if err != nil {
				for _, s := range []string{"2049", "2048", path, "context_window"} {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error %q does not name %q", err, s)
					}
				}
				if m.ContextWindow != 2049 || m.Arch != "" {
					t.Errorf("a failed Resolve changed the model: %+v", *m)
				}
				return
			}
			if m.Arch != "llama" || m.TrainedContext != 2048 || m.ContextWindow != tc.wantWindow {
				t.Errorf("resolved arch %q trained %d window %d; want llama 2048 %d", m.Arch, m.TrainedContext, m.ContextWindow, tc.wantWindow)
			}
			if n, _ := c.EffectiveContext("stories"); n != tc.wantWindow {
				t.Errorf("EffectiveContext = %d, want %d", n, tc.wantWindow)
			}
		})
	}
}

func TestResolveBadFiles(t *testing.T) {
	dir := t.TempDir()
	good := writeGGUF(t, filepath.Join(dir, "good.gguf"), "llama", 2048)
	noArch := writeGGUF(t, filepath.Join(dir, "noarch.gguf"), "", 0)
	noCtx := writeGGUF(t, filepath.Join(dir, "noctx.gguf"), "llama", 0)
	notGGUF := writeFile(t, filepath.Join(dir, "text.gguf"), strings.Repeat("not a model\n", 8))
	tiny := writeFile(t, filepath.Join(dir, "tiny.gguf"), "GGUF")
	data, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	truncated := filepath.Join(dir, "truncated.gguf")
	if err := os.WriteFile(truncated, data[:len(data)/2], 0o644); err != nil {
		t.Fatal(err)
	}
	hugeCtx := filepath.Join(dir, "hugectx.gguf")
	w := gguf.NewWriter()
	w.SetString("general.architecture", "llama")
	w.SetUint64("llama.context_length", 1<<40)
	if err := w.WriteFile(hugeCtx); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		path   string
		also   error // a further error the chain must hold, or nil
		msgHas string
	}{
		{"missing", filepath.Join(dir, "missing.gguf"), os.ErrNotExist, "missing.gguf"},
		{"directory", dir, nil, dir},
		{"not GGUF", notGGUF, gguf.ErrNotGGUF, "text.gguf"},
		{"too short", tiny, gguf.ErrNotGGUF, "tiny.gguf"},
		{"truncated", truncated, gguf.ErrCorrupt, "truncated.gguf"},
		{"no architecture", noArch, nil, "general.architecture is missing"},
		{"no context length", noCtx, nil, "llama.context_length is missing"},
		{"context length out of range", hugeCtx, nil, "llama.context_length is missing or out of range"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			y := "models:\n  - name: ok\n    path: good.gguf\n    context_window: 100\n  - name: bad\n    path: \"" + tc.path + "\"\n"
			c, err := Parse([]byte(y), dir)
			if err != nil {
				t.Fatal(err)
			}
			err = c.Resolve()
			if !errors.Is(err, ErrModelFile) {
				t.Fatalf("Resolve() = %v, want ErrModelFile", err)
			}
			if tc.also != nil && !errors.Is(err, tc.also) {
				t.Errorf("error %v does not wrap %v", err, tc.also)
			}
			for _, s := range []string{`model "bad"`, tc.msgHas} {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not say %q", err, s)
				}
			}
			if strings.Contains(err.Error(), `model "ok"`) {
				t.Errorf("error blames the good model: %v", err)
			}
			for _, m := range c.Models() {
				if m.Arch != "" || m.TrainedContext != 0 {
					t.Errorf("a failed Resolve changed %q: %+v", m.Name, *m)
				}
			}
		})
	}
	t.Run("every bad model reported", func(t *testing.T) {
		y := "models:\n  - {name: a, path: missing1.gguf}\n  - {name: b, path: good.gguf}\n  - {name: c, path: missing2.gguf}\n"
		c, err := Parse([]byte(y), dir)
		if err != nil {
			t.Fatal(err)
		}
		err = c.Resolve()
		for _, s := range []string{`model "a"`, `model "c"`, "missing1.gguf", "missing2.gguf"} {
			if err == nil || !strings.Contains(err.Error(), s) {
				t.Errorf("error %v does not say %q", err, s)
			}
		}
	})
}

// TestResolveKeepsClamp checks that a clamp survives a later Resolve, and
// that resolving twice gives the same models.
func TestResolveKeepsClamp(t *testing.T) {
	dir := t.TempDir()
	writeGGUF(t, filepath.Join(dir, "m.gguf"), "llama", 4096)
	c, err := FromFlags([]string{"m=" + filepath.Join(dir, "m.gguf")})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Clamp("m", 1000); err != nil {
		t.Fatal(err)
	}
	if err := c.Resolve(); err != nil {
		t.Fatal(err)
	}
	m, _ := c.Lookup("m")
	if m.ContextWindow != 1000 || m.TrainedContext != 4096 || m.Arch != "llama" {
		t.Errorf("after Clamp then Resolve: %+v, want window 1000 of 4096", *m)
	}
}

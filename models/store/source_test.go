package store

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseSource(t *testing.T) {
	cases := []struct {
		raw, endpoint string
		url, name     string
		want          error
	}{
		{raw: "hf:Qwen/Qwen3-0.6B-GGUF/Qwen3-0.6B-Q8_0.gguf",
			url: "https://huggingface.co/Qwen/Qwen3-0.6B-GGUF/resolve/main/Qwen3-0.6B-Q8_0.gguf", name: "@hf/qwen/qwen3-0.6b-gguf/qwen3-0.6b-q8_0"},
		{raw: "hf:o/r/f.gguf@v2", url: "https://huggingface.co/o/r/resolve/v2/f.gguf", name: "@hf/o/r/f"},
		{raw: "hf:o/r/f.gguf@refs/pr/1", url: "https://huggingface.co/o/r/resolve/refs%2Fpr%2F1/f.gguf", name: "@hf/o/r/f"},
		{raw: "hf:o/r/sub/f.GGUF", url: "https://huggingface.co/o/r/resolve/main/sub/f.GGUF", name: "@hf/o/r/sub/f"},
		{raw: "hf:o/r/a@b.gguf", url: "https://huggingface.co/o/r/resolve/main/a@b.gguf", name: "@hf/o/r/a@b"},
		{raw: "hf:o/r/f.gguf", endpoint: "http://127.0.0.1:9/mirror/", url: "http://127.0.0.1:9/mirror/o/r/resolve/main/f.gguf", name: "@hf/o/r/f"},
		{raw: "https://example.com/models/Tiny%20Model.gguf?sig=1", url: "https://example.com/models/Tiny%20Model.gguf?sig=1", name: "tiny model"},
		{raw: "https://example.com/models/blob", url: "https://example.com/models/blob", name: "blob"},
		{raw: "http://127.0.0.1:8080/m.gguf", url: "http://127.0.0.1:8080/m.gguf", name: "m"},
		{raw: "http://[::1]:8080/m.gguf", url: "http://[::1]:8080/m.gguf", name: "m"},
		{raw: "http://localhost/m.gguf", url: "http://localhost/m.gguf", name: "m"},

		{raw: "", want: ErrSource},
		{raw: "hf:o/r", want: ErrSource},
		{raw: "hf:o/r/f.bin", want: ErrSource},
		{raw: "hf:o//f.gguf", want: ErrSource},
		{raw: "hf:o/r/../f.gguf", want: ErrSource},
		{raw: "hf:o/r?x/f.gguf", want: ErrSource},
		{raw: "hf:o/r/f.gguf@", want: ErrSource},
		{raw: "hf:o/r/f.gguf", endpoint: "http://hub.example.com", want: ErrInsecure},
		{raw: "hf:o/r/f.gguf", endpoint: "::", want: ErrSource},
		{raw: "http://example.com/m.gguf", want: ErrInsecure},
		{raw: "http://10.0.0.1/m.gguf", want: ErrInsecure},
		{raw: "ftp://example.com/m.gguf", want: ErrInsecure},
		{raw: "file:///etc/passwd", want: ErrInsecure},
		{raw: "/tmp/m.gguf", want: ErrInsecure},
		{raw: "https://user:pw@example.com/m.gguf", want: ErrInsecure},
		{raw: "https://example.com/", want: ErrSource},
		{raw: "https://example.com/a b.gguf", want: ErrSource},
	}
	for _, tc := range cases {
		t.Run(tc.raw, func(t *testing.T) {
			s, err := ParseSource(tc.raw, tc.endpoint)
			if tc.want != nil {
				if !errors.Is(err, tc.want) || !errors.Is(err, ErrSource) {
					t.Fatalf("err = %v, want %v (and ErrSource)", err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if s.URL != tc.url || s.Name != tc.name {
				t.Errorf("got url %q name %q, want %q %q", s.URL, s.Name, tc.url, tc.name)
			}
		})
	}
}

func TestFileName(t *testing.T) {
	seen := map[string]string{}
	for _, n := range []string{"@hf/a/b/c", "_hf_a_b_c", "m", "M", "..hidden", strings.Repeat("x", 256), "naïve/名前"} {
		f := fileName(n)
		if f != filepath.Base(f) || strings.HasPrefix(f, ".") || len(f) > 120 || !strings.HasSuffix(f, ".gguf") {
			t.Errorf("fileName(%q) = %q", n, f)
		}
		if other, dup := seen[f]; dup {
			t.Errorf("%q and %q share %q", n, other, f)
		}
		seen[f] = n
	}
}

func TestContentRange(t *testing.T) {
	cases := []struct {
		v                  string
		first, last, total int64
		bad                bool
	}{
		{v: "bytes 0-9/10", first: 0, last: 9, total: 10},
		{v: "bytes 5-9/*", first: 5, last: 9, total: -1},
		{v: "bytes */10", first: -1, last: -1, total: 10},
		{v: "bytes */*", bad: true},
		{v: "bytes 9-5/10", bad: true},
		{v: "bytes 0-10/10", bad: true},
		{v: "bytes -1-5/10", bad: true},
		{v: "bytes +1-5/10", bad: true},
		{v: "items 0-9/10", bad: true},
		{v: "", bad: true},
		{v: "bytes 0-99999999999999999999/100000000000000000000", bad: true},
	}
	for _, tc := range cases {
		t.Run(tc.v, func(t *testing.T) {
			f, l, n, err := contentRange(tc.v)
			if tc.bad {
				if !errors.Is(err, ErrHTTP) {
					t.Fatalf("err = %v, want ErrHTTP", err)
				}
				return
			}
			if err != nil || f != tc.first || l != tc.last || n != tc.total {
				t.Errorf("= %d %d %d %v", f, l, n, err)
			}
		})
	}
}

// TestList lists two pulled models and one whose file was removed.
func TestList(t *testing.T) {
	model := testModel(t, 9, 64)
	srv := newFileServer(t, model, nil)
	s := newStore(t, srv, nil)
	ctx := context.Background()
	for _, name := range []string{"b", "a", "gone"} {
		if _, err := s.Pull(ctx, srv.URL+"/file/m.gguf", PullOptions{Name: name}); err != nil {
			t.Fatal(err)
		}
	}
	_, gone, err := s.Lookup("gone")
	if err != nil {
		t.Fatal(err)
	}
	os.Remove(gone)
	if _, _, err := s.Lookup("gone"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Lookup of a removed file: %v, want ErrNotFound", err)
	}
	if _, _, err := s.Lookup("nope"); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), s.Dir()) {
		t.Errorf("Lookup of an unknown name: %v, want ErrNotFound naming the directory", err)
	}
	ls, err := s.List()
	if err != nil {
		t.Fatal(err)
	}
	if len(ls) != 3 || ls[0].Name != "a" || ls[1].Name != "b" || ls[2].Name != "gone" {
		t.Fatalf("List = %+v", ls)
	}
	for _, l := range ls[:2] {
		want := Info{Arch: "llama", Context: 256, TensorType: "F32", FileType: "F32", Tensors: 1, Params: 64 * 64}
		if l.Err != nil || l.Info != want || l.Size != int64(len(model)) {
			t.Errorf("%s: %+v err %v, want %+v", l.Name, l.Info, l.Err, want)
		}
	}
	if !errors.Is(ls[2].Err, ErrInvalid) {
		t.Errorf("removed file listed with err %v", ls[2].Err)
	}
}

// TestListSharedModel lists a real llama.cpp-written model when the shared
// files are present (copied into the test's directory, never committed).
func TestListSharedModel(t *testing.T) {
	data, err := os.ReadFile("/work/shared/models/stories260K.gguf")
	if err != nil {
		t.Skip("shared model not present:", err)
	}
	srv := newFileServer(t, data, func(s *fileServer) { s.linked = sum(data) })
	s := newStore(t, srv, nil)
	res, err := s.Pull(context.Background(), "hf:ggml-org/models/stories260K.gguf", PullOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Name != "@hf/ggml-org/models/stories260k" || res.Verified != "published" {
		t.Errorf("pulled %+v", res)
	}
	ls, err := s.List()
	if err != nil || len(ls) != 1 || ls[0].Arch != "llama" || ls[0].Context != 2048 || ls[0].TensorType != "F32" {
		t.Fatalf("List = %+v, %v", ls, err)
	}
}

func TestIndexRefused(t *testing.T) {
	for _, tc := range []struct{ name, body string }{
		{"not json", "{"},
		{"unknown field", `{"version":1,"models":[],"extra":1}`},
		{"other version", `{"version":2,"models":[]}`},
		{"file outside the directory", `{"version":1,"models":[{"name":"m","file":"../m.gguf"}]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			os.WriteFile(filepath.Join(dir, IndexFile), []byte(tc.body), 0o644)
			s, err := New(nil, Config{Dir: dir})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.List(); !errors.Is(err, ErrIndex) {
				t.Errorf("err = %v, want ErrIndex", err)
			}
		})
	}
}

func TestNewConfig(t *testing.T) {
	for _, cfg := range []Config{{}, {Dir: "d", MaxRedirects: -1}, {Dir: "d", MaxBytes: -1}, {Dir: "d", StallTimeout: -1}} {
		if _, err := New(nil, cfg); !errors.Is(err, ErrConfig) {
			t.Errorf("New(%+v) = %v, want ErrConfig", cfg, err)
		}
	}
}

func FuzzParseSource(f *testing.F) {
	for _, s := range []string{"hf:o/r/f.gguf@main", "https://h/x.gguf", "hf:a/b/c/d.gguf", "http://127.0.0.1/a"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		s, err := ParseSource(raw, "")
		if err != nil {
			return
		}
		if !strings.HasPrefix(s.URL, "https://") && !strings.HasPrefix(s.URL, "http://") {
			t.Fatalf("%q -> URL %q", raw, s.URL)
		}
	})
}

func FuzzContentRange(f *testing.F) {
	for _, s := range []string{"bytes 0-9/10", "bytes */10", "bytes 1-2/*"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		a, b, n, err := contentRange(v)
		if err != nil {
			return
		}
		if (a < 0) != (b < 0) || a > b || (n >= 0 && b >= n) {
			t.Fatalf("%q -> %d %d %d", v, a, b, n)
		}
	})
}

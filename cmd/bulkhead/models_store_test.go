package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bulkhead-ai/bulkhead/models/refdatatest"
	"github.com/bulkhead-ai/bulkhead/models/store"
)

// modelServer serves body the way Hugging Face does: /hf/OWNER/REPO/resolve/
// REV/FILE redirects to /cdn/FILE with the file's sha256 in X-Linked-Etag. It
// is plain http on loopback, which pulls allow.
func modelServer(t *testing.T, body []byte) *httptest.Server {
	t.Helper()
	s := sha256.Sum256(body)
	mux := http.NewServeMux()
	mux.HandleFunc("/hf/{owner}/{repo}/resolve/{rev}/{file...}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Linked-Etag", `"`+hex.EncodeToString(s[:])+`"`)
		http.Redirect(w, r, "/cdn/"+r.PathValue("file"), http.StatusFound)
	})
	mux.HandleFunc("/cdn/", func(w http.ResponseWriter, r *http.Request) {
		http.ServeContent(w, r, "m.gguf", time.Time{}, bytes.NewReader(body))
	})
	mux.HandleFunc("/page.gguf", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		w.Write([]byte("<!doctype html><p>not here</p>"))
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

// TestModelsPullListServe pulls a model the hf: way (HF_ENDPOINT pointing at a
// local server) and by URL, lists both, and resolves them by name as dev,
// worker and edge do.
func TestModelsPullListServe(t *testing.T) {
	data, err := os.ReadFile(refdatatest.Path(t, "models/stories260K.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	srv := modelServer(t, data)
	dir := t.TempDir()
	t.Setenv("HF_ENDPOINT", srv.URL+"/hf")
	t.Setenv("BULKHEAD_MODEL_DIR", dir)
	const hfName = "@hf/ggml-org/models/stories260k"

	stdout, stderr, code := bulkhead(t, "models", "pull", "hf:ggml-org/models/stories260K.gguf")
	if code != 0 || !strings.Contains(stdout, "pulled "+hfName) || !strings.Contains(stdout, "matches the published checksum") {
		t.Fatalf("pull: exit %d\nstdout %s\nstderr %s", code, stdout, stderr)
	}
	if !strings.Contains(stderr, "100%") {
		t.Errorf("no progress on stderr: %q", stderr)
	}
	stdout, _, code = bulkhead(t, "models", "pull", "hf:ggml-org/models/stories260K.gguf")
	if code != 0 || !strings.Contains(stdout, "already in") {
		t.Errorf("second pull: exit %d, %q", code, stdout)
	}
	// Flags after the source; the directory given on the command line.
	stdout, stderr, code = bulkhead(t, "models", "pull", srv.URL+"/cdn/stories260K.gguf", "--name", "tiny", "--model-dir", dir)
	if code != 0 || !strings.Contains(stdout, "pulled tiny") || !strings.Contains(stdout, "no checksum") {
		t.Fatalf("pull --name: exit %d\nstdout %s\nstderr %s", code, stdout, stderr)
	}
	_, stderr, code = bulkhead(t, "models", "pull", srv.URL+"/cdn/other.gguf", "--name", "tiny")
	if code != 1 || !strings.Contains(stderr, "--force") {
		t.Errorf("taken name: exit %d, %q", code, stderr)
	}

	stdout, stderr, code = bulkhead(t, "models", "list")
	if code != 0 {
		t.Fatalf("list: exit %d: %s", code, stderr)
	}
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "NAME") || !strings.HasPrefix(lines[1], hfName) || !strings.HasPrefix(lines[2], "tiny") {
		t.Fatalf("list:\n%s", stdout)
	}
	for _, f := range []string{"llama", "F32", "1.1 MiB", "2048"} {
		if !strings.Contains(lines[1], f) {
			t.Errorf("list row %q lacks %q", lines[1], f)
		}
	}
	stdout, _, code = bulkhead(t, "models", "list", "--json")
	var rows []struct {
		Name    string `json:"name"`
		Arch    string `json:"architecture"`
		Context int    `json:"context_length"`
		Type    string `json:"tensor_type"`
		Size    int64  `json:"size"`
		SHA256  string `json:"sha256"`
		Path    string `json:"path"`
	}
	if err := json.Unmarshal([]byte(stdout), &rows); code != 0 || err != nil || len(rows) != 2 {
		t.Fatalf("list --json: exit %d, %v:\n%s", code, err, stdout)
	}
	if r := rows[0]; r.Name != hfName || r.Arch != "llama" || r.Context != 2048 || r.Type != "F32" || r.Size != int64(len(data)) || len(r.SHA256) != 64 {
		t.Errorf("list --json row %+v", r)
	}

	// Serving by name: catalogFlags as dev, worker and edge use them.
	cf := catalogFlags{models: listFlag{"tiny", hfName, "direct=" + rows[0].Path}, modelDir: dir}
	cat, err := cf.load()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"tiny", hfName, "direct"} {
		m, ok := cat.Lookup(name)
		if !ok || m.Arch != "llama" || m.ContextWindow != 2048 || filepath.Dir(m.Path) != dir {
			t.Errorf("catalog %s: %+v %v", name, m, ok)
		}
	}
	t.Run("default directory", func(t *testing.T) {
		xdg := t.TempDir()
		t.Setenv("XDG_DATA_HOME", xdg)
		if err := os.MkdirAll(filepath.Join(xdg, "bulkhead"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(dir, filepath.Join(xdg, "bulkhead", "models")); err != nil {
			t.Fatal(err)
		}
		cf := catalogFlags{models: listFlag{"tiny"}}
		if _, err := cf.load(); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("unknown name", func(t *testing.T) {
		cf := catalogFlags{models: listFlag{"tiny", "nope"}, modelDir: dir}
		_, err := cf.load()
		if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), `"nope"`) || !strings.Contains(err.Error(), dir) {
			t.Fatalf("err = %v, want a usage error naming the name and %s", err, dir)
		}
	})
}

func TestModelsPullListErrors(t *testing.T) {
	srv := modelServer(t, []byte("GGUF\x03\x00\x00\x00 not really"))
	t.Setenv("BULKHEAD_MODEL_DIR", t.TempDir())
	t.Setenv("HF_ENDPOINT", srv.URL+"/hf")
	tests := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"pull without source", []string{"models", "pull"}, 2, "SOURCE"},
		{"pull two sources", []string{"models", "pull", "a", "b"}, 2, "SOURCE"},
		{"pull plain http", []string{"models", "pull", "http://example.com/m.gguf"}, 2, "plain http://"},
		{"pull bad hf", []string{"models", "pull", "hf:owner/m.gguf"}, 2, "hf:OWNER/REPO/FILE.gguf"},
		{"pull bad name", []string{"models", "pull", srv.URL + "/cdn/m.gguf", "--name", "a b"}, 2, "names are printable"},
		{"pull bad sha", []string{"models", "pull", srv.URL + "/cdn/m.gguf", "--sha256", "xyz"}, 2, "64 hex"},
		{"pull not found", []string{"models", "pull", srv.URL + "/missing.gguf"}, 1, "404"},
		{"pull html", []string{"models", "pull", srv.URL + "/page.gguf"}, 1, "not a GGUF file"},
		{"pull corrupt", []string{"models", "pull", srv.URL + "/cdn/m.gguf"}, 1, "invalid GGUF"},
		{"pull bad flag", []string{"models", "pull", "--frob", "x"}, 2, "frob"},
		{"list positional", []string{"models", "list", "x"}, 2, "unexpected"},
		{"list empty", []string{"models", "list"}, 0, "no models in"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			stdout, stderr, code := bulkhead(t, tc.args...)
			if code != tc.code || !strings.Contains(stdout+stderr, tc.want) {
				t.Fatalf("exit %d (want %d), output %q (want it to mention %q)", code, tc.code, stdout+stderr, tc.want)
			}
		})
	}
}

// TestPullProgressLines checks the plain (not a terminal) progress: one
// line per 10% step, and a line every 10s when nothing else changes.
func TestPullProgressLines(t *testing.T) {
	var buf bytes.Buffer
	now := time.Unix(0, 0)
	p := newProgressPrinter(&buf, func() time.Time { return now })
	for done := int64(0); done <= 1000; done += 5 {
		now = now.Add(10 * time.Millisecond)
		p.update(store.Progress{Name: "m", Done: done, Total: 1000})
	}
	p.finish()
	if n := strings.Count(buf.String(), "\n"); n != 11 || !strings.Contains(buf.String(), "m: 100%") {
		t.Fatalf("%d lines:\n%s", n, buf.String())
	}
	buf.Reset()
	p = newProgressPrinter(&buf, func() time.Time { return now })
	for i := range 60 {
		now = now.Add(time.Second)
		p.update(store.Progress{Name: "m", Done: int64(i) * 1 << 20, Total: -1})
	}
	if n := strings.Count(buf.String(), "\n"); n != 12 {
		t.Fatalf("unknown size: %d lines, want one per 5s:\n%s", n, buf.String())
	}

	buf.Reset()
	p = newProgressPrinter(&buf, func() time.Time { return now })
	p.tty = true // a terminal: one redrawn line, ended by finish
	for done := int64(0); done <= 1000; done += 100 {
		now = now.Add(time.Second)
		p.update(store.Progress{Name: "m", Done: done, Total: 1000})
	}
	p.finish()
	out := buf.String()
	if strings.Count(out, "\n") != 1 || strings.Count(out, "\r") != 11 || !strings.Contains(out, "[==============================] 100%") {
		t.Fatalf("terminal progress %q", out)
	}
}

package dashboard

import (
	"bytes"
	"encoding/json"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDistIsBuilt: dist/ holds web/src as it is and the uPlot version the
// lockfile pins, so the embedded bundle is what `make dashboard` builds.
func TestDistIsBuilt(t *testing.T) {
	srcs, err := os.ReadDir(filepath.Join("web", "src"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range srcs {
		want, err := os.ReadFile(filepath.Join("web", "src", e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		got, err := fs.ReadFile(Files(), e.Name())
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("dist/%s differs from web/src/%s (%v): run make dashboard", e.Name(), e.Name(), err)
		}
	}
	var lock struct {
		Packages map[string]struct{ Version string } `json:"packages"`
	}
	b, err := os.ReadFile(filepath.Join("web", "package-lock.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &lock); err != nil {
		t.Fatal(err)
	}
	v := lock.Packages["node_modules/uplot"].Version
	js, err := fs.ReadFile(Files(), "uPlot.iife.min.js")
	if err != nil || v == "" || !bytes.Contains(js[:min(len(js), 200)], []byte("(v"+v+")")) {
		t.Fatalf("dist/uPlot.iife.min.js is not uPlot %q from the lockfile (%v)", v, err)
	}
}

func TestHandler(t *testing.T) {
	h := Handler()
	for _, tt := range []struct {
		path, ctype string
		status      int
	}{
		{"/dashboard", "text/html", 200},
		{"/dashboard/", "text/html", 200},
		{"/dashboard/app.js", "javascript", 200},
		{"/dashboard/uPlot.iife.min.js", "javascript", 200},
		{"/dashboard/style.css", "text/css", 200},
		{"/dashboard/nope.js", "", 404},
		{"/dashboard/../../etc/passwd", "", 404},
	} {
		t.Run(tt.path, func(t *testing.T) {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, tt.path, nil))
			if rec.Code != tt.status || !strings.Contains(rec.Header().Get("Content-Type"), tt.ctype) {
				t.Fatalf("status %d, type %q; want %d, %q", rec.Code, rec.Header().Get("Content-Type"), tt.status, tt.ctype)
			}
			if csp := rec.Header().Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || !strings.Contains(csp, "frame-ancestors 'none'") {
				t.Fatalf("CSP %q", csp)
			}
		})
	}
}

package dashboard

import (
	"crypto/sha256"
	"fmt"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestVendoredUplot: the embedded uPlot files are the ones SHA256SUMS
// names, byte for byte, and the folder holds no file it does not name
// (besides the sums and VERSION).
func TestVendoredUplot(t *testing.T) {
	const dir = "vendor/uplot"
	sums, err := fs.ReadFile(Files(), dir+"/SHA256SUMS")
	if err != nil {
		t.Fatal(err)
	}
	named := map[string]bool{"SHA256SUMS": true, "VERSION": true}
	for _, line := range strings.Split(strings.TrimSpace(string(sums)), "\n") {
		want, name, ok := strings.Cut(line, "  ")
		if !ok {
			t.Fatalf("SHA256SUMS line %q is not sha256sum's format", line)
		}
		named[name] = true
		b, err := fs.ReadFile(Files(), dir+"/"+name)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if got := fmt.Sprintf("%x", sha256.Sum256(b)); got != want {
			t.Errorf("%s has sha256 %s, SHA256SUMS says %s", name, got, want)
		}
	}
	entries, err := fs.ReadDir(Files(), dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !named[e.Name()] {
			t.Errorf("%s/%s is not in SHA256SUMS", dir, e.Name())
		}
	}
	if len(named) < 5 {
		t.Errorf("SHA256SUMS names %d files, want uPlot's script, styles and licence", len(named)-2)
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
		{"/dashboard/vendor/uplot/uPlot.iife.min.js", "javascript", 200},
		{"/dashboard/vendor/uplot/uPlot.min.css", "text/css", 200},
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

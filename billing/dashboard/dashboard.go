package dashboard

import (
	"embed"
	"io/fs"
	"net/http"
	"path"
	"strings"
)

//go:embed site
var site embed.FS

// Files is the dashboard as served: index.html, its script and styles, and
// vendor/uplot (uPlot as published, checked against its SHA256SUMS).
func Files() fs.FS {
	sub, err := fs.Sub(site, "site")
	if err != nil {
		panic(err) // the embedded tree always has site/
	}
	return sub
}

// contentSecurityPolicy allows this origin's scripts, styles and API only.
// uPlot sets element styles from script (CSSOM), which style-src allows.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; " +
	"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// Handler serves GET /dashboard (the page) and /dashboard/<asset>.
func Handler() http.Handler {
	files := Files()
	assets := http.FileServerFS(files)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", contentSecurityPolicy)
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		name := strings.TrimPrefix(path.Clean(r.URL.Path), "/dashboard")
		name = strings.TrimPrefix(name, "/")
		if name == "" || name == "index.html" {
			h.Set("Cache-Control", "no-store")
			http.ServeFileFS(w, r, files, "index.html")
			return
		}
		if _, err := fs.Stat(files, name); err != nil {
			http.NotFound(w, r)
			return
		}
		h.Set("Cache-Control", "no-cache")
		r2 := r.Clone(r.Context())
		r2.URL.Path = "/" + name
		assets.ServeHTTP(w, r2)
	})
}

package store

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bulkhead-ai/bulkhead/models/gguf"
)

// testModel writes a small real GGUF file: a llama header with a trained
// context of 256 and one F32 tensor of rows x 64, filled from seed.
func testModel(t testing.TB, seed byte, rows int) []byte {
	t.Helper()
	w := gguf.NewWriter()
	w.SetString("general.architecture", "llama")
	w.SetUint32("llama.context_length", 256)
	w.SetUint32("general.file_type", 0)
	data := make([]byte, rows*64*4)
	for i := range data {
		data[i] = seed + byte(i*7)
	}
	if err := w.AddTensor("token_embd.weight", []uint64{64, uint64(rows)}, gguf.TypeF32, data); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if _, err := w.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func sum(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

// fileServer serves one file over TLS with the behaviours a test picks. Its
// fields are set before the first request; the record is guarded by mu.
type fileServer struct {
	*httptest.Server
	body        []byte
	etag        string // served as ETag ("" none)
	linked      string // X-Linked-Etag on the /resolve/ redirect ("" none)
	linkedSize  int64  // X-Linked-Size on the redirect (0 none)
	ignoreRange bool   // answer 200 to a Range request
	cutAfter    int    // >0: the first transfer stops after this many bytes, dropping the connection
	lieLength   int    // >0: announce this Content-Length, send the body, end
	stall       bool   // send the headers and a few bytes, then nothing
	contentType string

	mu     sync.Mutex
	ranges []string // Range header of each /file request
	cut    bool     // the cut has happened
}

func newFileServer(t *testing.T, body []byte, set func(*fileServer)) *fileServer {
	t.Helper()
	fs := &fileServer{body: body}
	if set != nil {
		set(fs)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/file/", fs.serveFile)
	// Hugging Face's shape: the resolve URL redirects to the CDN with the
	// LFS object's sha256 and size.
	mux.HandleFunc("/hf/{owner}/{repo}/resolve/{rev}/{file...}", func(w http.ResponseWriter, r *http.Request) {
		if fs.linked != "" {
			w.Header().Set("X-Linked-Etag", fs.linked)
		}
		if fs.linkedSize > 0 {
			w.Header().Set("X-Linked-Size", strconv.FormatInt(fs.linkedSize, 10))
		}
		w.Header().Set("X-Repo-Commit", "0123")
		http.Redirect(w, r, "/file/"+r.PathValue("file")+"?X-Amz-Signature=secret", http.StatusFound)
	})
	mux.HandleFunc("/loop/a", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/loop/b", http.StatusFound) })
	mux.HandleFunc("/loop/b", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/loop/a", http.StatusFound) })
	mux.HandleFunc("/hops/{n}", func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.PathValue("n"))
		if n == 0 {
			http.Redirect(w, r, "/file/m.gguf", http.StatusTemporaryRedirect)
			return
		}
		http.Redirect(w, r, fmt.Sprintf("/hops/%d", n-1), http.StatusMovedPermanently)
	})
	mux.HandleFunc("/insecure", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://example.com/m.gguf", http.StatusFound)
	})
	mux.HandleFunc("/missing.gguf", http.NotFound)
	fs.Server = httptest.NewTLSServer(mux)
	t.Cleanup(fs.Close)
	return fs
}

func (fs *fileServer) serveFile(w http.ResponseWriter, r *http.Request) {
	fs.mu.Lock()
	fs.ranges = append(fs.ranges, r.Header.Get("Range"))
	cut := fs.cutAfter > 0 && !fs.cut
	fs.cut = fs.cut || cut
	fs.mu.Unlock()
	if fs.etag != "" {
		w.Header().Set("ETag", fs.etag)
	}
	if fs.contentType != "" {
		w.Header().Set("Content-Type", fs.contentType)
	} else {
		w.Header().Set("Content-Type", "application/octet-stream")
	}
	switch {
	case cut:
		w.Header().Set("Content-Length", strconv.Itoa(len(fs.body)))
		w.WriteHeader(http.StatusOK)
		w.Write(fs.body[:fs.cutAfter])
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler) // drops the connection mid-body
	case fs.lieLength > 0:
		w.Header().Set("Content-Length", strconv.Itoa(fs.lieLength))
		w.WriteHeader(http.StatusOK)
		w.Write(fs.body)
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler)
	case fs.stall:
		w.Header().Set("Content-Length", strconv.Itoa(len(fs.body)))
		w.WriteHeader(http.StatusOK)
		w.Write(fs.body[:64])
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
		case <-time.After(10 * time.Second):
		}
	case fs.ignoreRange:
		w.Header().Set("Content-Length", strconv.Itoa(len(fs.body)))
		w.Write(fs.body)
	default:
		http.ServeContent(w, r, "m.gguf", time.Time{}, bytes.NewReader(fs.body))
	}
}

// seen returns the Range headers of the file requests so far.
func (fs *fileServer) seen() []string {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return append([]string(nil), fs.ranges...)
}

func newStore(t *testing.T, srv *fileServer, set func(*Config)) *Store {
	t.Helper()
	cfg := Config{Dir: t.TempDir(), HFEndpoint: srv.URL + "/hf/"}
	if set != nil {
		set(&cfg)
	}
	s, err := New(srv.Client(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// dirFiles lists the model directory's visible, non-index files.
func dirFiles(t *testing.T, s *Store) []string {
	t.Helper()
	var out []string
	ents, err := readDir(s.Dir())
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if !strings.HasPrefix(e, ".") && e != IndexFile {
			out = append(out, e)
		}
	}
	return out
}

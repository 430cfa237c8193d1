package store

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func readDir(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out, err
}

// TestPull runs one pull per case against its own server and checks the
// outcome: the error's sentinel, or the registered file's bytes and the
// checksum source; and in every failure that nothing is registered and no
// file sits under a final name.
func TestPull(t *testing.T) {
	model := testModel(t, 1, 64)
	good := sum(model)
	bad := strings.Repeat("ab", 32)
	html := append([]byte("<!DOCTYPE html><html><body>Sign in</body></html>"), bytes.Repeat([]byte(" "), 4096)...)
	corrupt := append([]byte(nil), model[:len(model)-100]...) // GGUF magic, tensor data cut short

	cases := []struct {
		name     string
		body     []byte
		server   func(*fileServer)
		cfg      func(*Config)
		source   string // path on the server, or a full source with "hf:"
		opt      PullOptions
		want     error
		verified string
		keepPart bool // an interruption keeps the partial file
	}{
		{name: "https", source: "/file/m.gguf", verified: ""},
		{name: "hf resolve with published sha", source: "hf:owner/repo/m.gguf", server: func(s *fileServer) { s.linked = `"` + good + `"` }, verified: "published"},
		{name: "hf revision and folder", source: "hf:owner/repo/sub/m.gguf@v1.0", server: func(s *fileServer) { s.linked = good }, verified: "published"},
		{name: "given and published", source: "hf:owner/repo/m.gguf", server: func(s *fileServer) { s.linked = good }, opt: PullOptions{SHA256: strings.ToUpper(good)}, verified: "given+published"},
		{name: "given sha", source: "/file/m.gguf", opt: PullOptions{SHA256: good}, verified: "given"},
		{name: "etag of 64 hex is a sha256", source: "/file/m.gguf", server: func(s *fileServer) { s.etag = `"` + good + `"` }, verified: "published"},
		{name: "other etag is not a checksum", source: "/file/m.gguf", server: func(s *fileServer) { s.etag = `"abc-123"` }, verified: ""},
		{name: "weak etag is not a checksum", source: "/file/m.gguf", server: func(s *fileServer) { s.etag = `W/"` + bad + `"` }, verified: ""},
		{name: "published size matches", source: "hf:owner/repo/m.gguf", server: func(s *fileServer) { s.linkedSize = int64(len(model)) }},
		{name: "redirects within the bound", source: "/hops/3"},

		{name: "given sha wrong", source: "/file/m.gguf", opt: PullOptions{SHA256: bad}, want: ErrChecksum},
		{name: "given sha malformed", source: "/file/m.gguf", opt: PullOptions{SHA256: "xyz"}, want: ErrChecksum},
		{name: "published sha wrong", source: "hf:owner/repo/m.gguf", server: func(s *fileServer) { s.linked = `"` + bad + `"` }, want: ErrChecksum},
		{name: "given disagrees with published", source: "hf:owner/repo/m.gguf", server: func(s *fileServer) { s.linked = bad }, opt: PullOptions{SHA256: good}, want: ErrChecksum},
		{name: "etag sha wrong", source: "/file/m.gguf", server: func(s *fileServer) { s.etag = `"` + bad + `"` }, want: ErrChecksum},
		{name: "published size differs", source: "hf:owner/repo/m.gguf", server: func(s *fileServer) { s.linkedSize = int64(len(model)) + 1 }, want: ErrSize},
		{name: "html page", source: "/file/m.gguf", body: html, server: func(s *fileServer) { s.contentType = "text/html" }, want: ErrNotGGUF},
		{name: "empty body", source: "/file/m.gguf", body: []byte{}, want: ErrNotGGUF},
		{name: "wrong gguf version", source: "/file/m.gguf", body: append([]byte("GGUF\x09\x00\x00\x00"), model[8:]...), want: ErrNotGGUF},
		{name: "corrupt gguf", source: "/file/m.gguf", body: corrupt, want: ErrInvalid},
		{name: "content-length lies", source: "/file/m.gguf", server: func(s *fileServer) { s.lieLength = len(model) + 1000 }, want: ErrInterrupted, keepPart: true},
		{name: "connection cut", source: "/file/m.gguf", server: func(s *fileServer) { s.cutAfter = 5000 }, want: ErrInterrupted, keepPart: true},
		{name: "stall", source: "/file/m.gguf", server: func(s *fileServer) { s.stall = true }, cfg: func(c *Config) { c.StallTimeout = 200 * time.Millisecond }, want: ErrInterrupted, keepPart: true},
		{name: "too large", source: "/file/m.gguf", cfg: func(c *Config) { c.MaxBytes = 1000 }, want: ErrTooLarge},
		{name: "redirect loop", source: "/loop/a", want: ErrRedirects},
		{name: "too many redirects", source: "/hops/20", cfg: func(c *Config) { c.MaxRedirects = 5 }, want: ErrRedirects},
		{name: "redirect to plain http", source: "/insecure", want: ErrInsecure},
		{name: "not found", source: "/missing.gguf", want: ErrHTTP},
		{name: "plain http to a remote host", source: "http://example.com/m.gguf", want: ErrInsecure},
		{name: "bad name", source: "/file/m.gguf", opt: PullOptions{Name: "has space"}, want: ErrName},
		{name: "name with =", source: "/file/m.gguf", opt: PullOptions{Name: "a=b"}, want: ErrName},
		{name: "name too long", source: "/file/m.gguf", opt: PullOptions{Name: strings.Repeat("n", 257)}, want: ErrName},
		{name: "no name derivable", source: "/file/.gguf", want: ErrName},
		{name: "bad source", source: "hf:owner/m.gguf", want: ErrSource},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			body := model
			if tc.body != nil {
				body = tc.body
			}
			srv := newFileServer(t, body, tc.server)
			s := newStore(t, srv, tc.cfg)
			source := tc.source
			if strings.HasPrefix(source, "/") {
				source = srv.URL + source
			}
			res, err := s.Pull(context.Background(), source, tc.opt)
			if tc.want != nil {
				if !errors.Is(err, tc.want) {
					t.Fatalf("err = %v, want %v", err, tc.want)
				}
				if es, _ := s.Entries(); len(es) != 0 {
					t.Errorf("registered %v after a failed pull", es)
				}
				files := dirFiles(t, s)
				for _, f := range files {
					if strings.HasSuffix(f, ".gguf") {
						t.Errorf("file %s under a final name after a failed pull", f)
					}
				}
				hasPart := false
				for _, f := range files {
					hasPart = hasPart || strings.HasSuffix(f, ".partial")
				}
				if hasPart != tc.keepPart {
					t.Errorf("partial file kept = %v, want %v (files %v)", hasPart, tc.keepPart, files)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got, err := os.ReadFile(res.Path)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, body) || res.SHA256 != sum(body) || res.Size != int64(len(body)) {
				t.Errorf("pulled %d bytes sha %s, want %d sha %s", len(got), res.SHA256, len(body), sum(body))
			}
			if res.Verified != tc.verified {
				t.Errorf("verified = %q, want %q", res.Verified, tc.verified)
			}
			e, path, err := s.Lookup(res.Name)
			if err != nil || path != res.Path || e.SHA256 != res.SHA256 || e.Source != source {
				t.Errorf("Lookup(%q) = %+v, %q, %v", res.Name, e, path, err)
			}
			if files := dirFiles(t, s); len(files) != 1 {
				t.Errorf("directory holds %v, want the one model file", files)
			}
		})
	}
}

// TestPullHTMLRefusedEarly checks that a large non-GGUF body is refused from
// its first bytes, not after downloading it.
func TestPullHTMLRefusedEarly(t *testing.T) {
	big := append([]byte("<html>"), bytes.Repeat([]byte("x"), 256<<20)...)
	srv := newFileServer(t, big, func(s *fileServer) { s.ignoreRange = true })
	s := newStore(t, srv, nil)
	start := time.Now()
	_, err := s.Pull(context.Background(), srv.URL+"/file/page.gguf", PullOptions{})
	if !errors.Is(err, ErrNotGGUF) || !strings.Contains(err.Error(), "<html>") {
		t.Fatalf("err = %v, want ErrNotGGUF naming the first bytes", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("refusal took %v", d)
	}
}

// TestPullResume interrupts a transfer, then pulls again: each case's server
// answers the resume its own way, and the file must come out whole.
func TestPullResume(t *testing.T) {
	model := testModel(t, 2, 256) // 64 KiB of tensor data
	const cut = 20000
	cases := []struct {
		name        string
		server      func(*fileServer)
		change      bool   // the file changes between the two pulls
		wantRange   string // the resume request's Range header
		wantResumed int64
	}{
		{name: "range honoured", server: func(s *fileServer) { s.etag = `"v1"` }, wantRange: "bytes=20000-", wantResumed: cut},
		{name: "range honoured without validator", wantRange: "bytes=20000-", wantResumed: cut},
		{name: "range ignored (200)", server: func(s *fileServer) { s.ignoreRange = true }, wantRange: "bytes=20000-", wantResumed: 0},
		{name: "file changed (If-Range)", server: func(s *fileServer) { s.etag = `"v1"` }, change: true, wantRange: "bytes=20000-", wantResumed: 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := newFileServer(t, model, func(s *fileServer) {
				s.cutAfter = cut
				if tc.server != nil {
					tc.server(s)
				}
			})
			s := newStore(t, srv, nil)
			src := srv.URL + "/file/m.gguf"
			_, err := s.Pull(context.Background(), src, PullOptions{})
			if !errors.Is(err, ErrInterrupted) {
				t.Fatalf("first pull: err = %v, want ErrInterrupted", err)
			}
			part := filepath.Join(s.Dir(), fileName("m")+".partial")
			if st, err := os.Stat(part); err != nil || st.Size() != cut {
				t.Fatalf("partial file after the cut: %v, %v", st, err)
			}
			want := model
			if tc.change {
				want = testModel(t, 3, 256)
				srv.body, srv.etag = want, `"v2"`
			}
			var last Progress
			res, err := s.Pull(context.Background(), src, PullOptions{Progress: func(p Progress) { last = p }})
			if err != nil {
				t.Fatal(err)
			}
			got, _ := os.ReadFile(res.Path)
			if !bytes.Equal(got, want) || res.SHA256 != sum(want) {
				t.Fatalf("resumed file differs: %d bytes, want %d", len(got), len(want))
			}
			if res.Resumed != tc.wantResumed {
				t.Errorf("resumed %d bytes, want %d", res.Resumed, tc.wantResumed)
			}
			if last.Done != int64(len(want)) || last.Total != int64(len(want)) || last.Resumed != tc.wantResumed {
				t.Errorf("last progress %+v", last)
			}
			if r := srv.seen(); len(r) != 2 || r[0] != "" || r[1] != tc.wantRange {
				t.Errorf("Range headers %q, want [\"\" %q]", r, tc.wantRange)
			}
			if _, err := os.Stat(part); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("partial file left after success: %v", err)
			}
		})
	}
}

// TestPullPartialComplete covers a partial file that already holds the
// whole file: the server answers 416 and the pull only verifies.
func TestPullPartialComplete(t *testing.T) {
	model := testModel(t, 4, 64)
	for _, tc := range []struct {
		name    string
		partial []byte
		resumed int64
	}{
		{"complete (416)", model, int64(len(model))},
		{"longer than the file (416, restart)", append(append([]byte(nil), model...), 1, 2, 3), 0},
		{"not gguf (restart)", append([]byte("garbage!"), model[8:]...), 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newFileServer(t, model, nil)
			s := newStore(t, srv, nil)
			src := srv.URL + "/file/m.gguf"
			part := filepath.Join(s.Dir(), fileName("m")+".partial")
			if err := os.MkdirAll(s.Dir(), 0o755); err != nil {
				t.Fatal(err)
			}
			os.WriteFile(part, tc.partial, 0o644)
			os.WriteFile(part+".json", []byte(`{"url":"`+src+`","total":-1}`), 0o644)
			res, err := s.Pull(context.Background(), src, PullOptions{SHA256: sum(model)})
			if err != nil {
				t.Fatal(err)
			}
			if res.Resumed != tc.resumed || res.SHA256 != sum(model) {
				t.Errorf("resumed %d sha %s, want %d", res.Resumed, res.SHA256, tc.resumed)
			}
		})
	}
}

// TestPullNames covers the name rules: the default, an explicit one, the
// same source again (nothing downloaded), another source under a taken name
// (refused unless Force) and a pull while another holds the model's lock.
func TestPullNames(t *testing.T) {
	a, b := testModel(t, 5, 64), testModel(t, 6, 64)
	srvA := newFileServer(t, a, nil)
	srvB := newFileServer(t, b, nil)
	s := newStore(t, srvA, nil)
	ctx := context.Background()
	srcA, srcB := srvA.URL+"/file/Tiny-Q8_0.gguf", srvB.URL+"/file/other.gguf"

	res, err := s.Pull(ctx, srcA, PullOptions{})
	if err != nil || res.Name != "tiny-q8_0" || res.Present {
		t.Fatalf("first pull: %+v, %v", res, err)
	}
	steps := []struct {
		name    string
		source  string
		opt     PullOptions
		want    error
		present bool
		sha     string
	}{
		{name: "same source again", source: srcA, present: true, sha: sum(a)},
		{name: "same source, other sha", source: srcA, opt: PullOptions{SHA256: sum(b)}, want: ErrExists},
		{name: "other source, taken name", source: srcB, opt: PullOptions{Name: "tiny-q8_0"}, want: ErrExists},
		{name: "other source, force", source: srcB, opt: PullOptions{Name: "tiny-q8_0", Force: true}, sha: sum(b)},
		{name: "same source, force downloads again", source: srcB, opt: PullOptions{Name: "tiny-q8_0", Force: true}, sha: sum(b)},
		{name: "second name", source: srcA, opt: PullOptions{Name: "@cf/tiny"}, sha: sum(a)},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			res, err := s.Pull(ctx, st.source, st.opt)
			if st.want != nil {
				if !errors.Is(err, st.want) {
					t.Fatalf("err = %v, want %v", err, st.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if res.Present != st.present || res.SHA256 != st.sha {
				t.Errorf("present %v sha %s, want %v %s", res.Present, res.SHA256, st.present, st.sha)
			}
		})
	}
	es, err := s.Entries()
	if err != nil || len(es) != 2 || es[0].Name != "@cf/tiny" || es[1].Name != "tiny-q8_0" || es[1].SHA256 != sum(b) {
		t.Fatalf("entries %+v, %v", es, err)
	}
	if files := dirFiles(t, s); len(files) != 2 {
		t.Errorf("directory holds %v, want two model files", files)
	}

	t.Run("busy", func(t *testing.T) {
		unlock, err := lockFile(filepath.Join(s.Dir(), locksDir, fileName("busy")+".lock"), false)
		if err != nil {
			t.Fatal(err)
		}
		defer unlock()
		if _, err := s.Pull(ctx, srcA, PullOptions{Name: "busy"}); !errors.Is(err, ErrBusy) {
			t.Fatalf("err = %v, want ErrBusy", err)
		}
	})
}

// TestPullCancel ends a pull through its context mid-transfer: the error
// says so, and the partial file stays for a resume.
func TestPullCancel(t *testing.T) {
	srv := newFileServer(t, testModel(t, 7, 64), func(s *fileServer) { s.stall = true })
	s := newStore(t, srv, nil)
	ctx, cancel := context.WithCancel(context.Background())
	_, err := s.Pull(ctx, srv.URL+"/file/m.gguf", PullOptions{Progress: func(p Progress) {
		if p.Done > 0 {
			cancel()
		}
	}})
	if !errors.Is(err, ErrInterrupted) || !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want ErrInterrupted and context.Canceled", err)
	}
	if files := dirFiles(t, s); len(files) != 2 || !strings.HasSuffix(files[0], ".partial") {
		t.Errorf("directory holds %v, want the partial file and its record", files)
	}
}

package store

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// hops is what the redirect chain published about the file: Hugging Face's
// resolve endpoint answers with a redirect to its CDN that carries the LFS
// object's sha256 (X-Linked-Etag) and size (X-Linked-Size).
type hops struct {
	sha256 string // from X-Linked-Etag on any hop, else a sha256-shaped ETag of the last
	size   int64  // X-Linked-Size, -1 when absent
	url    string // the URL that answered, query redacted (for messages)
}

// get sends a GET for rawURL with hdr, following up to MaxRedirects
// redirects itself so that every hop passes checkURL and the headers of the
// redirect responses are seen.
func (s *Store) get(ctx context.Context, rawURL string, hdr http.Header) (*http.Response, hops, error) {
	h := hops{size: -1}
	seen := map[string]bool{}
	cur := rawURL
	for hop := 0; ; hop++ {
		u, err := url.Parse(cur)
		if err != nil {
			return nil, h, fmt.Errorf("%w: %q: %w", ErrHTTP, cur, err)
		}
		if err := checkURL(u); err != nil {
			return nil, h, fmt.Errorf("%s: %w", cur, err)
		}
		seen[u.String()] = true
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
		if err != nil {
			return nil, h, fmt.Errorf("%w: %w", ErrHTTP, err)
		}
		req.Header = hdr.Clone()
		resp, err := s.client.Do(req)
		if err != nil {
			if ctx.Err() != nil {
				return nil, h, ctxErr(ctx)
			}
			return nil, h, fmt.Errorf("%w: GET %s: %w", ErrHTTP, redact(u), err)
		}
		if h.sha256 == "" {
			h.sha256 = sha256Tag(resp.Header.Get("X-Linked-Etag"))
		}
		if v := resp.Header.Get("X-Linked-Size"); v != "" && h.size < 0 {
			if n, err := strconv.ParseInt(v, 10, 64); err == nil && n >= 0 {
				h.size = n
			}
		}
		switch resp.StatusCode {
		case http.StatusMovedPermanently, http.StatusFound, http.StatusSeeOther, http.StatusTemporaryRedirect, http.StatusPermanentRedirect:
		default:
			if h.sha256 == "" {
				h.sha256 = sha256Tag(resp.Header.Get("ETag"))
			}
			h.url = redact(u)
			return resp, h, nil
		}
		loc := resp.Header.Get("Location")
		drain(resp)
		if loc == "" {
			return nil, h, fmt.Errorf("%w: %s answered %s without a Location", ErrHTTP, redact(u), resp.Status)
		}
		next, err := u.Parse(loc)
		if err != nil {
			return nil, h, fmt.Errorf("%w: %s redirects to %q: %w", ErrHTTP, redact(u), loc, err)
		}
		if seen[next.String()] {
			return nil, h, fmt.Errorf("%w: redirect loop at %s", ErrRedirects, redact(next))
		}
		if hop+1 > s.cfg.MaxRedirects {
			return nil, h, fmt.Errorf("%w: more than %d from %s", ErrRedirects, s.cfg.MaxRedirects, rawURL)
		}
		cur = next.String()
	}
}

// redact drops the query (CDN URLs carry signatures) for error messages.
func redact(u *url.URL) string {
	c := *u
	if c.RawQuery != "" {
		c.RawQuery = "…"
	}
	return c.String()
}

// drain discards a little of a body so the connection can be reused, then
// closes it.
func drain(resp *http.Response) {
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
}

// sha256Tag returns the sha256 an entity tag carries: a strong tag of exactly
// 64 hex digits (quotes optional), lower-cased; else "".
func sha256Tag(tag string) string {
	tag = strings.TrimSpace(tag)
	if strings.HasPrefix(tag, "W/") {
		return ""
	}
	tag = strings.ToLower(strings.Trim(tag, `"`))
	if !isSHA256(tag) {
		return ""
	}
	return tag
}

func isSHA256(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// contentRange parses a Content-Range value: "bytes FIRST-LAST/TOTAL" or
// "bytes */TOTAL" (first = last = -1); TOTAL "*" is -1.
func contentRange(v string) (first, last, total int64, err error) {
	bad := fmt.Errorf("%w: Content-Range %q", ErrHTTP, v)
	rest, ok := strings.CutPrefix(v, "bytes ")
	if !ok {
		return 0, 0, 0, bad
	}
	rng, tot, ok := strings.Cut(rest, "/")
	if !ok {
		return 0, 0, 0, bad
	}
	total = -1
	if tot != "*" {
		if total, err = nonNeg(tot); err != nil {
			return 0, 0, 0, bad
		}
	}
	if rng == "*" {
		if total < 0 {
			return 0, 0, 0, bad
		}
		return -1, -1, total, nil
	}
	a, b, ok := strings.Cut(rng, "-")
	if !ok {
		return 0, 0, 0, bad
	}
	if first, err = nonNeg(a); err != nil {
		return 0, 0, 0, bad
	}
	if last, err = nonNeg(b); err != nil || last < first || (total >= 0 && last >= total) {
		return 0, 0, 0, bad
	}
	return first, last, total, nil
}

func nonNeg(s string) (int64, error) {
	if s == "" || strings.Trim(s, "0123456789") != "" {
		return 0, errors.New("not a number")
	}
	return strconv.ParseInt(s, 10, 64)
}

// sniffLen is how much of a body sniff needs.
const sniffLen = 8

// sniff checks that b, a file's first bytes, is GGUF's magic and a version
// this platform reads, so that a wrong body is refused before it is
// downloaded.
func sniff(b []byte, contentType string) error {
	if len(b) < sniffLen {
		return fmt.Errorf("%w: the body is only %d bytes", ErrNotGGUF, len(b))
	}
	if binary.LittleEndian.Uint32(b) != 0x46554747 {
		ct := ""
		if contentType != "" {
			ct = fmt.Sprintf(", Content-Type %s", contentType)
		}
		return fmt.Errorf("%w: the body starts with %q%s, not GGUF's magic (is the URL a web page rather than the file?)", ErrNotGGUF, b[:sniffLen], ct)
	}
	if v := binary.LittleEndian.Uint32(b[4:]); v != 2 && v != 3 {
		return fmt.Errorf("%w: GGUF version %d (want 2 or 3)", ErrNotGGUF, v)
	}
	return nil
}

// ctxErr is the caller's cancellation, said so the user knows to rerun.
func ctxErr(ctx context.Context) error {
	return fmt.Errorf("%w: %w (run the same pull again to resume)", ErrInterrupted, context.Cause(ctx))
}

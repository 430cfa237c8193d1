package edge

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
	"strconv"
	"sync"
)

// ErrConflictingFraming is a request sent with both Content-Length and
// Transfer-Encoding (HTTP 400).
var ErrConflictingFraming = errors.New("edge: request has both Content-Length and Transfer-Encoding")

// Listen returns a TCP listener on addr for NewHTTPServer's servers: each
// connection it accepts reads the framing headers of every request on it, so
// that a request with both Content-Length and Transfer-Encoding (RFC 9112
// 6.3, the shape of request smuggling through a proxy in front) is refused
// with 400 and its connection closed. net/http cannot tell: it drops the
// Content-Length of a chunked request before the handler sees it.
func Listen(addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	return FramingListener(ln), nil
}

// FramingListener wraps ln as Listen does.
func FramingListener(ln net.Listener) net.Listener { return framingListener{ln} }

type framingListener struct{ net.Listener }

func (l framingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &framedConn{Conn: c, scan: framingScanner{conflict: -1}}, nil
}

// framedConn is a connection whose reads are scanned for request framing.
// net/http reads it from the serving goroutine and, while a handler runs,
// from a background read: mu orders the two.
type framedConn struct {
	net.Conn
	mu     sync.Mutex
	scan   framingScanner
	served int // requests handed to the handler so far (refuseConflicting)
}

func (c *framedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.mu.Lock()
		c.scan.feed(p[:n])
		c.mu.Unlock()
	}
	return n, err
}

// nextConflicts counts one more request served on c and reports whether its
// headers had conflicting framing. net/http serves a connection's requests
// one at a time and in order, so the count matches the scanner's.
func (c *framedConn) nextConflicts() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	i := c.served
	c.served++
	return c.scan.conflict == i
}

// framingScanner follows the requests on a connection's byte stream: a
// header block up to its blank line, then Content-Length bytes of body.
// It stops at the first chunked request (the edge closes the connection
// after answering it: closeAfterChunked), at a header block too large for
// any server (net/http refuses it and closes), or at a length it cannot read
// (likewise).
type framingScanner struct {
	head     []byte // the header block read so far
	body     int64  // body bytes still to skip
	requests int    // header blocks completed
	conflict int    // the index of the request with both headers; -1: none
	stopped  bool
}

// maxScannedHeader bounds head: past net/http's own limit (MaxHeaderBytes
// plus its 4 KiB slack) the request is refused before any handler runs.
const maxScannedHeader = DefaultMaxHeaderBytes + 8<<10

func (s *framingScanner) feed(p []byte) {
	for len(p) > 0 && !s.stopped {
		if s.body > 0 {
			n := min(s.body, int64(len(p)))
			s.body -= n
			p = p[n:]
			continue
		}
		if len(s.head) == 0 {
			// net/http skips blank lines a client leaves after a body.
			for len(p) > 0 && (p[0] == '\r' || p[0] == '\n') {
				p = p[1:]
			}
			if len(p) == 0 {
				return
			}
		}
		from := max(len(s.head)-3, 0)
		s.head = append(s.head, p...)
		p = nil
		end := headerEnd(s.head[from:])
		if end < 0 {
			if len(s.head) > maxScannedHeader {
				s.stopped = true
			}
			continue
		}
		end += from
		p = s.head[end:] // the rest of this read: the body, or the next request
		s.request(s.head[:end])
		s.head = s.head[:0:0] // p still points into the old array
	}
}

// headerEnd returns the index just past the blank line ending a header
// block in b ("\r\n\r\n" or a bare "\n\n"), or -1.
func headerEnd(b []byte) int {
	for i := 0; i < len(b); i++ {
		if b[i] != '\n' {
			continue
		}
		switch {
		case i+1 < len(b) && b[i+1] == '\n':
			return i + 2
		case i+2 < len(b) && b[i+1] == '\r' && b[i+2] == '\n':
			return i + 3
		}
	}
	return -1
}

// request reads one header block's framing.
func (s *framingScanner) request(head []byte) {
	index := s.requests
	s.requests++
	var length, chunked, bad bool
	var n int64
	lines := bytes.Split(head, []byte("\n"))
	for _, line := range lines[1:] { // the request line first
		name, value, ok := bytes.Cut(bytes.TrimRight(line, "\r"), []byte(":"))
		if !ok {
			continue
		}
		switch {
		case bytes.EqualFold(name, []byte("Content-Length")):
			length = true
			v, err := strconv.ParseInt(string(bytes.TrimSpace(value)), 10, 64)
			if err != nil || v < 0 {
				bad = true
			}
			n = v
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			chunked = true
		}
	}
	switch {
	case chunked && length:
		s.conflict = index
		s.stopped = true
	case chunked, bad:
		s.stopped = true
	default:
		s.body = n
	}
}

type framedConnKey struct{}

// framingContext is NewHTTPServer's ConnContext: it puts a Listen
// connection where refuseConflicting finds it.
func framingContext(ctx context.Context, c net.Conn) context.Context {
	if fc, ok := c.(*framedConn); ok {
		return context.WithValue(ctx, framedConnKey{}, fc)
	}
	return ctx
}

// refuseConflicting answers 400 (and closes the connection) to a request
// whose headers had both Content-Length and Transfer-Encoding, on a
// connection from Listen; it passes any other request to next.
func refuseConflicting(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fc, _ := r.Context().Value(framedConnKey{}).(*framedConn)
		if fc == nil || r.ProtoMajor != 1 || !fc.nextConflicts() {
			next.ServeHTTP(w, r)
			return
		}
		w.Header().Set("Connection", "close")
		writeErrorFor(w, r, newError(rowInvalidInput,
			"a request may not carry both Content-Length and Transfer-Encoding (RFC 9112, section 6.3)", ErrConflictingFraming))
	})
}

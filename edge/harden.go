package edge

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"
)

// Defaults for zero HTTPLimits fields.
const (
	DefaultReadHeaderTimeout = 5 * time.Second
	DefaultBodyReadTimeout   = 15 * time.Second
	DefaultIdleTimeout       = 60 * time.Second
	DefaultMaxHeaderBytes    = 32 << 10
)

// HTTPLimits bound what one client connection may hold of a listener: a
// client that sends its headers or body too slowly, or keeps an idle
// connection open, is cut off. Zero values take the defaults above.
type HTTPLimits struct {
	ReadHeaderTimeout time.Duration // the request line and headers must arrive within this
	BodyReadTimeout   time.Duration // the whole body must arrive within this of the headers; else 408
	IdleTimeout       time.Duration // a keep-alive connection idle this long is closed
	MaxHeaderBytes    int           // largest request line plus headers
}

// Validate fills zero fields with their defaults and reports the first bad
// one, wrapping ErrConfig. What it configures calls it; callers may call it
// first to fail early.
func (l *HTTPLimits) Validate() error {
	switch {
	case l.ReadHeaderTimeout < 0:
		return fmt.Errorf("%w: HTTP ReadHeaderTimeout %v is negative", ErrConfig, l.ReadHeaderTimeout)
	case l.BodyReadTimeout < 0:
		return fmt.Errorf("%w: HTTP BodyReadTimeout %v is negative", ErrConfig, l.BodyReadTimeout)
	case l.IdleTimeout < 0:
		return fmt.Errorf("%w: HTTP IdleTimeout %v is negative", ErrConfig, l.IdleTimeout)
	case l.MaxHeaderBytes < 0:
		return fmt.Errorf("%w: HTTP MaxHeaderBytes %d is negative", ErrConfig, l.MaxHeaderBytes)
	}
	if l.ReadHeaderTimeout == 0 {
		l.ReadHeaderTimeout = DefaultReadHeaderTimeout
	}
	if l.BodyReadTimeout == 0 {
		l.BodyReadTimeout = DefaultBodyReadTimeout
	}
	if l.IdleTimeout == 0 {
		l.IdleTimeout = DefaultIdleTimeout
	}
	if l.MaxHeaderBytes == 0 {
		l.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	return nil
}

// NewHTTPServer returns an http.Server for h with l's limits: every
// listener of a node (the edge's, a metrics listener) is built with it, and
// serves a listener from Listen (which lets it refuse conflicting framing).
func NewHTTPServer(h http.Handler, l HTTPLimits) (*http.Server, error) {
	if err := l.Validate(); err != nil {
		return nil, err
	}
	return &http.Server{
		Handler:           refuseConflicting(bodyDeadline(h, l.BodyReadTimeout)),
		ConnContext:       framingContext,
		ReadHeaderTimeout: l.ReadHeaderTimeout,
		IdleTimeout:       l.IdleTimeout,
		MaxHeaderBytes:    l.MaxHeaderBytes,
	}, nil
}

// HTTPServer returns the http.Server for h (the edge's handler, perhaps with
// operational routes beside it) with the limits of Config.HTTP.
func (s *Server) HTTPServer(h http.Handler) *http.Server {
	hs, err := NewHTTPServer(h, s.cfg.HTTP)
	if err != nil {
		panic(err) // New validated cfg.HTTP
	}
	return hs
}

// ErrBodyTimeout is a request body that did not arrive within the body read
// deadline (HTTP 408).
var ErrBodyTimeout = errors.New("edge: request body not received in time")

// bodyDeadline gives each request's body d to arrive. A body that stalls is
// cut off: whatever the handler answered is replaced by a 408 from the error
// table and the connection is closed. A handler that answers without
// reading the body (an unauthenticated request) closes the connection at
// once rather than waiting for the rest of the body.
func bodyDeadline(next http.Handler, d time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == nil || r.Body == http.NoBody {
			next.ServeHTTP(w, r)
			return
		}
		rc := http.NewResponseController(w)
		if err := rc.SetReadDeadline(time.Now().Add(d)); err != nil {
			next.ServeHTTP(w, r) // not a net/http connection (tests)
			return
		}
		b := &deadlineBody{body: r.Body, rc: rc}
		r.Body = b
		tw := &timeoutWriter{ResponseWriter: w, body: b}
		next.ServeHTTP(tw, r)
		if b.timedOut() {
			w.Header().Set("Connection", "close")
			writeErrorFor(w, r, newError(rowBodyTimeout, "", ErrBodyTimeout))
			return
		}
		if !b.done() {
			// Do not wait for a body nobody reads: the server would drain it
			// for keep-alive until the deadline.
			_ = rc.SetReadDeadline(time.Now())
		}
	})
}

// deadlineBody is a request body read under a deadline: at EOF the deadline
// is cleared (the server's own background read must not expire during a
// long stream); a read that hit the deadline is remembered.
type deadlineBody struct {
	body io.ReadCloser
	rc   *http.ResponseController

	mu      sync.Mutex // guards eof and timeout
	eof     bool
	timeout bool
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.body.Read(p)
	if err == nil {
		return n, nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	var ne net.Error
	switch {
	case errors.Is(err, io.EOF):
		if !b.eof {
			b.eof = true
			_ = b.rc.SetReadDeadline(time.Time{})
		}
	case errors.As(err, &ne) && ne.Timeout():
		b.timeout = true
		err = ErrBodyTimeout
	}
	return n, err
}

func (b *deadlineBody) Close() error { return b.body.Close() }

func (b *deadlineBody) timedOut() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.timeout
}

func (b *deadlineBody) done() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.eof
}

// timeoutWriter drops the handler's answer once the body timed out, so that
// bodyDeadline answers 408 instead.
type timeoutWriter struct {
	http.ResponseWriter
	body *deadlineBody
}

func (w *timeoutWriter) WriteHeader(code int) {
	if !w.body.timedOut() {
		w.ResponseWriter.WriteHeader(code)
	}
}

func (w *timeoutWriter) Write(p []byte) (int, error) {
	if w.body.timedOut() {
		return len(p), nil
	}
	return w.ResponseWriter.Write(p)
}

// Unwrap lets http.ResponseController reach the connection (flushes,
// deadlines).
func (w *timeoutWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

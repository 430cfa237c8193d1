package queue

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
)

// TraceparentHeader is the W3C trace-context header carried on job messages.
const TraceparentHeader = "traceparent"

// ErrBadTrace reports a traceparent value that does not parse.
var ErrBadTrace = errors.New("queue: bad traceparent")

// Trace is a W3C trace context: the trace, the parent span, and the flags.
// It is a minimal stand-in until OpenTelemetry is wired in cmd.
type Trace struct {
	TraceID [16]byte
	SpanID  [8]byte
	Flags   byte // bit 0: sampled
}

// NewTrace starts a new trace with random ids, sampled.
func NewTrace() Trace {
	var t Trace
	for t.TraceID == ([16]byte{}) {
		rand.Read(t.TraceID[:])
	}
	for t.SpanID == ([8]byte{}) {
		rand.Read(t.SpanID[:])
	}
	t.Flags = 1
	return t
}

// Valid reports whether neither id is all zeros.
func (t Trace) Valid() bool { return t.TraceID != [16]byte{} && t.SpanID != [8]byte{} }

// String is the traceparent form: 00-<trace id>-<span id>-<flags>.
func (t Trace) String() string {
	return fmt.Sprintf("00-%x-%x-%02x", t.TraceID, t.SpanID, t.Flags)
}

// ParseTraceparent parses a traceparent header value. Version 00 must be
// exactly 55 characters; later versions may append fields after a '-'.
// Version ff, upper-case hex and all-zero ids are refused.
func ParseTraceparent(s string) (Trace, error) {
	var t Trace
	if len(s) < 55 || (len(s) > 55 && s[55] != '-') || s[2] != '-' || s[35] != '-' || s[52] != '-' {
		return t, fmt.Errorf("%w: %q", ErrBadTrace, s)
	}
	ver, ok := lowerHex(s[0:2])
	if !ok || ver[0] == 0xff || (ver[0] == 0 && len(s) != 55) {
		return t, fmt.Errorf("%w: version in %q", ErrBadTrace, s)
	}
	tid, ok1 := lowerHex(s[3:35])
	sid, ok2 := lowerHex(s[36:52])
	flags, ok3 := lowerHex(s[53:55])
	if !ok1 || !ok2 || !ok3 {
		return t, fmt.Errorf("%w: %q", ErrBadTrace, s)
	}
	copy(t.TraceID[:], tid)
	copy(t.SpanID[:], sid)
	t.Flags = flags[0]
	if !t.Valid() {
		return Trace{}, fmt.Errorf("%w: zero id in %q", ErrBadTrace, s)
	}
	return t, nil
}

func lowerHex(s string) ([]byte, bool) {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return nil, false
		}
	}
	b, err := hex.DecodeString(s)
	return b, err == nil
}

type traceKey struct{}

// ContextWithTrace returns ctx carrying t.
func ContextWithTrace(ctx context.Context, t Trace) context.Context {
	return context.WithValue(ctx, traceKey{}, t)
}

// TraceFromContext returns the trace ctx carries, if any.
func TraceFromContext(ctx context.Context) (Trace, bool) {
	t, ok := ctx.Value(traceKey{}).(Trace)
	return t, ok && t.Valid()
}

// InjectTrace writes ctx's trace into h as a traceparent header; without a
// trace in ctx it leaves h alone.
func InjectTrace(ctx context.Context, h nats.Header) {
	if t, ok := TraceFromContext(ctx); ok {
		h.Set(TraceparentHeader, t.String())
	}
}

// ExtractTrace returns ctx carrying the trace in h's traceparent header; a
// missing or malformed header leaves ctx as it is.
func ExtractTrace(ctx context.Context, h nats.Header) context.Context {
	if h == nil {
		return ctx
	}
	t, err := ParseTraceparent(h.Get(TraceparentHeader))
	if err != nil {
		return ctx
	}
	return ContextWithTrace(ctx, t)
}

package queue

import (
	"context"
	"errors"
	"testing"

	"github.com/nats-io/nats.go"
)

func TestParseTraceparent(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		ok       bool
	}{
		{"w3c example", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", true},
		{"not sampled", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00", true},
		{"future version with more fields", "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what", true},
		{"empty", "", false},
		{"version ff", "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", false},
		{"version 00 with more fields", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x", false},
		{"upper case", "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", false},
		{"zero trace id", "00-00000000000000000000000000000000-00f067aa0ba902b7-01", false},
		{"zero span id", "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", false},
		{"bad separator", "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", false},
		{"short", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1", false},
		{"non hex", "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr, err := ParseTraceparent(tc.in)
			if tc.ok != (err == nil) {
				t.Fatalf("ParseTraceparent(%q) error %v, want ok=%v", tc.in, err, tc.ok)
			}
			if err != nil && !errors.Is(err, ErrBadTrace) {
				t.Errorf("error %v does not wrap ErrBadTrace", err)
			}
			if err == nil && tc.in[:2] == "00" && tr.String() != tc.in {
				t.Errorf("String() = %q, want %q", tr.String(), tc.in)
			}
		})
	}
}

func TestTraceHeaders(t *testing.T) {
	t.Run("inject then extract", func(t *testing.T) {
		tr := NewTrace()
		h := nats.Header{}
		InjectTrace(ContextWithTrace(context.Background(), tr), h)
		got, ok := TraceFromContext(ExtractTrace(context.Background(), h))
		if !ok || got != tr {
			t.Fatalf("extracted %v %v, want %v", got, ok, tr)
		}
	})
	t.Run("no trace, no header", func(t *testing.T) {
		h := nats.Header{}
		InjectTrace(context.Background(), h)
		if len(h) != 0 {
			t.Errorf("header %v written without a trace", h)
		}
	})
	t.Run("malformed header ignored", func(t *testing.T) {
		h := nats.Header{}
		h.Set(TraceparentHeader, "garbage")
		if _, ok := TraceFromContext(ExtractTrace(context.Background(), h)); ok {
			t.Error("malformed traceparent produced a trace")
		}
		if _, ok := TraceFromContext(ExtractTrace(context.Background(), nil)); ok {
			t.Error("nil header produced a trace")
		}
	})
}

func FuzzParseTraceparent(f *testing.F) {
	f.Add("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	f.Add("cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x")
	f.Add("")
	f.Fuzz(func(t *testing.T, s string) {
		tr, err := ParseTraceparent(s)
		if err != nil {
			return
		}
		if !tr.Valid() {
			t.Fatalf("accepted %q with a zero id", s)
		}
		again, err := ParseTraceparent(tr.String())
		if err != nil || again != tr {
			t.Fatalf("String() %q does not parse back: %v", tr.String(), err)
		}
	})
}

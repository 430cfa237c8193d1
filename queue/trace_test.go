package queue

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

func TestTraceHeaders(t *testing.T) {
	prev := otel.GetTextMapPropagator()
	otel.SetTextMapPropagator(propagation.TraceContext{})
	t.Cleanup(func() { otel.SetTextMapPropagator(prev) })

	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled})
	for _, tc := range []struct {
		name   string
		header nats.Header
		ctx    context.Context
		want   trace.SpanContext // after extracting what was injected
	}{
		{"inject then extract", nats.Header{}, trace.ContextWithSpanContext(context.Background(), sc), sc.WithRemote(true)},
		{"no trace, no header", nats.Header{}, context.Background(), trace.SpanContext{}},
		{"nil header", nil, context.Background(), trace.SpanContext{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.header != nil {
				InjectTrace(tc.ctx, tc.header)
			}
			if !tc.want.IsValid() && len(tc.header) != 0 {
				t.Errorf("header %v written without a trace", tc.header)
			}
			got := trace.SpanContextFromContext(ExtractTrace(context.Background(), tc.header))
			if !got.Equal(tc.want) {
				t.Errorf("extracted %v, want %v", got, tc.want)
			}
			if tc.want.IsValid() && tc.header.Get("traceparent") != "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01" {
				t.Errorf("traceparent %q", tc.header.Get("traceparent"))
			}
		})
	}
	t.Run("malformed header ignored", func(t *testing.T) {
		h := nats.Header{}
		h.Set("traceparent", "garbage")
		if got := trace.SpanContextFromContext(ExtractTrace(context.Background(), h)); got.IsValid() {
			t.Errorf("malformed traceparent produced %v", got)
		}
	})
}

// tracedContext installs the W3C propagator for the test and returns a
// context carrying a sampled span context, and that span context.
func tracedContext(t *testing.T) (context.Context, trace.SpanContext) {
	t.Helper()
	prev := otel.GetTextMapPropagator()
	otel.SetTextMapPropagator(propagation.TraceContext{})
	t.Cleanup(func() { otel.SetTextMapPropagator(prev) })
	tid, _ := trace.TraceIDFromHex("0af7651916cd43dd8448eb211c80319c")
	sid, _ := trace.SpanIDFromHex("b7ad6b7169203331")
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled})
	return trace.ContextWithSpanContext(context.Background(), sc), sc
}

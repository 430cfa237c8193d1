package edge

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// BenchmarkRequestObservability is one whole native request through the
// edge (HTTP, auth, quota, admission, enqueue on an in-process NATS, a fake
// worker's two frames, the JSON answer) with tracing and metrics off and
// on: the differences are their cost on the request path. Tracing uses the
// SDK with a batch span processor and an exporter that drops the spans.
func BenchmarkRequestObservability(b *testing.B) {
	for _, bc := range []struct {
		name             string
		tracing, metrics bool
	}{
		{"off", false, false},
		{"metrics", false, true},
		{"tracing", true, false},
		{"tracing+metrics", true, true},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var o harnessOpts
			if bc.tracing {
				withPropagator(b)
				tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()))
				b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
				o.tracer = tp
			}
			if bc.metrics {
				m, err := NewMetrics(prometheus.NewRegistry())
				if err != nil {
					b.Fatal(err)
				}
				o.metrics = m
			}
			h := newHarness(b, o)
			body := `{"prompt":"Once upon a time","max_tokens":8}`
			b.ReportAllocs()
			for b.Loop() {
				if st, _, out := h.do("POST", "/ai/run/"+modelStories, "alice", body); st != 200 {
					b.Fatalf("status %d: %s", st, out)
				}
			}
		})
	}
}

// BenchmarkRefusalObservability is a request for an unknown model, refused
// after auth, served in memory (no socket, no queue): the server span, the
// auth span and the counters are a large part of its work, so the
// differences show with little noise.
func BenchmarkRefusalObservability(b *testing.B) {
	for _, bc := range []struct {
		name             string
		tracing, metrics bool
	}{
		{"off", false, false},
		{"metrics", false, true},
		{"tracing", true, false},
		{"tracing+metrics", true, true},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var o harnessOpts
			if bc.tracing {
				withPropagator(b)
				tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()))
				b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
				o.tracer = tp
			}
			if bc.metrics {
				m, err := NewMetrics(prometheus.NewRegistry())
				if err != nil {
					b.Fatal(err)
				}
				o.metrics = m
			}
			h := newHarness(b, o)
			handler := h.srv.Handler()
			b.ReportAllocs()
			for b.Loop() {
				req := httptest.NewRequest("POST", "/ai/run/@cf/no/such-model", strings.NewReader(`{"prompt":"hi"}`))
				req.Header.Set("Authorization", "Bearer alice")
				rec := httptest.NewRecorder()
				handler.ServeHTTP(rec, req)
				if rec.Code != 400 {
					b.Fatalf("status %d: %s", rec.Code, rec.Body)
				}
			}
		})
	}
}

package worker

import (
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/bulkhead-ai/bulkhead/models/testkit"
	"github.com/bulkhead-ai/bulkhead/models/testkit/promtest"
	"github.com/bulkhead-ai/bulkhead/queue"
	"github.com/bulkhead-ai/bulkhead/workers/engine"
)

// tracedJobContext installs the W3C propagator for the test and returns a
// context carrying a sampled remote parent, as the edge's enqueue span is.
func tracedJobContext(t testing.TB) (context.Context, trace.SpanContext) {
	prev := otel.GetTextMapPropagator()
	otel.SetTextMapPropagator(propagation.TraceContext{})
	t.Cleanup(func() { otel.SetTextMapPropagator(prev) })
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled})
	return trace.ContextWithSpanContext(context.Background(), sc), sc
}

// TestWorkerTelemetry runs a job through unified, and through prefill and
// decode, workers with a tracer and metrics, and checks the spans form one
// tree under the job's remote parent, name no prompt text, and that the
// metrics count what happened.
func TestWorkerTelemetry(t *testing.T) {
	const secret = "Once upon a time there was a secret"
	for _, tc := range []struct {
		name  string
		roles []Role
		spans []string
		jobs  []map[string]string // bulkhead_worker_jobs_total labels that must be 1
	}{
		{"unified", []Role{RoleUnified},
			[]string{spanQueueWait, spanJob, spanPrefill, spanDecode},
			[]map[string]string{{"role": "unified", "outcome": outcomeDone}}},
		{"disaggregated", []Role{RolePrefill, RoleDecode},
			[]string{spanQueueWait, spanJob, spanPrefill, spanHandoffSend, spanHandoffReceive, spanDecode},
			[]map[string]string{{"role": "prefill", "outcome": outcomeHandedOver}, {"role": "decode", "outcome": outcomeDone}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, parent := tracedJobContext(t)
			exp := tracetest.NewInMemoryExporter()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
			t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
			reg := prometheus.NewRegistry()
			m, err := NewMetrics(reg)
			if err != nil {
				t.Fatal(err)
			}
			ev := startNATS(t)
			for i, role := range tc.roles {
				e := startEngine(t, engine.Config{OnStep: m.OnStep(model)})
				engines := map[string]*engine.Engine{model: e}
				m.AddEngines(fmt.Sprint(i), role, engines)
				startWorker(t, ev.conn(t), Config{Role: role, Models: engines, TracerProvider: tp, Metrics: m})
			}
			job := newJob(t, secret, 4)
			job.Key, job.Metadata = "ci", map[string]string{"app": "checkout"}
			r, err := ev.client.Submit(ctx, job)
			if err != nil {
				t.Fatal(err)
			}
			frames, err := collect(t, r)
			if err != io.EOF || len(frames) == 0 || frames[len(frames)-1].Kind != queue.KindFinal {
				t.Fatalf("frames %v, %v", frames, err)
			}
			testkit.Poll(t, 10*time.Second, func() error {
				for _, want := range tc.jobs {
					if got := promtest.Sum(t, reg, "bulkhead_worker_jobs_total", want); got != 1 {
						return fmt.Errorf("jobs_total%v = %v", want, got)
					}
				}
				// Each role's job span ends after its metrics are counted.
				if n := len(exp.GetSpans()); n < len(tc.spans)+2*(len(tc.roles)-1) {
					return fmt.Errorf("%d spans so far", n)
				}
				jobs := 0
				for _, s := range exp.GetSpans() {
					if s.Name == spanJob {
						jobs++
					}
				}
				if jobs != len(tc.roles) {
					return fmt.Errorf("%d job spans so far", jobs)
				}
				return nil
			})
			spans := exp.GetSpans()
			byID := map[trace.SpanID]tracetest.SpanStub{}
			names := map[string]int{}
			for _, s := range spans {
				byID[s.SpanContext.SpanID()] = s
				names[s.Name]++
			}
			for _, s := range spans {
				if s.SpanContext.TraceID() != parent.TraceID() {
					t.Errorf("span %s in trace %s", s.Name, s.SpanContext.TraceID())
				}
				if _, ok := byID[s.Parent.SpanID()]; !ok && s.Parent.SpanID() != parent.SpanID() {
					t.Errorf("span %s has parent %s outside the tree", s.Name, s.Parent.SpanID())
				}
				for _, kv := range s.Attributes {
					if strings.Contains(kv.Value.String(), "secret") {
						t.Errorf("span %s attribute %s holds prompt text", s.Name, kv.Key)
					}
				}
			}
			for _, n := range tc.spans {
				if names[n] == 0 {
					t.Errorf("no %s span; got %v", n, names)
				}
			}
			labelled := 0
			for _, s := range spans {
				attrs := map[attribute.Key]string{}
				for _, kv := range s.Attributes {
					attrs[kv.Key] = kv.Value.AsString()
				}
				if attrs[queue.AttrRequestID] == "" {
					continue
				}
				labelled++
				if attrs[queue.AttrKey] != "ci" || attrs[queue.AttrMetadataPrefix+"app"] != "checkout" {
					t.Errorf("span %s names job %s without its key and metadata: %v", s.Name, attrs[queue.AttrRequestID], attrs)
				}
			}
			if labelled != len(tc.roles) {
				t.Errorf("%d spans name the job, want one per role (%d)", labelled, len(tc.roles))
			}
			for _, c := range []struct {
				name   string
				labels map[string]string
			}{
				{"bulkhead_worker_queue_wait_seconds", nil},
				{"bulkhead_engine_batch_size", map[string]string{"model": model}},
				{"bulkhead_worker_generated_tokens_total", map[string]string{"model": model}},
				{"bulkhead_kv_pool_capacity_pages", map[string]string{"model": model}},
			} {
				if promtest.Sum(t, reg, c.name, c.labels) <= 0 {
					t.Errorf("%s%v is zero", c.name, c.labels)
				}
			}
			if len(tc.roles) == 2 {
				for _, side := range []string{"send", "receive"} {
					if promtest.Sum(t, reg, "bulkhead_handoff_bytes_total", map[string]string{"side": side}) <= 0 {
						t.Errorf("no hand-over bytes on the %s side", side)
					}
				}
			}
		})
	}
}

// BenchmarkJobObservability is a one-token job through a unified worker,
// with tracing and metrics off and on: the difference is their cost per job.
func BenchmarkJobObservability(b *testing.B) {
	for _, on := range []bool{false, true} {
		b.Run(map[bool]string{false: "off", true: "tracing+metrics"}[on], func(b *testing.B) {
			ev := benchNATS(b)
			e := benchEngine(b)
			cfg := Config{Models: map[string]*engine.Engine{model: e}}
			ctx := context.Background()
			if on {
				ctx, _ = tracedJobContext(b)
				tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()))
				b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
				m, err := NewMetrics(prometheus.NewRegistry())
				if err != nil {
					b.Fatal(err)
				}
				cfg.TracerProvider, cfg.Metrics = tp, m
			}
			benchWorker(b, ev, cfg)
			prompt := benchPrompt(e, 16)
			n := 0
			b.ReportAllocs()
			for b.Loop() {
				n++
				id := fmt.Sprintf("obs-%v-%d", on, n)
				job := &queue.Job{ID: id, Tenant: "bench", Model: model, Prompt: prompt, AddBOS: true,
					MaxTokens: 1, Reply: queue.ReplySubject(id), Deadline: time.Now().Add(time.Minute)}
				r, err := ev.client.Submit(ctx, job)
				if err != nil {
					b.Fatal(err)
				}
				for {
					f, err := r.Next(context.Background())
					if err != nil {
						b.Fatal(err)
					}
					if f.Kind != queue.KindToken {
						break
					}
				}
				r.Close()
			}
		})
	}
}

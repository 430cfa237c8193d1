package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.opentelemetry.io/contrib/exporters/autoexport"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/term"
)

// version is the version nodes report to the fleet and in build info.
const version = "0.1.0"

// obsFlags configure a node's logs and its metrics and health listener.
type obsFlags struct {
	logFormat     string
	logLevel      string
	logContent    bool
	metricsListen string
}

// register adds the log flags, --log-content where the node sees prompts
// (content: the edge, dev), and --metrics-listen when listen is true (nodes
// without an HTTP listener of their own: worker, billing).
func (o *obsFlags) register(fs *flag.FlagSet, listen, content bool) {
	fs.StringVar(&o.logFormat, "log-format", "", "log format: text or json (default: text on a terminal, json otherwise)")
	fs.StringVar(&o.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	if content {
		fs.BoolVar(&o.logContent, "log-content", false, "debug only: log prompts at debug level (tenant data; warned at start-up)")
	}
	if listen {
		fs.StringVar(&o.metricsListen, "metrics-listen", "", "address of the /metrics, /healthz and /readyz listener, e.g. 127.0.0.1:9464 (empty: none)")
	}
}

// logger builds the node's logger on w: JSON unless w is a terminal or
// --log-format says otherwise; every record logged with a context that
// carries a span names its trace and span id.
func (o *obsFlags) logger(w io.Writer) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(o.logLevel)); err != nil {
		return nil, fmt.Errorf("%w: --log-level %q (want debug, info, warn or error)", errUsage, o.logLevel)
	}
	format := o.logFormat
	if format == "" {
		format = "json"
		if f, ok := w.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
			format = "text"
		}
	}
	opts := &slog.HandlerOptions{Level: lvl}
	var h slog.Handler
	switch format {
	case "text":
		h = slog.NewTextHandler(w, opts)
	case "json":
		h = slog.NewJSONHandler(w, opts)
	default:
		return nil, fmt.Errorf("%w: --log-format %q (want text or json)", errUsage, o.logFormat)
	}
	log := slog.New(traceHandler{h})
	if o.logContent {
		log.Warn("--log-content is on: prompts are logged at debug level; they are tenant data, do not use this in production")
	}
	return log, nil
}

// traceHandler adds the trace and span id of the context's span, if any,
// to every record.
type traceHandler struct{ slog.Handler }

func (h traceHandler) Handle(ctx context.Context, r slog.Record) error {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		r.AddAttrs(slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String()))
	}
	return h.Handler.Handle(ctx, r)
}

func (h traceHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return traceHandler{h.Handler.WithAttrs(as)}
}

func (h traceHandler) WithGroup(name string) slog.Handler {
	return traceHandler{h.Handler.WithGroup(name)}
}

// telemetry is a node's tracer provider and metrics registry, built once
// here and passed down.
type telemetry struct {
	// tp is nil when tracing is off (OTEL_TRACES_EXPORTER unset or none):
	// then nothing on the request path does tracing work.
	tp  trace.TracerProvider
	reg *prometheus.Registry
	sdk *sdktrace.TracerProvider // flushed by shutdown; nil when off
}

// tracesEnabled reports whether the OTEL_* environment asks for traces.
// Tracing is off by default: only an explicit exporter turns it on.
func tracesEnabled() bool {
	if strings.EqualFold(os.Getenv("OTEL_SDK_DISABLED"), "true") {
		return false
	}
	switch strings.ToLower(strings.TrimSpace(os.Getenv("OTEL_TRACES_EXPORTER"))) {
	case "", "none":
		return false
	}
	return true
}

// newTelemetry builds the node's telemetry. service is the default
// service.name (OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES win); the
// exporter is chosen by OTEL_TRACES_EXPORTER (otlp, console) and configured
// by the standard OTEL_EXPORTER_OTLP_* and OTEL_BSP_* variables.
func newTelemetry(ctx context.Context, log *slog.Logger, service, component string) (*telemetry, error) {
	t := &telemetry{reg: prometheus.NewRegistry()}
	build := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "bulkhead_build_info",
		Help: "Always 1: the version and component of this process."}, []string{"version", "component"})
	build.WithLabelValues(version, component).Set(1)
	for _, c := range []prometheus.Collector{collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), build} {
		if err := t.reg.Register(c); err != nil {
			return nil, err
		}
	}
	if !tracesEnabled() {
		return t, nil
	}
	exp, err := autoexport.NewSpanExporter(ctx)
	if err != nil {
		return nil, fmt.Errorf("trace exporter (OTEL_TRACES_EXPORTER=%s): %w", os.Getenv("OTEL_TRACES_EXPORTER"), err)
	}
	host, _ := os.Hostname()
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", service), attribute.String("service.version", version),
			attribute.String("service.instance.id", fmt.Sprintf("%s-%d", host, os.Getpid()))),
		resource.WithTelemetrySDK(),
		resource.WithFromEnv())
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, fmt.Errorf("trace resource: %w", err)
	}
	t.sdk = sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	t.tp = t.sdk
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	log.Info("tracing on", "exporter", os.Getenv("OTEL_TRACES_EXPORTER"), "service", service)
	return t, nil
}

// shutdown flushes the spans still buffered; the node calls it last.
func (t *telemetry) shutdown(log *slog.Logger) {
	if t.sdk == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := t.sdk.Shutdown(ctx); err != nil {
		log.Warn("flushing traces", "err", err)
	}
}

package edge

import (
	"context"
	"errors"
	"net/http"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/bulkhead-ai/bulkhead/queue"
)

// tracerName is the instrumentation scope of the edge's spans.
const tracerName = "github.com/bulkhead-ai/bulkhead/edge"

// Span names (docs/operations.md lists them). The server span is named
// "<METHOD> <route pattern>" per OpenTelemetry's HTTP conventions.
const (
	spanAuth      = "edge.auth"
	spanQuota     = "edge.quota"
	spanAdmission = "edge.admission"
	spanEnqueue   = "queue.enqueue"
	spanReply     = "edge.reply"
)

// The edge's own span attribute keys (the ones every node sets are
// queue.Attr*). Prompt and completion text are never attributes.
const (
	attrCode   = attribute.Key("bulkhead.error.code")
	attrAPI    = attribute.Key("bulkhead.api")
	attrStatus = attribute.Key("http.response.status_code")
	attrMethod = attribute.Key("http.request.method")
	attrRoute  = attribute.Key("http.route")
	attrPath   = attribute.Key("url.path")
)

// reqInfo is what the edge learns about one HTTP request as it is served:
// the middleware creates it, handlers fill it in, and the middleware turns it
// into metrics and span attributes when the handler returns. One goroutine
// (the handler's) uses it.
type reqInfo struct {
	id    string    // request id: X-Request-Id, job id, error bodies
	start time.Time // arrival
	api   string    // native, openai or other
	model string    // a catalog model once looked up, else ""
	code  int       // error-table code of a refusal; 0 when served
	span  trace.Span
}

type reqInfoKey struct{}

// infoOf returns the request's reqInfo; a request that did not come
// through the middleware (tests calling handlers directly) gets a fresh one.
func infoOf(r *http.Request) *reqInfo {
	if ri, ok := r.Context().Value(reqInfoKey{}).(*reqInfo); ok {
		return ri
	}
	return &reqInfo{id: newID(), start: time.Now(), api: apiOf(r.URL.Path),
		span: trace.SpanFromContext(context.Background())}
}

func apiOf(path string) string {
	switch {
	case isOpenAIPath(path):
		return "openai"
	case strings.Contains(path, "/ai/"):
		return "native"
	}
	return "other"
}

// tracingOn reports whether tp makes real spans.
func tracingOn(tp trace.TracerProvider) bool {
	if tp == nil {
		return false
	}
	_, off := tp.(noop.TracerProvider)
	return !off
}

// statusWriter remembers the status written; Unwrap keeps Flush (SSE)
// working through http.ResponseController.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// traceContext reads and writes W3C traceparent headers at the edge, the
// platform's trust boundary.
var traceContext = propagation.TraceContext{}

// traceparentOnly is the part of a client's trace headers the edge takes:
// traceparent. A client's tracestate and baggage are dropped (issue 22):
// echoed in responses and carried on every internal message, they were
// kilobytes of caller-chosen data on the bus.
func traceparentOnly(h http.Header) propagation.MapCarrier {
	c := propagation.MapCarrier{}
	if tp := h.Get("traceparent"); tp != "" {
		c["traceparent"] = tp
	}
	return c
}

// allowedBaggage is the client's baggage members whose keys allow lists;
// none when the header does not parse.
func allowedBaggage(h http.Header, allow []string) baggage.Baggage {
	if len(allow) == 0 || h.Get("baggage") == "" {
		return baggage.Baggage{}
	}
	in, err := baggage.Parse(strings.Join(h.Values("baggage"), ","))
	if err != nil {
		return baggage.Baggage{}
	}
	var keep []baggage.Member
	for _, m := range in.Members() {
		if slices.Contains(allow, m.Key()) {
			keep = append(keep, m)
		}
	}
	out, err := baggage.New(keep...)
	if err != nil {
		return baggage.Baggage{}
	}
	return out
}

// allowedTraceState is the client's tracestate entries whose vendor keys
// allow lists; none when the header does not parse.
func allowedTraceState(h http.Header, allow []string) trace.TraceState {
	if len(allow) == 0 || h.Get("tracestate") == "" {
		return trace.TraceState{}
	}
	in, err := trace.ParseTraceState(strings.Join(h.Values("tracestate"), ","))
	if err != nil {
		return trace.TraceState{}
	}
	var keys, values []string
	in.Walk(func(key, value string) bool {
		if slices.Contains(allow, key) {
			keys, values = append(keys, key), append(values, value)
		}
		return true
	})
	out := trace.TraceState{}
	for i := len(keys) - 1; i >= 0; i-- { // Insert puts an entry first
		if next, err := out.Insert(keys[i], values[i]); err == nil {
			out = next
		}
	}
	return out
}

// clientTrace is what a request's server span starts from: with
// ContinueClientTraces, ctx carrying the client's traceparent as the remote
// parent; otherwise ctx and the options of a new root, linked to the
// client's span when it sent a valid traceparent. Either way ctx carries
// the client's baggage members that Config.TraceAllow lists, and a
// continued trace its tracestate entries that it lists.
func (s *Server) clientTrace(ctx context.Context, r *http.Request) (context.Context, []trace.SpanStartOption) {
	remote := trace.SpanContextFromContext(traceContext.Extract(context.Background(), traceparentOnly(r.Header)))
	if b := allowedBaggage(r.Header, s.cfg.TraceAllow); b.Len() > 0 {
		ctx = baggage.ContextWithBaggage(ctx, b)
	}
	if s.cfg.ContinueClientTraces {
		if remote.IsValid() {
			remote = remote.WithTraceState(allowedTraceState(r.Header, s.cfg.TraceAllow))
		}
		return trace.ContextWithRemoteSpanContext(ctx, remote), nil
	}
	opts := []trace.SpanStartOption{trace.WithNewRoot()}
	if remote.IsValid() {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: remote}))
	}
	return ctx, opts
}

// closeAfterChunked closes the connection after answering a request whose
// body came chunked (Transfer-Encoding). Go's server reads such a body by
// its chunks and drops any Content-Length that came with it, so the edge
// cannot tell whether both were sent, which RFC 9112 (6.3) says may be
// request smuggling through a proxy in front, and after which the server
// must close the connection. No SDK sends its JSON chunked; closing after
// every chunked request costs them nothing and leaves nothing on the
// connection for a smuggled second request.
func closeAfterChunked(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if len(r.TransferEncoding) > 0 {
			w.Header().Set("Connection", "close")
		}
		next.ServeHTTP(w, r)
	})
}

// observe wraps the routes: every request gets a request id (X-Request-Id),
// and, with tracing on, a server span (a new trace linked to the client's
// traceparent, or its child: clientTrace; never the client's tracestate or
// baggage) whose context the response names in its own traceparent header;
// its metrics are recorded when the handler returns.
func (s *Server) observe(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ri := &reqInfo{id: newID(), start: time.Now(), api: apiOf(r.URL.Path)}
		ctx := context.WithValue(r.Context(), reqInfoKey{}, ri)
		w.Header().Set("X-Request-Id", ri.id)
		if s.tracing {
			sctx, opts := s.clientTrace(ctx, r)
			ctx, ri.span = s.tracer.Start(sctx, r.Method, append(opts, trace.WithSpanKind(trace.SpanKindServer),
				trace.WithTimestamp(ri.start),
				trace.WithAttributes(attrMethod.String(r.Method), attrPath.String(r.URL.Path),
					queue.AttrRequestID.String(ri.id), attrAPI.String(ri.api)))...)
			traceContext.Inject(ctx, propagation.HeaderCarrier(w.Header()))
		} else {
			ri.span = trace.SpanFromContext(ctx)
		}
		s.cfg.Metrics.begin()
		sw := &statusWriter{ResponseWriter: w}
		r = r.WithContext(ctx)
		if s.serve(next, sw, r) {
			defer panic(http.ErrAbortHandler) // once the request is accounted for
		}
		status := sw.status
		if status == 0 {
			status = http.StatusOK
		}
		s.cfg.Metrics.done(ri, status)
		if s.tracing {
			if r.Pattern != "" && r.Pattern != "/" {
				route := r.Pattern
				if _, path, ok := strings.Cut(route, " "); ok {
					route = path
				}
				ri.span.SetName(r.Method + " " + route)
				ri.span.SetAttributes(attrRoute.String(route))
			}
			ri.span.SetAttributes(attrStatus.Int(status))
			if ri.model != "" {
				ri.span.SetAttributes(queue.AttrModel.String(ri.model))
			}
			outcome := "served"
			if ri.code != 0 {
				outcome = "refused"
				ri.span.SetAttributes(attrCode.Int(ri.code))
			}
			if r.Context().Err() != nil && ri.code == 0 {
				outcome = "client_gone"
			}
			ri.span.SetAttributes(queue.AttrOutcome.String(outcome))
			if status >= 500 {
				ri.span.SetStatus(codes.Error, http.StatusText(status))
			}
			ri.span.End()
		}
	})
}

// errPanic is a request handler's panic, answered as the internal error.
var errPanic = errors.New("edge: request handler panicked")

// serve runs next for the request and reports whether its connection must be
// aborted. A panic there is the edge's bug, never the client's: it is logged
// with its stack, and the client gets the table's internal error where no
// response had started; where one had (a stream), the connection is aborted,
// as net/http does for a panic, but only after observe has recorded the
// request, so that its metrics and span are not lost either.
func (s *Server) serve(next http.Handler, sw *statusWriter, r *http.Request) (abort bool) {
	defer func() {
		v := recover()
		if v == nil {
			return
		}
		if v != http.ErrAbortHandler {
			s.log.ErrorContext(r.Context(), "edge: request handler panicked", "request_id", infoOf(r).id,
				"path", r.URL.Path, "panic", v, "stack", string(debug.Stack()))
			if sw.status == 0 {
				writeErrorFor(sw, r, s.refuse(r, errPanic))
				return
			}
		}
		abort = true
	}()
	next.ServeHTTP(sw, r)
	return false
}

// startSpan starts a child span of the request's when tracing is on; the
// span returned is never nil.
func (s *Server) startSpan(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	if !s.tracing {
		return ctx, trace.SpanFromContext(context.Background())
	}
	return s.tracer.Start(ctx, name, opts...)
}

// endSpan ends span, marking it failed when err is not nil with the error
// table's name for it (never the error's text, which may quote the request).
func endSpan(span trace.Span, err error) {
	if err != nil {
		e := Classify(err)
		span.SetStatus(codes.Error, e.Row.Name)
		span.SetAttributes(queue.AttrErrorType.String(e.Row.Name))
	}
	span.End()
}

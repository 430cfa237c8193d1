package edge

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"reflect"
	"strconv"
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

	"github.com/bulkhead-ai/bulkhead/edge/quota"
	"github.com/bulkhead-ai/bulkhead/models/testkit"
	"github.com/bulkhead-ai/bulkhead/models/testkit/promtest"
	"github.com/bulkhead-ai/bulkhead/queue"
)

// withPropagator installs the W3C propagator for one test, as cmd does when
// tracing is on.
func withPropagator(t testing.TB) {
	prev := otel.GetTextMapPropagator()
	otel.SetTextMapPropagator(propagation.TraceContext{})
	t.Cleanup(func() { otel.SetTextMapPropagator(prev) })
}

func TestTraceOfARequest(t *testing.T) {
	withPropagator(t)
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	h := newHarness(t, harnessOpts{tracer: tp})

	const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	const secret = "the secret prompt text"
	for _, tc := range []struct {
		name, path, body string
		traceparent      string
		status           int
		children         []string
	}{
		{"served, incoming traceparent linked", "/ai/run/" + modelStories, `{"prompt":"` + secret + `"}`, parent, 200,
			[]string{spanAuth, spanQuota, spanAdmission, spanEnqueue, spanReply}},
		{"served, client's sampled flag off", "/ai/run/" + modelStories, `{"prompt":"` + secret + `"}`, parent[:len(parent)-2] + "00", 200,
			[]string{spanAuth, spanQuota, spanAdmission, spanEnqueue, spanReply}},
		{"served, new trace", "/ai/run/" + modelStories, `{"prompt":"` + secret + `"}`, "", 200,
			[]string{spanAuth, spanQuota, spanAdmission, spanEnqueue, spanReply}},
		{"refused at admission", "/ai/run/" + modelStories, `{"prompt":"` + strings.Repeat(secret+" ", 400) + `","max_tokens":16}`, "", 413,
			[]string{spanAuth, spanQuota, spanAdmission}},
		{"refused at auth", "/ai/run/" + modelStories, `{"prompt":"x"}`, "", 401, []string{spanAuth}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			exp.Reset()
			req, _ := http.NewRequest("POST", h.http.URL+tc.path, strings.NewReader(tc.body))
			if tc.status != 401 {
				req.Header.Set("Authorization", "Bearer alice")
			}
			if tc.traceparent != "" {
				req.Header.Set("traceparent", tc.traceparent)
			}
			resp, err := h.http.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			var body map[string]any
			_ = json.NewDecoder(resp.Body).Decode(&body)
			resp.Body.Close()
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d: %v", resp.StatusCode, tc.status, body)
			}
			rid := resp.Header.Get("X-Request-Id")
			if len(rid) != 32 {
				t.Errorf("X-Request-Id %q", rid)
			}
			if tc.status != 200 && body["request_id"] != rid {
				t.Errorf("error body names request %v, header %q", body["request_id"], rid)
			}
			tpHeader := resp.Header.Get("Traceparent")
			var spans tracetest.SpanStubs
			testkit.Poll(t, 5*time.Second, testkit.Cond("the server span", func() bool {
				spans = exp.GetSpans()
				for _, s := range spans {
					if s.SpanKind == trace.SpanKindServer {
						return true
					}
				}
				return false
			}))
			var server tracetest.SpanStub
			for _, s := range spans {
				if s.SpanKind == trace.SpanKindServer {
					server = s
				}
			}
			if server.Name != "POST /ai/run/{model...}" {
				t.Errorf("server span %q", server.Name)
			}
			sc := server.SpanContext
			if want := "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-01"; tpHeader != want {
				t.Errorf("response traceparent %q, want %q", tpHeader, want)
			}
			if server.Parent.IsValid() {
				t.Errorf("the server span has a parent (%s): a client chose the platform's trace", server.Parent.SpanID())
			}
			if tc.traceparent != "" {
				if sc.TraceID().String() == "4bf92f3577b34da6a3ce929d0e0e4736" {
					t.Errorf("the client's trace id was taken")
				}
				if len(server.Links) != 1 || server.Links[0].SpanContext.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" ||
					server.Links[0].SpanContext.SpanID().String() != "00f067aa0ba902b7" {
					t.Errorf("server span links %+v, want one to the client's span", server.Links)
				}
			}
			got := map[string]bool{}
			for _, s := range spans {
				if s.SpanKind != trace.SpanKindServer {
					if s.Parent.SpanID() != sc.SpanID() {
						t.Errorf("span %s is not a child of the server span", s.Name)
					}
					got[s.Name] = true
				}
				for _, kv := range s.Attributes {
					if strings.Contains(kv.Value.String(), "secret") {
						t.Errorf("span %s attribute %s holds prompt text", s.Name, kv.Key)
					}
				}
				if strings.Contains(s.Status.Description, "secret") {
					t.Errorf("span %s status holds prompt text", s.Name)
				}
			}
			for _, n := range tc.children {
				if !got[n] {
					t.Errorf("no %s span; got %v", n, got)
				}
			}
		})
	}
}

func TestEdgeMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, harnessOpts{metrics: m})
	if st, _, b := h.do("POST", "/ai/run/"+modelStories, "alice", `{"prompt":"Once upon a time"}`); st != 200 {
		t.Fatalf("status %d: %s", st, b)
	}
	long := `{"prompt":"` + strings.Repeat("Once upon a time ", 3000) + `","max_tokens":16}`
	for _, tc := range []struct {
		name   string
		do     func()
		metric string
		labels map[string]string
		want   float64
	}{
		{"served", func() {}, "bulkhead_edge_requests_total",
			map[string]string{"api": "native", "model": modelStories, "status": "200", "code": "ok"}, 1},
		{"first token", func() {}, "bulkhead_edge_time_to_first_token_seconds", map[string]string{"model": modelStories}, 1},
		{"over-long prompt", func() {
			if st, _, b := h.do("POST", "/ai/run/"+modelStories, "alice", long); st != 413 {
				t.Errorf("over-long prompt: status %d: %s", st, b)
			}
		}, "bulkhead_edge_refusals_total",
			map[string]string{"reason": "prompt_too_long"}, 1},
		{"its request", func() {}, "bulkhead_edge_requests_total",
			map[string]string{"api": "native", "model": modelStories, "status": "413", "code": "3006"}, 1},
		{"quota", func() {
			h.limiter.set(&quota.LimitError{Err: quota.ErrRateLimited, Limit: 60})
			defer h.limiter.set(nil)
			h.do("POST", "/v1/completions", "alice", `{"model":"`+modelStories+`","prompt":"hi"}`)
		}, "bulkhead_edge_quota_denials_total", map[string]string{"limit": "requests_per_minute"}, 1},
		{"quota reason", func() {}, "bulkhead_edge_refusals_total", map[string]string{"reason": "rate_limited"}, 1},
		{"nothing in flight", func() {}, "bulkhead_edge_in_flight_requests", nil, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.do()
			if got := promtest.Sum(t, reg, tc.metric, tc.labels); got != tc.want {
				t.Errorf("%s%v = %v, want %v", tc.metric, tc.labels, got, tc.want)
			}
		})
	}
	if promtest.Sum(t, reg, "bulkhead_edge_prompt_tokens_total", map[string]string{"model": modelStories}) == 0 {
		t.Error("no prompt tokens counted")
	}
	for _, series := range promtest.Gather(t, reg) {
		if _, ok := series.Labels["tenant"]; ok {
			t.Errorf("%s has a tenant label", series.Name)
		}
	}
}

// TestHandlerPanic: a panic in a request handler (the edge's own bug,
// planted here on two test routes) gives the client the table's internal
// error where no response had started, and aborts the connection where one
// had (a stream). Either way the request is counted, nothing stays in
// flight, and the edge serves the next request.
func TestHandlerPanic(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, harnessOpts{metrics: m})
	h.srv.mux.HandleFunc("GET /test/panic", func(http.ResponseWriter, *http.Request) { panic("planted secret") })
	h.srv.mux.HandleFunc("GET /test/panic-streaming", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "data: 1\n\n")
		_ = http.NewResponseController(w).Flush()
		panic("planted mid-stream")
	})

	st, _, b := h.do("GET", "/test/panic", "", "")
	if code, msg := nativeErr(t, b); st != 500 || code != rowInternal.Code || strings.Contains(string(b), "planted") {
		t.Errorf("a handler's panic: status %d, code %d %q (%s); want 500, the internal error, no panic text", st, code, msg, b)
	}
	resp, err := h.http.Client().Get(h.http.URL + "/test/panic-streaming")
	if err == nil {
		_, err = io.ReadAll(resp.Body)
		resp.Body.Close()
	}
	if err == nil {
		t.Error("a stream whose handler panicked ended cleanly; want the connection aborted")
	}
	for _, tc := range []struct {
		labels map[string]string
		want   float64
	}{
		{map[string]string{"api": "other", "status": "500", "code": strconv.Itoa(rowInternal.Code)}, 1},
		{map[string]string{"api": "other", "status": "200"}, 1}, // the stream, which had started
	} {
		if got := promtest.Sum(t, reg, "bulkhead_edge_requests_total", tc.labels); got != tc.want {
			t.Errorf("bulkhead_edge_requests_total%v = %v, want %v", tc.labels, got, tc.want)
		}
	}
	if got := promtest.Sum(t, reg, "bulkhead_edge_in_flight_requests", nil); got != 0 {
		t.Errorf("%v requests in flight after both panics, want 0", got)
	}
	if st, _, b := h.do("POST", "/ai/run/"+modelStories, "alice", `{"prompt":"Once upon a time"}`); st != 200 {
		t.Fatalf("after the panics: status %d: %s", st, b)
	}
}

// productionTracing installs the propagators cmd installs with tracing on
// (trace context and baggage) for the test, and returns a tracer provider.
func productionTracing(t *testing.T) *sdktrace.TracerProvider {
	t.Helper()
	prev := otel.GetTextMapPropagator()
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	t.Cleanup(func() { otel.SetTextMapPropagator(prev) })
	tp := sdktrace.NewTracerProvider()
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp
}

// runTraced sends alice's run request with a client traceparent and the
// given tracestate and baggage, and returns its answer, which must be 200.
// TestTraceCarriesKeyAndMetadata: the server span names the token's API
// key and each metadata pair of the request (OpenAI's metadata, meant for
// the caller's own tracing and usage); a request without them has none.
func TestTraceCarriesKeyAndMetadata(t *testing.T) {
	withPropagator(t)
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	h := newHarness(t, harnessOpts{tracer: tp})
	for _, tc := range []struct {
		token, body string
		want        map[attribute.Key]string
	}{
		{"alice-ci", `{"model":"` + modelStories + `","prompt":"Hi","metadata":{"app":"checkout","user_tier":"gold"}}`,
			map[attribute.Key]string{queue.AttrKey: "ci", queue.AttrMetadataPrefix + "app": "checkout", queue.AttrMetadataPrefix + "user_tier": "gold"}},
		{"alice", `{"model":"` + modelStories + `","prompt":"Hi"}`, map[attribute.Key]string{}},
	} {
		exp.Reset()
		if status, _, b := h.do("POST", "/v1/completions", tc.token, tc.body); status != 200 {
			t.Fatalf("%d %s", status, b)
		}
		var server tracetest.SpanStub
		testkit.Poll(t, 5*time.Second, testkit.Cond("the server span", func() bool {
			for _, s := range exp.GetSpans() {
				if s.SpanKind == trace.SpanKindServer {
					server = s
					return true
				}
			}
			return false
		}))
		got := map[attribute.Key]string{}
		for _, kv := range server.Attributes {
			if kv.Key == queue.AttrKey || strings.HasPrefix(string(kv.Key), queue.AttrMetadataPrefix) {
				got[kv.Key] = kv.Value.AsString()
			}
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: server span's key and metadata %v, want %v", tc.token, got, tc.want)
		}
	}
}

func runTraced(t *testing.T, h *harness, tracestate, baggage string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest("POST", h.http.URL+"/ai/run/"+modelStories, strings.NewReader(`{"prompt":"hi"}`))
	req.Header.Set("Authorization", "Bearer alice")
	req.Header.Set("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	req.Header.Set("tracestate", tracestate)
	req.Header.Set("baggage", baggage)
	resp, err := h.http.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	return resp
}

// TestTraceHeadersAtTheBoundary: with the production propagators (trace
// context and baggage) and client traces continued (ContinueClientTraces),
// a client's traceparent is continued, sampled flag included, but its
// tracestate and baggage are neither echoed in the response nor carried on
// the job's message.
func TestTraceHeadersAtTheBoundary(t *testing.T) {
	tp := productionTracing(t)
	h := newHarness(t, harnessOpts{tracer: tp, continueTraces: true})

	resp := runTraced(t, h, "attacker="+strings.Repeat("x", 200), "k="+strings.Repeat("y", 200))
	if !strings.Contains(resp.Header.Get("Traceparent"), "4bf92f3577b34da6a3ce929d0e0e4736") {
		t.Errorf("response traceparent %q does not continue the client's trace", resp.Header.Get("Traceparent"))
	}
	for _, name := range []string{"Tracestate", "Baggage"} {
		if v := resp.Header.Get(name); v != "" {
			t.Errorf("response echoes the client's %s: %q", name, v)
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.headers) == 0 {
		t.Fatal("no job was queued")
	}
	hd := h.headers[len(h.headers)-1]
	if hd.Get("traceparent") == "" {
		t.Error("the job carries no traceparent")
	}
	for _, name := range []string{"tracestate", "baggage"} {
		if v := hd.Get(name); v != "" {
			t.Errorf("the job's message carries the client's %s: %q", name, v)
		}
	}
}

// TestTraceAllowList: keys an operator allows (Config.TraceAllow,
// --trace-allow) pass from a client's baggage onto the job's message, and,
// with client traces continued, from its tracestate (which the response's
// traceparent then carries too); nothing else does, and baggage is never
// echoed.
func TestTraceAllowList(t *testing.T) {
	tp := productionTracing(t)
	for _, continued := range []bool{false, true} {
		t.Run(fmt.Sprintf("continued=%v", continued), func(t *testing.T) {
			h := newHarness(t, harnessOpts{tracer: tp, continueTraces: continued, traceAllow: []string{"tenant-region", "vendor"}})
			resp := runTraced(t, h, "attacker=x,vendor=v1", "k="+strings.Repeat("y", 200)+",tenant-region=eu")
			want := ""
			if continued {
				want = "vendor=v1" // the trace's own state, named with its traceparent
			}
			if v := resp.Header.Get("Baggage"); v != "" {
				t.Errorf("response echoes the client's baggage: %q", v)
			}
			if v := resp.Header.Get("Tracestate"); v != want {
				t.Errorf("response tracestate %q, want %q", v, want)
			}
			h.mu.Lock()
			hd := h.headers[len(h.headers)-1]
			h.mu.Unlock()
			if got := hd.Get("baggage"); got != "tenant-region=eu" {
				t.Errorf("the job's baggage is %q, want only the allowed member", got)
			}
			if got := hd.Get("tracestate"); got != want {
				t.Errorf("the job's tracestate is %q, want %q", got, want)
			}
		})
	}
}

// TestConflictingFramingRefused: a request sent with both Content-Length
// and Transfer-Encoding (RFC 9112 6.3, request smuggling) is refused with
// 400 and the connection closed, so nothing after it on the connection is
// read as another request. Before, it was served (net/http drops the
// Content-Length) and only the connection was closed.
func TestConflictingFramingRefused(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	conn, err := net.Dial("tcp", h.http.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	body := `{"prompt":"hi"}`
	smuggled := "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
	// An ordinary request first: the connection's scanner must find the
	// second one's headers after this one's body.
	first := "POST /ai/run/" + modelStories + " HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer alice\r\n" +
		"Content-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
	req := "POST /ai/run/" + modelStories + " HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer alice\r\n" +
		"Content-Type: application/json\r\ncontent-length: " + strconv.Itoa(len(body)+len(smuggled)) + "\r\n" +
		"Transfer-Encoding: chunked\r\n\r\n" + strconv.FormatInt(int64(len(body)), 16) + "\r\n" + body + "\r\n0\r\n\r\n" + smuggled
	if _, err := conn.Write([]byte(first + req)); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Close {
		t.Fatalf("the ordinary request: %d (close %v), want 200 on a kept connection", resp.StatusCode, resp.Close)
	}
	resp, err = http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), "Transfer-Encoding") {
		t.Errorf("both framing headers: %d %s, want 400 naming them", resp.StatusCode, b)
	}
	if !resp.Close {
		t.Errorf("response %d without Connection: close", resp.StatusCode)
	}
	if second, err := http.ReadResponse(br, nil); err == nil {
		t.Errorf("a third response (%d) came on the connection: the smuggled request was served", second.StatusCode)
	}
}

// TestChunkedRequestClosesConnection: a chunked request without a
// Content-Length is served, and its connection closed after it.
func TestChunkedRequestClosesConnection(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	body := `{"prompt":"hi","max_tokens":4}`
	req, err := http.NewRequest("POST", h.http.URL+"/ai/run/"+modelStories, io.MultiReader(strings.NewReader(body)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer alice")
	req.ContentLength = -1 // chunked
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !resp.Close {
		t.Errorf("chunked request: %d (close %v), want 200 and Connection: close", resp.StatusCode, resp.Close)
	}
}

// TestFramingScanner follows pipelined requests through reads cut
// anywhere.
func TestFramingScanner(t *testing.T) {
	get := "GET / HTTP/1.1\r\nHost: x\r\n\r\n"
	post := "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nab\r\n\n"
	bare := "GET / HTTP/1.1\nHost: x\n\n"
	both := "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n"
	for _, tc := range []struct {
		name, stream string
		conflict     int
	}{
		{"none", get + post + "\r\n" + bare + get, -1},
		{"fourth", get + post + bare + both + get, 3},
		{"first", both, 0},
		{"chunked stops", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n" + both, -1},
		{"a body that looks like headers", "POST / HTTP/1.1\r\nContent-Length: " + strconv.Itoa(len(both)) + "\r\n\r\n" + both + get, -1},
	} {
		for cut := 1; cut <= len(tc.stream); cut++ {
			s := framingScanner{conflict: -1}
			for p := tc.stream; len(p) > 0; {
				n := min(cut, len(p))
				s.feed([]byte(p[:n]))
				p = p[n:]
			}
			if s.conflict != tc.conflict {
				t.Fatalf("%s, reads of %d bytes: conflict at %d, want %d", tc.name, cut, s.conflict, tc.conflict)
			}
		}
	}
}

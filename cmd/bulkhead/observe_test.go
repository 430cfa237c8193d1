package main

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	"google.golang.org/protobuf/proto"

	"github.com/bulkhead-ai/bulkhead/deploy/local"
	"github.com/bulkhead-ai/bulkhead/edge/auth"
	"github.com/bulkhead-ai/bulkhead/models/refdatatest"
	"github.com/bulkhead-ai/bulkhead/models/testkit"
)

// span is one exported span, whichever exporter wrote it.
type span struct {
	service, name        string
	trace, id, parent    string // hex; parent "" for a root
	attrs                map[string]string
	startNanos, endNanos int64
}

// otlpReceiver is an OTLP/HTTP trace receiver: it decodes the official
// ExportTraceServiceRequest protobuf messages the nodes send.
type otlpReceiver struct {
	srv *httptest.Server

	mu    sync.Mutex // guards spans
	spans []span
}

func startReceiver(t *testing.T) *otlpReceiver {
	r := &otlpReceiver{}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path != "/v1/traces" {
			http.NotFound(w, req)
			return
		}
		var body io.Reader = req.Body
		if req.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(req.Body)
			if err != nil {
				http.Error(w, err.Error(), 400)
				return
			}
			body = zr
		}
		b, err := io.ReadAll(body)
		var msg coltracepb.ExportTraceServiceRequest
		if err == nil {
			err = proto.Unmarshal(b, &msg)
		}
		if err != nil {
			t.Errorf("OTLP receiver: %v", err)
			http.Error(w, err.Error(), 400)
			return
		}
		r.mu.Lock()
		for _, rs := range msg.ResourceSpans {
			service := ""
			for _, kv := range rs.GetResource().GetAttributes() {
				if kv.Key == "service.name" {
					service = kv.GetValue().GetStringValue()
				}
			}
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					sp := span{service: service, name: s.Name, trace: hex.EncodeToString(s.TraceId),
						id: hex.EncodeToString(s.SpanId), parent: hex.EncodeToString(s.ParentSpanId),
						attrs: map[string]string{}, startNanos: int64(s.StartTimeUnixNano), endNanos: int64(s.EndTimeUnixNano)}
					for _, kv := range s.Attributes {
						sp.attrs[kv.Key] = anyValue(kv.GetValue())
					}
					r.spans = append(r.spans, sp)
				}
			}
		}
		r.mu.Unlock()
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

// anyValue renders an OTLP attribute value: strings as they are, other
// scalars in Go's default format.
func anyValue(v *commonpb.AnyValue) string {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_IntValue:
		return fmt.Sprint(x.IntValue)
	case *commonpb.AnyValue_BoolValue:
		return fmt.Sprint(x.BoolValue)
	case *commonpb.AnyValue_DoubleValue:
		return fmt.Sprint(x.DoubleValue)
	}
	return fmt.Sprint(v.GetValue())
}

func (r *otlpReceiver) trace(id string) []span {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []span
	for _, s := range r.spans {
		if s.trace == id {
			out = append(out, s)
		}
	}
	return out
}

// treeProblem checks that spans form one tree rooted at the edge's HTTP
// span, holding each of want ("service/name"), with the decode side's spans
// below the prefill side's hand-over. It returns what is wrong, or "".
func treeProblem(spans []span, want []string) string {
	byID := map[string]span{}
	for _, s := range spans {
		byID[s.id] = s
	}
	var roots []span
	have := map[string]span{}
	for _, s := range spans {
		if s.parent == "" {
			roots = append(roots, s)
		} else if _, ok := byID[s.parent]; !ok {
			return fmt.Sprintf("span %s/%s has parent %s, not in the trace (yet)", s.service, s.name, s.parent)
		}
		have[s.service+"/"+s.name] = s
	}
	if len(roots) != 1 || roots[0].name != "POST /ai/run/{model...}" || !strings.HasPrefix(roots[0].service, "bulkhead-") {
		return fmt.Sprintf("roots %+v, want the edge's one HTTP span", roots)
	}
	for _, w := range want {
		if _, ok := have[w]; !ok {
			return "no span " + w
		}
	}
	return ""
}

// ancestors lists the names of s's ancestors, nearest first.
func ancestors(spans []span, s span) []string {
	byID := map[string]span{}
	for _, x := range spans {
		byID[x.id] = x
	}
	var out []string
	for s.parent != "" {
		s = byID[s.parent]
		out = append(out, s.service+"/"+s.name)
	}
	return out
}

// scrape fetches and parses a /metrics page with the Prometheus text parser.
func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s/metrics: %s", url, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parsing %s/metrics: %v", url, err)
	}
	return mfs
}

// metricSum sums the values (counters, gauges; histogram counts) of name's
// series whose labels include labels; found says whether any matched.
func metricSum(mfs map[string]*dto.MetricFamily, name string, labels map[string]string) (sum float64, found bool) {
	mf := mfs[name]
	if mf == nil {
		return 0, false
	}
next:
	for _, m := range mf.GetMetric() {
		have := map[string]string{}
		for _, lp := range m.GetLabel() {
			have[lp.GetName()] = lp.GetValue()
		}
		for k, v := range labels {
			if have[k] != v {
				continue next
			}
		}
		found = true
		switch {
		case m.Counter != nil:
			sum += m.Counter.GetValue()
		case m.Gauge != nil:
			sum += m.Gauge.GetValue()
		case m.Histogram != nil:
			sum += float64(m.Histogram.GetSampleCount())
		}
	}
	return sum, found
}

// readyz returns /readyz's status code and the state of each check.
func readyz(url string) (int, map[string]bool) {
	resp, err := http.Get(url + "/readyz")
	if err != nil {
		return 0, nil
	}
	defer resp.Body.Close()
	var a struct {
		Checks []struct {
			Name string `json:"name"`
			OK   bool   `json:"ok"`
		} `json:"checks"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&a)
	checks := map[string]bool{}
	for _, c := range a.Checks {
		checks[c.Name] = c.OK
	}
	return resp.StatusCode, checks
}

func healthz(url string) int {
	resp, err := http.Get(url + "/healthz")
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// postTraced posts a greedy native run and returns the status and the
// response's traceparent.
func postTraced(t *testing.T, tok, url, body string) (int, http.Header, []byte) {
	t.Helper()
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, b
}

func traceIDOf(t *testing.T, h http.Header) string {
	t.Helper()
	parts := strings.Split(h.Get("Traceparent"), "-")
	if len(parts) != 4 || len(parts[1]) != 32 {
		t.Fatalf("response traceparent %q", h.Get("Traceparent"))
	}
	return parts[1]
}

// TestObservabilityAcrossProcesses runs NATS, a prefill worker, a decode
// worker, billing and an edge as separate OS processes, each with its own
// tracer provider exporting OTLP to a receiver run here, and checks: one
// trace per request spanning the nodes as one tree; /metrics of each node after
// real traffic (a refusal counted by reason); `bulkhead status` listing both
// workers; /healthz and /readyz as Redis and NATS go away and come back.
func TestObservabilityAcrossProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test skipped in -short mode")
	}
	dir := t.TempDir()
	bin := buildBinary(t, dir)
	modelPath := refdatatest.Path(t, "models/stories260K.gguf")
	recv := startReceiver(t)
	t.Setenv("OTEL_TRACES_EXPORTER", "otlp")
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", recv.srv.URL)
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "100")
	rds := miniredis.RunT(t)
	key, err := auth.LoadOrCreateDevKey(filepath.Join(dir, "keys"))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := key.Mint("acme", []string{auth.ScopeRun, auth.ScopeRead}, nil, time.Hour)
	if err != nil {
		t.Fatal(err)
	}

	natsAddr := freeAddr(t)
	natsURL := "nats://" + natsAddr
	startNATS := func() *process {
		ns := start(t, "nats", bin, "nats", "--listen", natsAddr, "--store-dir", filepath.Join(dir, "js"), "--no-auth")
		testkit.Poll(t, 30*time.Second, testkit.Cond("NATS to listen", func() bool { return strings.Contains(ns.output(), "listening") }))
		return ns
	}
	ns := startNATS()
	metricsURL := map[string]string{}
	for _, role := range []string{"prefill", "decode"} {
		addr := freeAddr(t)
		metricsURL[role] = "http://" + addr
		start(t, role, bin, "worker", "--nats", natsURL, "--role", role, "--model", clusterModel+"="+modelPath,
			"--threads", "1", "--metrics-listen", addr)
	}
	billAddr := freeAddr(t)
	metricsURL["billing"] = "http://" + billAddr
	start(t, "billing", bin, "billing", "--nats", natsURL, "--redis", "redis://"+rds.Addr()+"/0", "--metrics-listen", billAddr)
	edgeAddr := freeAddr(t)
	edgeURL := "http://" + edgeAddr
	start(t, "edge", bin, "edge", "--nats", natsURL, "--listen", edgeAddr, "--model", clusterModel+"="+modelPath,
		"--redis", "redis://"+rds.Addr()+"/0", "--jwks", key.JWKSPath(), "--quota-rpm", "1000")
	for _, u := range []string{edgeURL, metricsURL["prefill"], metricsURL["decode"], metricsURL["billing"]} {
		testkit.Poll(t, time.Minute, testkit.Cond(u+" to be ready", func() bool { st, _ := readyz(u); return st == 200 }))
	}
	run := edgeURL + "/ai/run/" + clusterModel

	t.Run("one trace across edge, prefill and decode", func(t *testing.T) {
		status, hdr, body := postTraced(t, tok, run, `{"prompt":"Once upon a time","raw":true,"max_tokens":16,"temperature":0}`)
		if status != 200 {
			t.Fatalf("status %d: %s", status, body)
		}
		id := traceIDOf(t, hdr)
		want := []string{
			"bulkhead-edge/edge.auth", "bulkhead-edge/edge.quota", "bulkhead-edge/edge.admission",
			"bulkhead-edge/queue.enqueue", "bulkhead-edge/edge.reply",
			"bulkhead-worker-prefill/queue.wait", "bulkhead-worker-prefill/worker.job",
			"bulkhead-worker-prefill/engine.prefill", "bulkhead-worker-prefill/handoff.send",
			"bulkhead-worker-decode/queue.wait", "bulkhead-worker-decode/worker.job",
			"bulkhead-worker-decode/handoff.receive", "bulkhead-worker-decode/engine.decode",
			"bulkhead-billing/billing.consume",
		}
		var spans []span
		testkit.Poll(t, 30*time.Second, func() error {
			spans = recv.trace(id)
			if problem := treeProblem(spans, want); problem != "" {
				var b strings.Builder
				for _, s := range spans {
					fmt.Fprintf(&b, "\nspan %s/%s id %s parent %s", s.service, s.name, s.id, s.parent)
				}
				return fmt.Errorf("trace %s: %s%s", id, problem, b.String())
			}
			return nil
		})
		for _, s := range spans {
			if s.service == "bulkhead-worker-decode" && s.name == "engine.decode" {
				up := strings.Join(ancestors(spans, s), " < ")
				if !strings.Contains(up, "bulkhead-worker-prefill/handoff.send") || !strings.HasSuffix(up, "bulkhead-edge/POST /ai/run/{model...}") {
					t.Errorf("decode's ancestry: %s", up)
				}
			}
			if s.service == "bulkhead-worker-prefill" && s.name == "worker.job" {
				if s.attrs["bulkhead.tenant"] != "acme" || s.attrs["gen_ai.request.model"] != clusterModel || s.attrs["bulkhead.outcome"] != "handed_over" {
					t.Errorf("prefill job attributes %v", s.attrs)
				}
			}
			for k, v := range s.attrs {
				if strings.Contains(v, "Once upon") {
					t.Errorf("span %s attribute %s holds prompt text", s.name, k)
				}
			}
		}
		t.Logf("trace %s: %d spans across %d processes, one tree", id, len(spans), 4)
	})

	t.Run("metrics after real traffic", func(t *testing.T) {
		before, _ := metricSum(scrape(t, edgeURL), "bulkhead_edge_refusals_total", map[string]string{"reason": "prompt_too_long"})
		long := strings.Repeat("Once upon a time ", 3000)
		if status, _, body := postTraced(t, tok, run, `{"prompt":"`+long+`","max_tokens":16}`); status != 413 {
			t.Fatalf("over-long prompt: status %d: %s", status, body)
		}
		if status, _, body := postTraced(t, tok, run, `{"prompt":"Lily wanted to","raw":true,"max_tokens":8,"stream":true}`); status != 200 {
			t.Fatalf("stream: status %d: %s", status, body)
		}
		edgeM := scrape(t, edgeURL)
		if after, _ := metricSum(edgeM, "bulkhead_edge_refusals_total", map[string]string{"reason": "prompt_too_long"}); after != before+1 {
			t.Errorf("prompt_too_long refusals %v after one more, before %v", after, before)
		}
		for _, c := range []struct {
			mfs    map[string]*dto.MetricFamily
			name   string
			labels map[string]string
		}{
			{edgeM, "bulkhead_edge_requests_total", map[string]string{"api": "native", "model": clusterModel, "status": "200", "code": "ok"}},
			{edgeM, "bulkhead_edge_requests_total", map[string]string{"status": "413", "code": "3006"}},
			{edgeM, "bulkhead_edge_time_to_first_token_seconds", map[string]string{"model": clusterModel}},
			{edgeM, "bulkhead_edge_inter_token_latency_seconds", map[string]string{"model": clusterModel}},
			{edgeM, "bulkhead_edge_request_duration_seconds", map[string]string{"api": "native"}},
			{edgeM, "bulkhead_edge_generated_tokens_total", map[string]string{"model": clusterModel}},
			{edgeM, "bulkhead_edge_prompt_tokens_total", map[string]string{"model": clusterModel}},
			{edgeM, "bulkhead_build_info", map[string]string{"component": "edge"}},
		} {
			if v, ok := metricSum(c.mfs, c.name, c.labels); !ok || v <= 0 {
				t.Errorf("edge %s%v = %v (found %v)", c.name, c.labels, v, ok)
			}
		}
		pre, dec := scrape(t, metricsURL["prefill"]), scrape(t, metricsURL["decode"])
		testkit.Poll(t, 30*time.Second, testkit.Cond("billing to count the usage events", func() bool {
			v, _ := metricSum(scrape(t, metricsURL["billing"]), "bulkhead_billing_events_total", map[string]string{"result": "counted"})
			return v >= 2 // the traced request and the stream; the refusal never reached a worker
		}))
		for _, c := range []struct {
			node   string
			mfs    map[string]*dto.MetricFamily
			name   string
			labels map[string]string
		}{
			{"prefill", pre, "bulkhead_worker_jobs_total", map[string]string{"role": "prefill", "outcome": "handed_over"}},
			{"prefill", pre, "bulkhead_worker_queue_wait_seconds", map[string]string{"role": "prefill"}},
			{"prefill", pre, "bulkhead_handoff_bytes_total", map[string]string{"side": "send"}},
			{"prefill", pre, "bulkhead_handoff_duration_seconds", map[string]string{"side": "send"}},
			{"prefill", pre, "bulkhead_engine_batch_size", map[string]string{"model": clusterModel}},
			{"prefill", pre, "bulkhead_kv_pool_pages", map[string]string{"state": "free"}},
			{"prefill", pre, "bulkhead_kv_pool_capacity_pages", map[string]string{"model": clusterModel}},
			{"decode", dec, "bulkhead_worker_jobs_total", map[string]string{"role": "decode", "outcome": "done"}},
			{"decode", dec, "bulkhead_handoff_bytes_total", map[string]string{"side": "receive"}},
			{"decode", dec, "bulkhead_worker_generated_tokens_total", map[string]string{"model": clusterModel}},
			{"decode", dec, "bulkhead_engine_batch_size", map[string]string{"model": clusterModel}},
		} {
			if v, ok := metricSum(c.mfs, c.name, c.labels); !ok || v <= 0 {
				t.Errorf("%s %s%v = %v (found %v)", c.node, c.name, c.labels, v, ok)
			}
		}
		for _, c := range []struct {
			node string
			mfs  map[string]*dto.MetricFamily
			name string
		}{
			{"prefill", pre, "bulkhead_engine_running_sequences"}, {"prefill", pre, "bulkhead_engine_waiting_sequences"},
			{"prefill", pre, "bulkhead_queue_consumer_pending_messages"}, {"decode", dec, "bulkhead_queue_consumer_pending_messages"},
			{"prefill", pre, "bulkhead_kv_prefix_cache_hits_total"}, {"prefill", pre, "bulkhead_kv_prefix_cache_misses_total"},
		} {
			if _, ok := metricSum(c.mfs, c.name, nil); !ok {
				t.Errorf("%s exposes no %s", c.node, c.name)
			}
		}
		for name, mf := range edgeM {
			for _, m := range mf.GetMetric() {
				for _, lp := range m.GetLabel() {
					if lp.GetName() == "tenant" {
						t.Errorf("%s has a tenant label", name)
					}
				}
			}
		}
	})

	t.Run("status lists both workers", func(t *testing.T) {
		stdout, stderr, code := bulkhead(t, "status", "--nats", natsURL, "--json")
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		var nodes []struct {
			Service string   `json:"service"`
			Role    string   `json:"role"`
			Models  []string `json:"models"`
			Version string   `json:"version"`
			Status  struct {
				Models []struct {
					KVPagesTotal int `json:"kv_pages_total"`
				} `json:"models"`
			} `json:"status"`
		}
		if err := json.Unmarshal([]byte(stdout), &nodes); err != nil {
			t.Fatalf("%v: %s", err, stdout)
		}
		roles := map[string]bool{}
		edges, billing := 0, 0
		for _, n := range nodes {
			switch n.Service {
			case "bulkhead-worker":
				roles[n.Role] = true
				if len(n.Models) != 1 || n.Models[0] != clusterModel || len(n.Status.Models) != 1 || n.Status.Models[0].KVPagesTotal == 0 {
					t.Errorf("worker %+v", n)
				}
			case "bulkhead-edge":
				edges++
			case "bulkhead-billing":
				billing++
			}
		}
		if len(roles) != 2 || !roles["prefill"] || !roles["decode"] || edges != 1 || billing != 1 {
			t.Errorf("status listed %s", stdout)
		}
		table, _, code := bulkhead(t, "status", "--nats", natsURL)
		if code != 0 || !strings.Contains(table, "KV USED/TOTAL") || !strings.Contains(table, "prefill") || !strings.Contains(table, "decode") {
			t.Errorf("status table (exit %d):\n%s", code, table)
		}
		t.Logf("bulkhead status:\n%s", table)
	})

	t.Run("readiness follows Redis and NATS", func(t *testing.T) {
		flip := func(what string, urls []string, check string, want bool) {
			t.Helper()
			testkit.Poll(t, 30*time.Second, testkit.Cond(fmt.Sprintf("%s: %s ok=%v", what, check, want), func() bool {
				for _, u := range urls {
					st, checks := readyz(u)
					if checks[check] != want || (st == 200) != want || healthz(u) != 200 {
						return false
					}
				}
				return true
			}))
		}
		all := []string{edgeURL, metricsURL["prefill"], metricsURL["decode"], metricsURL["billing"]}
		rds.Close()
		flip("Redis gone", []string{edgeURL, metricsURL["billing"]}, "redis", false)
		if err := rds.Restart(); err != nil {
			t.Fatal(err)
		}
		flip("Redis back", []string{edgeURL, metricsURL["billing"]}, "redis", true)

		ns.stop(syscall.SIGTERM)
		flip("NATS gone", all, "nats", false)
		startNATS()
		flip("NATS back", all, "nats", true)
		// Served again once NATS is back.
		testkit.Poll(t, 30*time.Second, testkit.Cond("a request to succeed after NATS came back", func() bool {
			st, _, _ := postTraced(t, tok, run, `{"prompt":"Hello","raw":true,"max_tokens":4}`)
			return st == 200
		}))
	})
}

// TestDevConsoleTrace: dev --disaggregated with OTEL_TRACES_EXPORTER=console
// prints the SDK's JSON spans to stdout, and one request's spans form one
// tree from the edge's HTTP span through prefill, hand-over and decode.
func TestDevConsoleTrace(t *testing.T) {
	if testing.Short() {
		t.Skip("dev process test skipped in -short mode")
	}
	dir := t.TempDir()
	bin := buildBinary(t, dir)
	addr := freeAddr(t)
	// The console exporter prints each span as indented JSON on stdout,
	// between the log's one-line records.
	dev := startProc(t, emptyCluster(t, bin), local.Proc{Name: "dev", Env: []string{"OTEL_TRACES_EXPORTER=console", "OTEL_BSP_SCHEDULE_DELAY=100"},
		Args: []string{bin, "dev", "--data-dir", dir, "--listen", addr, "--disaggregated",
			"--model", clusterModel + "=" + refdatatest.Path(t, "models/stories260K.gguf"), "--threads", "1"}})
	testkit.Poll(t, time.Minute, testkit.Cond("dev to serve", func() bool { return strings.Contains(dev.output(), "serving") }))
	key, err := auth.LoadOrCreateDevKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := key.Mint("acme", []string{auth.ScopeRun}, nil, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	status, hdr, body := postTraced(t, tok, "http://"+addr+"/ai/run/"+clusterModel, `{"prompt":"Once upon a time","raw":true,"max_tokens":8}`)
	if status != 200 {
		t.Fatalf("status %d: %s", status, body)
	}
	id := traceIDOf(t, hdr)
	want := []string{"bulkhead-dev/queue.enqueue", "bulkhead-dev/worker.job", "bulkhead-dev/engine.prefill",
		"bulkhead-dev/handoff.send", "bulkhead-dev/handoff.receive", "bulkhead-dev/engine.decode", "bulkhead-dev/edge.reply"}
	var spans []span
	testkit.Poll(t, 30*time.Second, func() error {
		spans = consoleSpans(t, dev.output(), id)
		if problem := treeProblem(spans, want); problem != "" {
			return fmt.Errorf("trace %s on stdout: %s\n%s", id, problem, dev.output())
		}
		return nil
	})
	t.Logf("trace %s: %d spans printed to stdout, one tree", id, len(spans))
}

// consoleSpans picks the spans of trace id out of stdout, where the console
// exporter writes one JSON object per span among dev's other output.
func consoleSpans(t *testing.T, out, id string) []span {
	type stubContext struct {
		TraceID, SpanID string
	}
	var spans []span
	sc := bufio.NewReader(strings.NewReader(out))
	var buf bytes.Buffer
	depth := 0
	for {
		line, err := sc.ReadString('\n')
		if depth == 0 && !strings.HasPrefix(line, "{") {
			if err != nil {
				break
			}
			continue
		}
		buf.WriteString(line)
		depth += strings.Count(line, "{") - strings.Count(line, "}")
		if depth <= 0 {
			depth = 0
			var s struct {
				Name        string
				SpanContext stubContext
				Parent      stubContext
				Resource    []struct {
					Key   string
					Value struct{ Value any }
				}
			}
			if json.Unmarshal(buf.Bytes(), &s) == nil && s.SpanContext.TraceID == id {
				sp := span{name: s.Name, trace: s.SpanContext.TraceID, id: s.SpanContext.SpanID}
				if p := s.Parent.SpanID; p != "" && p != "0000000000000000" {
					sp.parent = p
				}
				for _, kv := range s.Resource {
					if kv.Key == "service.name" {
						sp.service = fmt.Sprint(kv.Value.Value)
					}
				}
				spans = append(spans, sp)
			}
			buf.Reset()
		}
		if err != nil {
			break
		}
	}
	return spans
}

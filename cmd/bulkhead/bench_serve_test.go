package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// TestBenchServe runs bench serve against an HTTP server that streams like the
// edge's native API: three text events, the usage, then [DONE]. Its
// /metrics counts 3 accepted and 1 rejected draft a request of model m
// (and some of another model), which --speculate reports as 75%.
func TestBenchServe(t *testing.T) {
	var served atomic.Int32
	var speculate atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/metrics" {
			n := served.Load()
			fmt.Fprintf(w, "# TYPE bulkhead_worker_draft_tokens_total counter\n"+
				"bulkhead_worker_draft_tokens_total{model=\"m\",outcome=\"accepted\",worker=\"dev-0\"} %d\n"+
				"bulkhead_worker_draft_tokens_total{model=\"m\",outcome=\"rejected\",worker=\"dev-0\"} %d\n"+
				"bulkhead_worker_draft_tokens_total{model=\"other\",outcome=\"rejected\",worker=\"dev-0\"} %d\n", 3*n, n, 100*n)
			return
		}
		if r.Header.Get("Authorization") != "Bearer tok" || r.URL.Path != "/ai/run/m" {
			http.Error(w, "no", http.StatusUnauthorized)
			return
		}
		var in map[string]any
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil || in["stream"] != true || in["max_tokens"] != float64(3) || in["cache_prefix"] != false {
			http.Error(w, "bad body", http.StatusBadRequest)
			return
		}
		speculate.Store(in["speculate"])
		served.Add(1)
		w.Header().Set("Content-Type", "text/event-stream")
		for _, s := range []string{"a", "b", "c"} {
			fmt.Fprintf(w, "data: {\"response\":%q}\n\n", s)
			w.(http.Flusher).Flush()
		}
		fmt.Fprint(w, "data: {\"response\":\"\",\"usage\":{\"completion_tokens\":3}}\n\ndata: [DONE]\n\n")
	}))
	defer srv.Close()
	var out, errOut bytes.Buffer
	err := runBenchServe(context.Background(), []string{"--edge", srv.URL, "--token", "tok", "--model", "m",
		"--streams", "4", "--prompt-tokens", "8", "--gen-tokens", "3", "--json"}, &out, &errOut)
	if err != nil {
		t.Fatalf("bench serve: %v (%s)", err, errOut.String())
	}
	var got struct {
		Tokens    int                `json:"completion_tokens"`
		Aggregate float64            `json:"aggregate_tokens_per_s"`
		TTFT      map[string]float64 `json:"ttft_ms"`
	}
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	if got.Tokens != 12 || got.Aggregate <= 0 {
		t.Fatalf("got %s", out.String())
	}
	if speculate.Load() != false {
		t.Errorf("speculate %v in the body, want false by default", speculate.Load())
	}
	out.Reset()
	err = runBenchServe(context.Background(), []string{"--edge", srv.URL, "--token", "tok", "--model", "m",
		"--streams", "4", "--prompt-tokens", "8", "--gen-tokens", "3", "--speculate", "--json"}, &out, &errOut)
	var drafts struct {
		Drafted    int     `json:"drafted_tokens"`
		Acceptance float64 `json:"draft_acceptance"`
	}
	if err != nil || json.Unmarshal(out.Bytes(), &drafts) != nil || speculate.Load() != true || drafts.Drafted != 16 || drafts.Acceptance != 0.75 {
		t.Errorf("--speculate: %v, body's speculate %v, got %s; want 16 drafted, 0.75 accepted", err, speculate.Load(), out.String())
	}

	// A refused request is an error naming the status, not a figure.
	err = runBenchServe(context.Background(), []string{"--edge", srv.URL, "--token", "wrong", "--model", "m", "--gen-tokens", "3"}, &out, &errOut)
	if err == nil || !strings.Contains(err.Error(), "HTTP 401") {
		t.Fatalf("wrong token: %v", err)
	}
}

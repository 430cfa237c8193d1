package edge

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bulkhead-ai/bulkhead/billing/ledger"
	"github.com/bulkhead-ai/bulkhead/billing/price"
	"github.com/bulkhead-ai/bulkhead/billing/usage"
	"github.com/bulkhead-ai/bulkhead/edge/auth"
	"github.com/bulkhead-ai/bulkhead/models/catalog"
	"github.com/bulkhead-ai/bulkhead/models/refdatatest"
	"github.com/bulkhead-ai/bulkhead/models/testkit/redistest"
	"github.com/bulkhead-ai/bulkhead/queue"
	"github.com/bulkhead-ai/bulkhead/queue/queuetest"
)

// usageServer is an edge whose usage API reads a real ledger on a real
// redis-server, holding the events given (as billing would have counted them).
func usageServer(t *testing.T, now time.Time, events []*queue.UsageEvent) *httptest.Server {
	t.Helper()
	_, rdb := redistest.Own(t)
	l, err := ledger.New(rdb, ledger.Config{Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range events {
		if _, err := l.Record(context.Background(), ev); err != nil {
			t.Fatal(err)
		}
	}
	cat, err := catalog.FromFlags([]string{modelStories + "=" + refdatatest.Path(t, "models/stories260K.gguf")})
	if err != nil {
		t.Fatal(err)
	}
	nc, js := queuetest.JetStream(t, queuetest.Server(t).ClientURL())
	a := fakeAuth{
		"alice-billing": {Tenant: "alice", Scopes: []string{auth.ScopeBillingRead}},
		"bob-billing":   {Tenant: "bob", Scopes: []string{auth.ScopeBillingRead}},
		"alice-run":     {Tenant: "alice", Scopes: []string{auth.ScopeRun, auth.ScopeRead}},
	}
	srv, err := New(nil, Config{Catalog: cat, Auth: a, Quota: &fakeLimiter{}, Queue: queue.NewClient(nc, js),
		Ledger: l, DailyNeurons: 10})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	return hs
}

func get(t *testing.T, url, token, accept string) (int, http.Header, []byte) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	_, _ = b.ReadFrom(resp.Body)
	return resp.StatusCode, resp.Header, b.Bytes()
}

// TestUsageAPI: the usage API and its CSV reconcile with the events counted,
// per bucket and in total; a tenant sees only its own account; another
// account id and a token without billing:read are 403.
func TestUsageAPI(t *testing.T) {
	now := time.Date(2026, 11, 30, 15, 20, 0, 0, time.UTC)
	rates := price.Default()
	var events []*queue.UsageEvent
	var wantMicro int64
	var wantPrompt, wantCompletion, wantCached int64
	outcomes := []string{queue.OutcomeStop, queue.OutcomeLength, queue.OutcomeCancelled, queue.OutcomeTimeout, queue.OutcomeError}
	for i := range 40 {
		u := price.Usage{PromptTokens: 10 + i, CachedTokens: i % 5, CompletionTokens: 3 * i}
		ev := &queue.UsageEvent{RequestID: fmt.Sprintf("alice-%d", i), Tenant: "alice", Model: []string{modelStories, "@cf/other/m"}[i%2],
			Time: now.Add(-time.Duration(i) * 20 * time.Minute), PromptTokens: u.PromptTokens, CachedTokens: u.CachedTokens,
			CompletionTokens: u.CompletionTokens, MicroNeurons: price.Micro(rates, u), Finish: outcomes[i%len(outcomes)],
			TTFTMs: int64(20 + i), TotalMs: int64(200 + 10*i), WorkerID: "w"}
		if i == 3 {
			ev.Metadata = map[string]string{"app": "checkout", "team": "payments"}
			ev.User = "u-17"
			ev.LoRA, ev.LoRAName = "0b0f3b9e-1c2d-4e5f-8a9b-0c1d2e3f4a5b", "poet"
		}
		events = append(events, ev)
		if ev.Time.After(now.Add(-24 * time.Hour)) {
			wantMicro += ev.MicroNeurons
			wantPrompt += int64(ev.PromptTokens)
			wantCompletion += int64(ev.CompletionTokens)
			wantCached += int64(ev.CachedTokens)
		}
	}
	events = append(events, &queue.UsageEvent{RequestID: "bob-1", Tenant: "bob", Model: modelStories, Time: now,
		PromptTokens: 5, CompletionTokens: 5, MicroNeurons: 999, Finish: queue.OutcomeStop})
	hs := usageServer(t, now, events)
	q := "?from=" + now.Add(-24*time.Hour).Format(time.RFC3339) + "&to=" + now.Format(time.RFC3339) + "&granularity=hour"

	var rep struct {
		Result usage.Report `json:"result"`
	}
	status, _, body := get(t, hs.URL+"/client/v4/accounts/alice/ai/usage"+q, "alice-billing", "")
	if status != 200 || json.Unmarshal(body, &rep) != nil {
		t.Fatalf("status %d: %s", status, body)
	}
	tot := rep.Result.Totals
	if price.ToMicro(tot.Neurons) != wantMicro || tot.PromptTokens != wantPrompt || tot.CompletionTokens != wantCompletion || tot.CachedTokens != wantCached {
		t.Fatalf("totals %+v; want %d micro-neurons, %d/%d/%d tokens", tot, wantMicro, wantPrompt, wantCached, wantCompletion)
	}
	var sum int64
	for _, p := range rep.Result.Series {
		sum += price.ToMicro(p.Neurons)
	}
	if sum != wantMicro || len(rep.Result.Models) != 2 || rep.Result.Latency["ttft"] == nil {
		t.Fatalf("series sum %d, want %d; models %v; latency %v", sum, wantMicro, rep.Result.Models, rep.Result.Latency)
	}
	if tr := rep.Result.Today; tr.Date != "2026-11-30" || tr.DailyBudget == nil || *tr.DailyBudget != 10 ||
		math.Abs(*tr.Remaining-max(10-tr.Neurons, 0)) > 1e-6 || tr.ResetsAt != "2026-12-01T00:00:00Z" {
		t.Fatalf("today %+v", tr)
	}

	t.Run("CSV reconciles", func(t *testing.T) {
		status, h, body := get(t, hs.URL+"/ai/usage"+q, "alice-billing", "text/csv")
		if status != 200 || !strings.HasPrefix(h.Get("Content-Type"), "text/csv") {
			t.Fatalf("status %d, %s: %s", status, h.Get("Content-Type"), body)
		}
		rows, err := csv.NewReader(bytes.NewReader(body)).ReadAll()
		if err != nil {
			t.Fatal(err)
		}
		if strings.Join(rows[0], ",") != strings.Join(usage.CSVHeader(), ",") || len(rows)-1 != len(rep.Result.Series) {
			t.Fatalf("header %v and %d rows; want %d rows", rows[0], len(rows)-1, len(rep.Result.Series))
		}
		var micro, prompt int64
		for _, r := range rows[1:] {
			if want := "'" + modelStories; r[1] != want && r[1] != "'@cf/other/m" {
				t.Fatalf("model cell %q: a name starting with @ must be written as text (%q)", r[1], want)
			}
			n, err := strconv.ParseFloat(r[6], 64)
			if err != nil {
				t.Fatal(err)
			}
			micro += price.ToMicro(n)
			p, _ := strconv.ParseInt(r[3], 10, 64)
			prompt += p
		}
		if micro != wantMicro || prompt != wantPrompt {
			t.Fatalf("CSV sums %d micro-neurons and %d prompt tokens; want %d and %d", micro, prompt, wantMicro, wantPrompt)
		}
	})
	t.Run("days", func(t *testing.T) {
		status, _, body := get(t, hs.URL+"/ai/usage?granularity=day&from=2026-11-29&to=2026-12-01", "alice-billing", "")
		var d struct {
			Result usage.Report `json:"result"`
		}
		if status != 200 || json.Unmarshal(body, &d) != nil || d.Result.Totals.Requests != 40 {
			t.Fatalf("status %d: %s", status, body)
		}
	})
	t.Run("one model", func(t *testing.T) {
		status, _, body := get(t, hs.URL+"/ai/usage"+q+"&model=@cf/other/m", "alice-billing", "")
		var d struct {
			Result usage.Report `json:"result"`
		}
		if status != 200 || json.Unmarshal(body, &d) != nil || len(d.Result.Models) != 1 || d.Result.Models[0] != "@cf/other/m" {
			t.Fatalf("status %d: %s", status, body)
		}
	})
	t.Run("requests paged", func(t *testing.T) {
		seen := map[string]bool{}
		cursor := ""
		for page := 0; page < 10; page++ {
			status, _, body := get(t, hs.URL+"/ai/usage/requests?limit=15&cursor="+cursor, "alice-billing", "")
			var r struct {
				Result usage.Requests `json:"result"`
			}
			if status != 200 || json.Unmarshal(body, &r) != nil {
				t.Fatalf("status %d: %s", status, body)
			}
			for _, x := range r.Result.Requests {
				if seen[x.ID] || !strings.HasPrefix(x.ID, "alice-") {
					t.Fatalf("request %s twice or not alice's", x.ID)
				}
				seen[x.ID] = true
				if want := (x.ID == "alice-3"); want != (x.Metadata["app"] == "checkout" && x.Metadata["team"] == "payments" && x.User == "u-17" &&
					x.LoRA == "0b0f3b9e-1c2d-4e5f-8a9b-0c1d2e3f4a5b" && x.LoRAName == "poet") {
					t.Errorf("request %s metadata %v, lora %q %q", x.ID, x.Metadata, x.LoRA, x.LoRAName)
				}
			}
			if cursor = r.Result.Cursor; cursor == "" {
				break
			}
		}
		if len(seen) != 40 {
			t.Fatalf("%d requests over the pages, want 40", len(seen))
		}
	})
	t.Run("another tenant sees none of it", func(t *testing.T) {
		status, _, body := get(t, hs.URL+"/ai/usage"+q, "bob-billing", "")
		var d struct {
			Result usage.Report `json:"result"`
		}
		if status != 200 || json.Unmarshal(body, &d) != nil || d.Result.Totals.Requests != 1 || d.Result.AccountID != "bob" {
			t.Fatalf("status %d: %s", status, body)
		}
	})

	for _, tc := range []struct {
		name, path, token string
		status, code      int
	}{
		{"another account id", "/client/v4/accounts/bob/ai/usage" + q, "alice-billing", 403, 9109},
		{"another account's requests", "/client/v4/accounts/bob/ai/usage/requests", "alice-billing", 403, 9109},
		{"no billing:read scope", "/ai/usage" + q, "alice-run", 403, 9109},
		{"no token", "/ai/usage" + q, "", 401, 10000},
		{"bad granularity", "/ai/usage?granularity=week", "alice-billing", 400, 5004},
		{"bad time", "/ai/usage?from=yesterday", "alice-billing", 400, 5004},
		{"too long a range", "/ai/usage?from=2025-01-01&to=2026-01-01&granularity=hour", "alice-billing", 400, 5004},
		{"bad limit", "/ai/usage/requests?limit=0", "alice-billing", 400, 5004},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, _, body := get(t, hs.URL+tc.path, tc.token, "")
			var env struct {
				Errors []struct{ Code int } `json:"errors"`
			}
			if status != tc.status || json.Unmarshal(body, &env) != nil || len(env.Errors) != 1 || env.Errors[0].Code != tc.code {
				t.Fatalf("status %d: %s; want %d with code %d", status, body, tc.status, tc.code)
			}
		})
	}
	t.Run("dashboard", func(t *testing.T) {
		status, h, body := get(t, hs.URL+"/dashboard", "", "")
		if status != 200 || !strings.Contains(string(body), "/dashboard/app.js") || h.Get("Content-Security-Policy") == "" {
			t.Fatalf("status %d: %.200s", status, body)
		}
	})
}

// TestAsyncBatchFailsPartWay: a batch whose second request cannot be queued
// is refused, says that the first was cancelled, and the first is.
func TestAsyncBatchFailsPartWay(t *testing.T) {
	h := newHarness(t, harnessOpts{maxPerTenant: 1})
	status, _, body := h.do("POST", "/ai/run/"+modelIdle+"?queueRequest=true", "alice",
		`{"requests":[{"prompt":"Once upon a time","max_tokens":4},{"prompt":"Lily","max_tokens":4}]}`)
	code, msg := nativeErr(t, body)
	if status != 429 || code != 3051 || !strings.Contains(msg, "requests[1] could not be queued") || !strings.Contains(msg, "1 request(s) queued before it were cancelled") {
		t.Fatalf("status %d, code %d: %s", status, code, msg)
	}
	ctx := context.Background()
	s, err := h.js.Stream(ctx, queue.JobsStream)
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.GetLastMsgForSubject(ctx, queue.TenantJobSubject(modelIdle, "alice"))
	if err != nil {
		t.Fatal(err)
	}
	job, err := queue.DecodeJob(m.Data)
	if err != nil {
		t.Fatal(err)
	}
	res, err := queue.OpenResults(ctx, h.js)
	if err != nil {
		t.Fatal(err)
	}
	if c, err := res.Cancelled(ctx, job.ID); err != nil || !c {
		t.Fatalf("the queued job %s is not cancelled: %v %v", job.ID, c, err)
	}
	if job.Rates == nil || *job.Rates != price.Of(h.catalog.Models()[0].Prices) {
		t.Fatalf("job rates %+v", job.Rates)
	}
}

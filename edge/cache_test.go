package edge

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/bulkhead-ai/bulkhead/billing/price"
	"github.com/bulkhead-ai/bulkhead/edge/tenants"
	"github.com/bulkhead-ai/bulkhead/models/testkit"
	"github.com/bulkhead-ai/bulkhead/queue"
)

// fakeCachedTokens is what the cache-aware fake worker reports as served
// from the prefix cache when a job uses the cache.
const fakeCachedTokens = 7

// replyCached answers like reply("Hello", " world"), reporting
// fakeCachedTokens cached prompt tokens when the job uses the cache.
func replyCached(ctx context.Context, h *harness, job *queue.Job, rp *queue.Replier) {
	if err := rp.Token(ctx, "Hello", []int32{1}); err != nil {
		return
	}
	u := queue.Usage{PromptTokens: job.PromptTokens, CompletionTokens: 2}
	if job.CachePrefix {
		u.CachedTokens = fakeCachedTokens
	}
	if err := rp.Final(ctx, " world", "stop", u); err != nil && ctx.Err() == nil {
		h.t.Errorf("final frame: %v", err)
	}
}

// cacheClassHarness is a harness where bob's class has prefix_cache off.
func cacheClassHarness(t *testing.T) *harness {
	t.Helper()
	classes, err := tenants.New(tenants.Config{
		Classes: []tenants.Class{{Name: "nocache", Weight: 1, PrefixCacheOff: true}},
		Members: map[string]string{"bob": "nocache"},
	})
	if err != nil {
		t.Fatal(err)
	}
	return newHarness(t, harnessOpts{tenants: classes})
}

// TestCachePrefixReachesJob: every job uses its tenant's prefix cache unless
// the body says cache_prefix false or the tenant's class has prefix_cache
// off; the namespace is always the token's tenant.
func TestCachePrefixReachesJob(t *testing.T) {
	h := cacheClassHarness(t)
	native := "/ai/run/" + modelStories
	chatBody := func(extra string) string {
		return `{"model":"` + modelStories + `","messages":[{"role":"user","content":"Hi"}]` + extra + `}`
	}
	complBody := func(extra string) string {
		return `{"model":"` + modelStories + `","prompt":"Once"` + extra + `}`
	}
	cases := []struct {
		name, tenant, path, body string
		want                     bool
	}{
		{"native default on", "alice", native, `{"prompt":"Once"}`, true},
		{"native true", "alice", native, `{"prompt":"Once","cache_prefix":true}`, true},
		{"native opted out", "alice", native, `{"prompt":"Once","cache_prefix":false}`, false},
		{"native null is the default", "alice", native, `{"prompt":"Once","cache_prefix":null}`, true},
		{"native messages default on", "alice", native, `{"messages":[{"role":"user","content":"Hi"}]}`, true},
		{"native raw stream opted out", "alice", native, `{"prompt":"Once","raw":true,"stream":true,"cache_prefix":false}`, false},
		{"chat default on", "alice", "/v1/chat/completions", chatBody(""), true},
		{"chat opted out", "alice", "/v1/chat/completions", chatBody(`,"cache_prefix":false`), false},
		{"completions default on", "alice", "/v1/completions", complBody(""), true},
		{"completions opted out", "alice", "/v1/completions", complBody(`,"cache_prefix":false`), false},
		{"class off: native default", "bob", native, `{"prompt":"Once"}`, false},
		{"class off: native true", "bob", native, `{"prompt":"Once","cache_prefix":true}`, false},
		{"class off: chat true", "bob", "/v1/chat/completions", chatBody(`,"cache_prefix":true`), false},
		{"class off: completions default", "bob", "/v1/completions", complBody(""), false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := h.jobCount()
			status, _, b := h.do("POST", c.path, c.tenant, c.body)
			if status != http.StatusOK {
				t.Fatalf("status %d: %s", status, b)
			}
			if h.jobCount() != before+1 {
				t.Fatalf("jobs %d, want %d", h.jobCount(), before+1)
			}
			job := h.lastJob()
			if job.CachePrefix != c.want || job.Tenant != c.tenant {
				t.Errorf("job cache_prefix %v tenant %q, want %v for %s", job.CachePrefix, job.Tenant, c.want, c.tenant)
			}
		})
	}
	t.Run("namespace and class are the token's, never the body's", func(t *testing.T) {
		status, _, b := h.do("POST", native, "alice",
			`{"prompt":"Once","tenant":"bob","namespace":"bob","account_id":"bob","class":"nocache","prefix_cache":"off"}`)
		if status != http.StatusOK {
			t.Fatalf("status %d: %s", status, b)
		}
		if job := h.lastJob(); !job.CachePrefix || job.Tenant != "alice" {
			t.Errorf("job cache_prefix %v tenant %q, want true for alice", job.CachePrefix, job.Tenant)
		}
		status, _, b = h.do("POST", native, "bob",
			`{"prompt":"Once","cache_prefix":true,"tenant":"alice","namespace":"alice","account_id":"alice","class":"default"}`)
		if status != http.StatusOK {
			t.Fatalf("status %d: %s", status, b)
		}
		if job := h.lastJob(); job.CachePrefix || job.Tenant != "bob" {
			t.Errorf("job cache_prefix %v tenant %q, want false for bob", job.CachePrefix, job.Tenant)
		}
	})
}

// TestCachePrefixAsyncBatch: each request of an async batch uses the cache
// unless it says cache_prefix false, or its tenant's class keeps it out.
func TestCachePrefixAsyncBatch(t *testing.T) {
	h := cacheClassHarness(t)
	for _, c := range []struct {
		tenant string
		want   map[string]bool // cache_prefix by the job's prompt
	}{
		{"alice", map[string]bool{"user: one\nassistant:": true, "user: two\nassistant:": false, "user: three\nassistant:": true}},
		{"bob", map[string]bool{"user: one\nassistant:": false, "user: two\nassistant:": false, "user: three\nassistant:": false}},
	} {
		t.Run(c.tenant, func(t *testing.T) {
			before := h.jobCount()
			status, _, b := h.do("POST", "/ai/run/"+modelStories+"?queueRequest=true", c.tenant,
				`{"requests":[{"prompt":"one"},{"prompt":"two","cache_prefix":false},{"prompt":"three","cache_prefix":true}]}`)
			if status != http.StatusOK {
				t.Fatalf("status %d: %s", status, b)
			}
			// Let the batch finish: the fake worker must not be stopped mid-job.
			asyncDoneResult(t, h, c.tenant, b)
			if h.jobCount() != before+3 {
				t.Fatalf("jobs %d, want %d", h.jobCount(), before+3)
			}
			h.mu.Lock()
			got := map[string]bool{}
			for _, j := range h.jobs[before:] {
				got[j.Prompt] = j.CachePrefix
			}
			h.mu.Unlock()
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("cache_prefix by prompt %v, want %v", got, c.want)
			}
		})
	}
}

func TestCachePrefixWrongType(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	native := "/ai/run/" + modelStories
	cases := []struct {
		name, path, body string
		field            string // the field the refusal names
	}{
		{"native string", native, `{"prompt":"Once","cache_prefix":"true"}`, "cache_prefix"},
		{"native number", native, `{"prompt":"Once","cache_prefix":1}`, "cache_prefix"},
		{"native object", native, `{"prompt":"Once","cache_prefix":{}}`, "cache_prefix"},
		{"native batch", native + "?queueRequest=true", `{"requests":[{"prompt":"a"},{"prompt":"b","cache_prefix":"yes"}]}`,
			"requests[1].cache_prefix"},
		{"chat", "/v1/chat/completions",
			`{"model":"` + modelStories + `","messages":[{"role":"user","content":"Hi"}],"cache_prefix":"yes"}`, "cache_prefix"},
		{"completions", "/v1/completions", `{"model":"` + modelStories + `","prompt":"Once","cache_prefix":[true]}`, "cache_prefix"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := h.jobCount()
			status, _, b := h.do("POST", c.path, "alice", c.body)
			if status != http.StatusBadRequest {
				t.Fatalf("status %d, want 400: %s", status, b)
			}
			want := c.field + ": must be a boolean"
			if strings.HasPrefix(c.path, "/v1/") {
				typ, _, msg := openAIErr(t, b)
				param, _ := mustJSON(t, b)["error"].(map[string]any)["param"].(string)
				if typ != "invalid_request_error" || !strings.Contains(msg, want) || param != c.field {
					t.Errorf("got %s %q param %q, want invalid_request_error %q param %q", typ, msg, param, want, c.field)
				}
			} else if code, msg := nativeErr(t, b); code != 5004 || !strings.Contains(msg, want) {
				t.Errorf("got %d %q, want 5004 naming %q", code, msg, want)
			}
			if h.jobCount() != before {
				t.Errorf("a refused request was enqueued")
			}
		})
	}
}

// asyncDoneResult polls (as tenant) the batch whose submit answer is
// submitted until it is done, and returns the final poll's result.
func asyncDoneResult(t *testing.T, h *harness, tenant string, submitted []byte) asyncResult {
	t.Helper()
	var sub struct {
		Result asyncResult `json:"result"`
	}
	if err := json.Unmarshal(submitted, &sub); err != nil || sub.Result.RequestID == "" {
		t.Fatalf("submit answer %s: %v", submitted, err)
	}
	var done struct {
		Result asyncResult `json:"result"`
	}
	testkit.Poll(t, 5*time.Second, testkit.Cond("the batch to finish", func() bool {
		_, _, body := h.do("POST", "/ai/run/"+modelStories, tenant, `{"request_id":"`+sub.Result.RequestID+`"}`)
		done.Result = asyncResult{}
		_ = json.Unmarshal(body, &done)
		return done.Result.Status == asyncDone
	}))
	return done.Result
}

// usageAt digs the usage object out of a response: path names the keys from
// the top; for a stream, the last event that has a usage object is used.
func usageAt(t *testing.T, body []byte, stream bool, path ...string) map[string]any {
	t.Helper()
	docs := [][]byte{body}
	if stream {
		docs = nil
		for _, ev := range parseSSE(t, body) {
			if ev.data != "[DONE]" && strings.Contains(ev.data, `"usage":{`) {
				docs = append(docs, []byte(ev.data))
			}
		}
		if len(docs) == 0 {
			t.Fatalf("no event carries usage: %s", body)
		}
		docs = docs[len(docs)-1:]
	}
	var v any = mustJSON(t, docs[0])
	for _, k := range path {
		m, ok := v.(map[string]any)
		if !ok {
			t.Fatalf("no %v in %s", path, body)
		}
		v = m[k]
	}
	u, ok := v.(map[string]any)
	if !ok {
		t.Fatalf("no usage object at %v in %s", path, body)
	}
	return u
}

// wantCharged waits for the quota's charge of job and checks it is u at the
// model's catalog prices: cached prompt tokens at the cached price.
func wantCharged(t *testing.T, h *harness, job *queue.Job, u price.Usage) {
	t.Helper()
	m, ok := h.catalog.Lookup(job.Model)
	if !ok {
		t.Fatalf("model %q not in the catalog", job.Model)
	}
	want := price.Neurons(price.Micro(price.Of(m.Prices), u))
	testkit.Poll(t, 5*time.Second, func() error {
		_, _, last := h.limiter.counts()
		if last.RequestID != job.ID {
			return fmt.Errorf("last charge for request %q, want %q", last.RequestID, job.ID)
		}
		if last.Neurons != want {
			t.Errorf("charged %v neurons, want %v for %+v", last.Neurons, want, u)
		}
		return nil
	})
}

func TestCachedTokensInUsage(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	h.setBehaviour(replyCached)
	native := "/ai/run/" + modelStories
	cases := []struct {
		name, path, body string
		stream           bool
		usagePath        []string
	}{
		{"native", native, `{"prompt":"Once"%s}`, false, []string{"result", "usage"}},
		{"native stream", native, `{"prompt":"Once","stream":true%s}`, true, []string{"usage"}},
		{"chat", "/v1/chat/completions",
			`{"model":"` + modelStories + `","messages":[{"role":"user","content":"Hi"}]%s}`, false, []string{"usage"}},
		{"chat stream", "/v1/chat/completions",
			`{"model":"` + modelStories + `","messages":[{"role":"user","content":"Hi"}],"stream":true,"stream_options":{"include_usage":true}%s}`,
			true, []string{"usage"}},
		{"completions", "/v1/completions", `{"model":"` + modelStories + `","prompt":"Once"%s}`, false, []string{"usage"}},
		{"completions stream", "/v1/completions",
			`{"model":"` + modelStories + `","prompt":"Once","stream":true,"stream_options":{"include_usage":true}%s}`,
			true, []string{"usage"}},
	}
	for _, c := range cases {
		for _, on := range []bool{true, false} {
			name, extra := c.name+"/default", ""
			if !on {
				name, extra = c.name+"/opted out", `,"cache_prefix":false`
			}
			t.Run(name, func(t *testing.T) {
				status, _, b := h.do("POST", c.path, "alice", strings.Replace(c.body, "%s", extra, 1))
				if status != http.StatusOK {
					t.Fatalf("status %d: %s", status, b)
				}
				job := h.lastJob()
				cached := 0
				if on {
					cached = fakeCachedTokens
				}
				wantCharged(t, h, job, price.Usage{PromptTokens: job.PromptTokens, CachedTokens: cached, CompletionTokens: 2})
				u := usageAt(t, b, c.stream, c.usagePath...)
				if u["prompt_tokens"] != float64(job.PromptTokens) || u["completion_tokens"] != 2.0 {
					t.Errorf("usage %v", u)
				}
				details, present := u["prompt_tokens_details"]
				switch {
				case on && !reflect.DeepEqual(details, map[string]any{"cached_tokens": float64(fakeCachedTokens)}):
					t.Errorf("prompt_tokens_details %v, want cached_tokens %d: %s", details, fakeCachedTokens, b)
				case !on && present:
					t.Errorf("prompt_tokens_details %v without cached tokens: %s", details, b)
				}
			})
		}
	}
	t.Run("async poll", func(t *testing.T) {
		status, _, b := h.do("POST", native+"?queueRequest=true", "alice",
			`{"requests":[{"prompt":"one"},{"prompt":"two","cache_prefix":false},{"prompt":"three","cache_prefix":true}]}`)
		if status != http.StatusOK {
			t.Fatalf("submit: %d %s", status, b)
		}
		r := asyncDoneResult(t, h, "alice", b)
		if len(r.Responses) != 3 {
			t.Fatalf("responses %+v", r)
		}
		for i, want := range []int{fakeCachedTokens, 0, fakeCachedTokens} {
			one := r.Responses[i]
			if !one.Success || one.Result == nil || one.Result.Usage == nil {
				t.Fatalf("response %d: %+v", i, one)
			}
			got := 0
			if d := one.Result.Usage.PromptTokensDetails; d != nil {
				got = d.CachedTokens
			}
			if got != want {
				t.Errorf("response %d cached_tokens %d, want %d", i, got, want)
			}
		}
		if r.Usage == nil || r.Usage.PromptTokensDetails == nil || r.Usage.PromptTokensDetails.CachedTokens != 2*fakeCachedTokens {
			t.Errorf("batch usage %+v, want cached_tokens %d", r.Usage, 2*fakeCachedTokens)
		}
	})
}

// TestRejectIfBusyReachesJob: Workers AI's rejectIfBusy, in the body as
// options.rejectIfBusy (native and OpenAI-compatible, as Workers AI takes
// it) or as the ?rejectIfBusy=true query, reaches the job; otherwise the
// job waits for a worker.
func TestRejectIfBusyReachesJob(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	native := "/ai/run/" + modelStories
	chat := func(extra string) string {
		return `{"model":"` + modelStories + `","messages":[{"role":"user","content":"Hi"}]` + extra + `}`
	}
	for _, c := range []struct {
		name, path, body string
		want             bool
	}{
		{"native default", native, `{"prompt":"Once"}`, false},
		{"native body", native, `{"prompt":"Once","options":{"rejectIfBusy":true}}`, true},
		{"native body false", native, `{"prompt":"Once","options":{"rejectIfBusy":false}}`, false},
		{"native query", native + "?rejectIfBusy=true", `{"prompt":"Once"}`, true},
		{"chat default", "/v1/chat/completions", chat(""), false},
		{"chat body", "/v1/chat/completions", chat(`,"options":{"rejectIfBusy":true}`), true},
		{"completions body", "/v1/completions", `{"model":"` + modelStories + `","prompt":"Once","options":{"rejectIfBusy":true}}`, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			status, _, b := h.do("POST", c.path, "alice", c.body)
			if status != http.StatusOK {
				t.Fatalf("status %d: %s", status, b)
			}
			if got := h.lastJob().RejectIfBusy; got != c.want {
				t.Errorf("job RejectIfBusy %v, want %v", got, c.want)
			}
		})
	}
	status, _, b := h.do("POST", native, "alice", `{"prompt":"Once","options":{"rejectIfBusy":"yes"}}`)
	if status != http.StatusBadRequest || !strings.Contains(string(b), "rejectIfBusy") {
		t.Errorf("options.rejectIfBusy \"yes\": status %d: %s", status, b)
	}
}

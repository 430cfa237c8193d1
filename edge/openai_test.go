package edge

import (
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/bulkhead-ai/bulkhead/edge/quota"
	"github.com/bulkhead-ai/bulkhead/queue"
)

func TestOpenAIChat(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	body := `{"model":"` + modelStories + `","messages":[{"role":"developer","content":"Be kind."},{"role":"user","content":[{"type":"text","text":"Hi"}]}],"max_completion_tokens":9,"seed":-1,"stop":"x"}`
	for _, path := range []string{"/v1/chat/completions", "/client/v4/accounts/alice/ai/v1/chat/completions"} {
		t.Run(path, func(t *testing.T) {
			status, _, b := h.do("POST", path, "alice", body)
			if status != 200 {
				t.Fatalf("status %d: %s", status, b)
			}
			job := h.lastJob()
			if job.Prompt != "system: Be kind.\nuser: Hi\nassistant:" || job.MaxTokens != 9 || job.Sampling.Seed != ^uint64(0) {
				t.Errorf("job prompt %q max %d seed %d", job.Prompt, job.MaxTokens, job.Sampling.Seed)
			}
			got := mustJSON(t, b)
			created := got["created"]
			want := map[string]any{
				"id": "chatcmpl-" + job.ID, "object": "chat.completion", "created": created, "model": modelStories,
				"choices": []any{map[string]any{"index": 0.0, "message": map[string]any{"role": "assistant", "content": "Hello world"},
					"logprobs": nil, "finish_reason": "stop"}},
				"usage": map[string]any{"prompt_tokens": float64(job.PromptTokens), "completion_tokens": 2.0, "total_tokens": float64(job.PromptTokens + 2)},
			}
			if c, _ := created.(float64); c < 1e9 {
				t.Errorf("created %v", created)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("body\n got %v\nwant %v", got, want)
			}
		})
	}
	t.Run("default max_tokens is bounded, not the rest of the window", func(t *testing.T) {
		h.do("POST", "/v1/chat/completions", "alice", `{"model":"`+modelStories+`","messages":[{"role":"user","content":"Hi"}]}`)
		if job := h.lastJob(); job.MaxTokens != DefaultMaxTokens {
			t.Errorf("max_tokens %d, want the default %d", job.MaxTokens, DefaultMaxTokens)
		}
	})
	t.Run("default max_tokens is at most the rest of the window", func(t *testing.T) {
		long := strings.Repeat("Once upon a time there was a little girl. ", 150)
		status, _, b := h.do("POST", "/v1/completions", "alice", `{"model":"`+modelStories+`","prompt":"`+long+`"}`)
		job := h.lastJob()
		if status != 200 || job.PromptTokens+job.MaxTokens != 2048 || job.MaxTokens >= DefaultMaxTokens {
			t.Errorf("status %d, prompt %d + max %d, want the rest of the 2048 window under %d: %.200s",
				status, job.PromptTokens, job.MaxTokens, DefaultMaxTokens, b)
		}
	})
}

func TestOpenAIChatStream(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	for _, include := range []bool{false, true} {
		name := "without usage"
		opts := ""
		if include {
			name, opts = "include_usage", `,"stream_options":{"include_usage":true}`
		}
		t.Run(name, func(t *testing.T) {
			status, hdr, b := h.do("POST", "/v1/chat/completions", "alice",
				`{"model":"`+modelStories+`","messages":[{"role":"user","content":"Hi"}],"stream":true`+opts+`}`)
			if status != 200 || hdr.Get("Content-Type") != "text/event-stream" {
				t.Fatalf("status %d %q: %s", status, hdr.Get("Content-Type"), b)
			}
			job := h.lastJob()
			evs := parseSSE(t, b)
			usageNull := ""
			if include {
				usageNull = `,"usage":null`
			}
			head := `{"id":"chatcmpl-` + job.ID + `","object":"chat.completion.chunk","created":`
			var want []string
			want = append(want,
				`"choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]`+usageNull+`}`,
				`"choices":[{"index":0,"delta":{"content":"Hello"},"logprobs":null,"finish_reason":null}]`+usageNull+`}`,
				`"choices":[{"index":0,"delta":{"content":" world"},"logprobs":null,"finish_reason":null}]`+usageNull+`}`,
				`"choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}]`+usageNull+`}`)
			if include {
				want = append(want, `"choices":[],"usage":{"prompt_tokens":`+itoa(job.PromptTokens)+`,"completion_tokens":2,"total_tokens":`+itoa(job.PromptTokens+2)+`}}`)
			}
			if len(evs) != len(want)+1 || evs[len(evs)-1].data != "[DONE]" {
				t.Fatalf("events %q", evs)
			}
			for i, w := range want {
				d := evs[i].data
				if !strings.HasPrefix(d, head) || !strings.HasSuffix(d, `,"model":"`+modelStories+`",`+w) {
					t.Errorf("chunk %d\n got %s\nwant %s<created>,\"model\":...,%s", i, d, head, w)
				}
			}
		})
	}
}

func TestOpenAICompletions(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	t.Run("json", func(t *testing.T) {
		status, _, b := h.do("POST", "/v1/completions", "alice", `{"model":"`+modelStories+`","prompt":"Once upon","max_tokens":5}`)
		if status != 200 {
			t.Fatalf("status %d: %s", status, b)
		}
		job := h.lastJob()
		if job.Prompt != "Once upon" || !job.ParseSpecial || job.MaxTokens != 5 {
			t.Errorf("job %+v", job)
		}
		got := mustJSON(t, b)
		want := map[string]any{
			"id": "cmpl-" + job.ID, "object": "text_completion", "created": got["created"], "model": modelStories,
			"choices": []any{map[string]any{"text": "Hello world", "index": 0.0, "logprobs": nil, "finish_reason": "stop"}},
			"usage":   map[string]any{"prompt_tokens": float64(job.PromptTokens), "completion_tokens": 2.0, "total_tokens": float64(job.PromptTokens + 2)},
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("body\n got %v\nwant %v", got, want)
		}
	})
	t.Run("stream", func(t *testing.T) {
		status, _, b := h.do("POST", "/v1/completions", "alice",
			`{"model":"`+modelStories+`","prompt":["Once"],"stream":true,"stream_options":{"include_usage":true}}`)
		if status != 200 {
			t.Fatalf("status %d: %s", status, b)
		}
		evs := parseSSE(t, b)
		var texts []string
		for _, e := range evs[:len(evs)-1] {
			var c textCompletion
			if err := json.Unmarshal([]byte(e.data), &c); err != nil {
				t.Fatal(err)
			}
			if c.Object != "text_completion" {
				t.Errorf("object %q", c.Object)
			}
			for _, ch := range c.Choices {
				texts = append(texts, ch.Text)
			}
		}
		if strings.Join(texts, "") != "Hello world" || evs[len(evs)-1].data != "[DONE]" ||
			!strings.Contains(evs[len(evs)-2].data, `"choices":[],"usage":{"prompt_tokens"`) {
			t.Errorf("events %q", evs)
		}
	})
}

// banAll is a logit_bias object banning tokens 0 to n-1.
func banAll(n int) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = fmt.Sprintf(`"%d":-100`, i)
	}
	return "{" + strings.Join(parts, ",") + "}"
}

// manyKeys is a metadata object with n keys.
func manyKeys(n int) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = fmt.Sprintf(`"k%d":"v"`, i)
	}
	return "{" + strings.Join(parts, ",") + "}"
}

// TestMetadataReachesJob: a request's metadata travels on its job (and
// from there into its usage event: workers/worker TestUsageEventMetadata).
func TestMetadataReachesJob(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	body := `{"model":"` + modelStories + `","prompt":"Hi","metadata":{"app":"checkout","user_tier":"gold"},"user":"u-17"}`
	if status, _, b := h.do("POST", "/v1/completions", "alice", body); status != 200 {
		t.Fatalf("%d %s", status, b)
	}
	if got := h.lastJob().Metadata; got["app"] != "checkout" || got["user_tier"] != "gold" || len(got) != 2 {
		t.Fatalf("job metadata %v", got)
	}
	if got := h.lastJob().User; got != "u-17" {
		t.Fatalf("job user %q", got)
	}
	body = `{"model":"` + modelStories + `","prompt":"Hi","user":"u-17","safety_identifier":"s-9"}`
	if status, _, b := h.do("POST", "/v1/completions", "alice", body); status != 200 || h.lastJob().User != "s-9" {
		t.Fatalf("safety_identifier does not win: %d %s, user %q", status, b, h.lastJob().User)
	}
}

// TestLogitBiasReachesJob: a valid logit_bias travels on the job, by token.
func TestLogitBiasReachesJob(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	body := `{"model":"` + modelStories + `","messages":[{"role":"user","content":"Hi"}],"logit_bias":{"300":2.5,"7":-100}}`
	if status, _, b := h.do("POST", "/v1/chat/completions", "alice", body); status != 200 {
		t.Fatalf("%d %s", status, b)
	}
	want := []queue.TokenBias{{Token: 7, Bias: -100}, {Token: 300, Bias: 2.5}}
	if got := h.lastJob().LogitBias; !reflect.DeepEqual(got, want) {
		t.Fatalf("job logit_bias %v, want %v", got, want)
	}
}

func TestOpenAIErrors(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	chat := func(extra string) string {
		return `{"model":"` + modelStories + `","messages":[{"role":"user","content":"Hi"}]` + extra + `}`
	}
	cases := []struct {
		name, path, token, body string
		limiter                 error
		status                  int
		typ, code, msgHas       string
	}{
		{"unknown model", "/v1/chat/completions", "alice", `{"model":"gpt-4","messages":[{"role":"user","content":"x"}]}`, nil,
			404, "invalid_request_error", "model_not_found", "gpt-4"},
		{"missing model", "/v1/chat/completions", "alice", `{"messages":[{"role":"user","content":"x"}]}`, nil,
			400, "invalid_request_error", "", "model"},
		{"context length", "/v1/chat/completions", "alice", chat(`,"max_tokens":4000`), nil,
			400, "invalid_request_error", "context_length_exceeded", "context window is 2048 tokens"},
		{"n", "/v1/chat/completions", "alice", chat(`,"n":9`), nil, 400, "invalid_request_error", "", "n: must be between 1 and 8"},
		{"metadata too many keys", "/v1/chat/completions", "alice", chat(`,"metadata":` + manyKeys(17)), nil, 400, "invalid_request_error", "", "metadata: has 17 keys"},
		{"metadata value too long", "/v1/chat/completions", "alice", chat(`,"metadata":{"k":"` + strings.Repeat("v", 513) + `"}`), nil,
			400, "invalid_request_error", "", "metadata"},
		{"user too long", "/v1/chat/completions", "alice", chat(`,"user":"` + strings.Repeat("u", 257) + `"`), nil, 400, "invalid_request_error", "", "user"},
		{"metadata not strings", "/v1/chat/completions", "alice", chat(`,"metadata":{"k":5}`), nil, 400, "invalid_request_error", "", "metadata"},
		{"logit_bias key", "/v1/chat/completions", "alice", chat(`,"logit_bias":{"hello":5}`), nil, 400, "invalid_request_error", "", "logit_bias"},
		{"logit_bias negative id", "/v1/chat/completions", "alice", chat(`,"logit_bias":{"-3":5}`), nil, 400, "invalid_request_error", "", "logit_bias"},
		{"logit_bias range", "/v1/completions", "alice", `{"model":"` + modelStories + `","prompt":"x","logit_bias":{"12":101}}`, nil,
			400, "invalid_request_error", "", "between -100 and 100"},
		{"logit_bias outside the vocabulary", "/v1/chat/completions", "alice", chat(`,"logit_bias":{"512":-100}`), nil,
			400, "invalid_request_error", "", "vocabulary of 512 tokens"},
		{"logit_bias bans everything", "/v1/chat/completions", "alice", chat(`,"logit_bias":` + banAll(512)), nil,
			400, "invalid_request_error", "", "bans every token"},
		{"logit_bias too many", "/v1/chat/completions", "alice", chat(`,"logit_bias":` + banAll(1025)), nil,
			400, "invalid_request_error", "", "at most 1024"},
		{"stream_options without stream", "/v1/chat/completions", "alice", chat(`,"stream_options":{"include_usage":true}`), nil,
			400, "invalid_request_error", "", "stream_options"},
		{"too many stops", "/v1/chat/completions", "alice", chat(`,"stop":["a","b","c","d","e"]`), nil, 400, "invalid_request_error", "", "stop"},
		{"wrong type", "/v1/chat/completions", "alice", chat(`,"temperature":"hot"`), nil, 400, "invalid_request_error", "", "temperature: must be a number"},
		{"no key", "/v1/chat/completions", "", chat(""), nil, 401, "invalid_request_error", "invalid_api_key", ""},
		{"rate limited", "/v1/chat/completions", "alice", chat(""), quota.ErrRateLimited, 429, "requests", "rate_limit_exceeded", ""},
		{"budget", "/v1/completions", "alice", `{"model":"` + modelStories + `","prompt":"x"}`, quota.ErrBudgetExhausted,
			429, "insufficient_quota", "insufficient_quota", ""},
		{"completion prompt list", "/v1/completions", "alice", `{"model":"` + modelStories + `","prompt":["a","b"]}`, nil,
			400, "invalid_request_error", "", "prompt"},
		{"account mismatch", "/client/v4/accounts/bob/ai/v1/chat/completions", "alice", chat(""), nil,
			403, "invalid_request_error", "permission_denied", ""},
		{"models scope", "/v1/chat/completions", "reader", chat(""), nil, 403, "invalid_request_error", "permission_denied", ""},
		{"no route", "/v1/audio/transcriptions", "alice", `{}`, nil, 404, "invalid_request_error", "not_found", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h.limiter.set(c.limiter)
			defer h.limiter.set(nil)
			before := h.jobCount()
			status, _, b := h.do("POST", c.path, c.token, c.body)
			if status != c.status {
				t.Fatalf("status %d, want %d: %s", status, c.status, b)
			}
			typ, code, msg := openAIErr(t, b)
			if typ != c.typ || code != c.code || !strings.Contains(msg, c.msgHas) {
				t.Errorf("got %s/%s %q, want %s/%s containing %q", typ, code, msg, c.typ, c.code, c.msgHas)
			}
			if h.jobCount() != before {
				t.Errorf("a refused request was enqueued")
			}
		})
	}
}

func TestModelLists(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	t.Run("openai", func(t *testing.T) {
		status, _, b := h.do("GET", "/v1/models", "reader", "")
		if status != 200 {
			t.Fatalf("status %d: %s", status, b)
		}
		var got modelList
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatal(err)
		}
		if got.Object != "list" || len(got.Data) != 2 {
			t.Fatalf("list %+v", got)
		}
		m := got.Data[0]
		if m.ID != modelStories || m.Object != "model" || m.OwnedBy != "bulkhead" || m.ContextWindow != 2048 || m.MaxModelLen != 2048 || m.Created == 0 {
			t.Errorf("model %+v", m)
		}
	})
	t.Run("openai allowlist", func(t *testing.T) {
		_, _, b := h.do("GET", "/client/v4/accounts/limited/ai/v1/models", "limited", "")
		if !strings.Contains(string(b), modelIdle) || strings.Contains(string(b), modelStories) {
			t.Errorf("allowlist not applied: %s", b)
		}
	})
	t.Run("clamp is seen", func(t *testing.T) {
		if err := h.catalog.Clamp(modelIdle, 1024); err != nil {
			t.Fatal(err)
		}
		_, _, b := h.do("GET", "/v1/models", "alice", "")
		if !strings.Contains(string(b), `"id":"`+modelIdle+`","object":"model","created":`) || !strings.Contains(string(b), `"context_window":1024`) {
			t.Errorf("clamped window not advertised: %s", b)
		}
	})
	t.Run("native search", func(t *testing.T) {
		status, _, b := h.do("GET", "/client/v4/accounts/alice/ai/models/search?search=STORIES&task=Text%20Generation", "alice", "")
		if status != 200 {
			t.Fatalf("status %d: %s", status, b)
		}
		var got struct {
			Result     []modelInfo `json:"result"`
			Success    bool        `json:"success"`
			Errors     []any       `json:"errors"`
			Messages   []any       `json:"messages"`
			ResultInfo resultInfo  `json:"result_info"`
		}
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatal(err)
		}
		if !got.Success || got.Errors == nil || got.Messages == nil || len(got.Result) != 1 || got.ResultInfo.TotalCount != 1 {
			t.Fatalf("search %s", b)
		}
		m := got.Result[0]
		if m.Name != modelStories || m.Task.Name != "Text Generation" || len(m.ID) != 36 ||
			m.Properties[0] != (modelProperty{PropertyID: "context_window", Value: "2048"}) {
			t.Errorf("model %+v", m)
		}
	})
	t.Run("native search paging", func(t *testing.T) {
		_, _, b := h.do("GET", "/ai/models/search?per_page=1&page=2", "alice", "")
		if !strings.Contains(string(b), modelIdle) || strings.Contains(string(b), `"name":"`+modelStories) ||
			!strings.Contains(string(b), `"result_info":{"count":1,"page":2,"per_page":1,"total_count":2}`) {
			t.Errorf("page 2: %s", b)
		}
		status, _, _ := h.do("GET", "/ai/models/search?per_page=x", "alice", "")
		if status != http.StatusBadRequest {
			t.Errorf("bad per_page: status %d", status)
		}
	})
}

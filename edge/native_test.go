package edge

import (
	"context"
	"encoding/json"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/bulkhead-ai/bulkhead/queue"
)

func TestNativeRun(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	tok := h.srv.vocabs[modelStories].tok
	window := h.catalog.Models()[0].ContextWindow
	cases := []struct {
		name, path, body string
		wantPrompt       string
		wantMax          int
		wantRaw          bool
	}{
		{"prompt", "/ai/run/" + modelStories, `{"prompt":"Once upon a time"}`,
			"user: Once upon a time\nassistant:", DefaultMaxTokens, false},
		{"account path", "/client/v4/accounts/alice/ai/run/" + modelStories, `{"prompt":"Hi","max_tokens":7}`,
			"user: Hi\nassistant:", 7, false},
		{"messages", "/ai/run/" + modelStories,
			`{"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Tell a story"}],"temperature":0.7,"top_k":5,"seed":42}`,
			"system: Be brief.\nuser: Tell a story\nassistant:", DefaultMaxTokens, false},
		{"raw", "/ai/run/" + modelStories, `{"prompt":"Once upon","raw":true,"stop":["\n"]}`,
			"Once upon", DefaultMaxTokens, true},
		{"tenant in body ignored", "/ai/run/" + modelStories, `{"prompt":"x","tenant":"mallory","account_id":"bob"}`,
			"user: x\nassistant:", DefaultMaxTokens, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := time.Now()
			status, hdr, body := h.do("POST", c.path, "alice", c.body)
			if status != http.StatusOK {
				t.Fatalf("status %d: %s", status, body)
			}
			if ct := hdr.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type %q", ct)
			}
			job := h.lastJob()
			if hdr.Get("X-Request-Id") != job.ID {
				t.Errorf("X-Request-Id %q, job id %q", hdr.Get("X-Request-Id"), job.ID)
			}
			wantTokens := len(tok.Encode(c.wantPrompt, true, c.wantRaw))
			want := map[string]any{
				"result": map[string]any{
					"response": "Hello world",
					"usage": map[string]any{"prompt_tokens": float64(wantTokens), "completion_tokens": 2.0,
						"total_tokens": float64(wantTokens + 2)},
				},
				"success": true, "errors": []any{}, "messages": []any{},
			}
			if got := mustJSON(t, body); !reflect.DeepEqual(got, want) {
				t.Errorf("body\n got %v\nwant %v", got, want)
			}
			switch {
			case job.Tenant != "alice":
				t.Errorf("job tenant %q, want the token's", job.Tenant)
			case job.Model != modelStories:
				t.Errorf("job model %q", job.Model)
			case job.Prompt != c.wantPrompt:
				t.Errorf("job prompt %q, want %q", job.Prompt, c.wantPrompt)
			case job.PromptTokens != wantTokens:
				t.Errorf("job prompt tokens %d, want %d", job.PromptTokens, wantTokens)
			case job.MaxTokens != c.wantMax:
				t.Errorf("job max tokens %d, want %d", job.MaxTokens, c.wantMax)
			case !job.AddBOS || job.ParseSpecial != c.wantRaw:
				t.Errorf("job add_bos %v parse_special %v", job.AddBOS, job.ParseSpecial)
			case job.Reply != queue.ReplySubject(job.ID) || len(job.ID) != 32:
				t.Errorf("job id %q reply %q", job.ID, job.Reply)
			case job.Deadline.Before(before.Add(19*time.Second)) || job.Deadline.After(time.Now().Add(20*time.Second)):
				t.Errorf("job deadline %v not RequestTimeout from now", job.Deadline)
			}
			if job.PromptTokens+job.MaxTokens > window {
				t.Errorf("admitted a job beyond the window")
			}
		})
	}
	t.Run("sampling", func(t *testing.T) {
		h.do("POST", "/ai/run/"+modelStories, "alice",
			`{"prompt":"x","temperature":0.5,"top_p":0.9,"top_k":40,"seed":7,"repetition_penalty":1.1,"frequency_penalty":0.2,"presence_penalty":-0.3,"stop":"END"}`)
		job := h.lastJob()
		want := queue.Sampling{Temperature: 0.5, TopP: 0.9, TopK: 40, Seed: 7, RepetitionPenalty: 1.1, FrequencyPenalty: 0.2, PresencePenalty: -0.3}
		if job.Sampling != want || !reflect.DeepEqual(job.Stop, []string{"END"}) {
			t.Errorf("sampling %+v stop %q", job.Sampling, job.Stop)
		}
	})
	t.Run("quota charged", func(t *testing.T) {
		_, rel0, _ := h.limiter.counts()
		h.do("POST", "/ai/run/"+modelStories, "alice", `{"prompt":"x"}`)
		_, rel, last := h.limiter.counts()
		job := h.lastJob()
		m, _ := h.catalog.Lookup(modelStories)
		if want := m.Prices.Neurons(job.PromptTokens, 2); rel != rel0+1 || last.Neurons != want {
			t.Errorf("released %d times (was %d), last %v neurons; want %v", rel, rel0, last.Neurons, want)
		}
	})
}

func TestNativeStream(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	status, hdr, body := h.do("POST", "/ai/run/"+modelStories, "alice", `{"prompt":"Once","stream":true}`)
	if status != http.StatusOK {
		t.Fatalf("status %d: %s", status, body)
	}
	if ct := hdr.Get("Content-Type"); ct != "text/event-stream" {
		t.Errorf("Content-Type %q", ct)
	}
	job := h.lastJob()
	evs := parseSSE(t, body)
	u := job.PromptTokens
	want := []event{
		{data: `{"response":"Hello"}`},
		{data: `{"response":" world"}`},
		{data: `{"response":"","usage":{"prompt_tokens":` + itoa(u) + `,"completion_tokens":2,"total_tokens":` + itoa(u+2) + `}}`},
		{data: "[DONE]"},
	}
	if !reflect.DeepEqual(evs, want) {
		t.Errorf("events\n got %q\nwant %q", evs, want)
	}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

func TestStreamBreaksWithErrorEvent(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	h.setBehaviour(func(ctx context.Context, h *harness, job *queue.Job, rp *queue.Replier) {
		_ = rp.Token(ctx, "Once", nil)
		_ = rp.Fail(ctx, queue.ErrKindTimeout, "deadline passed")
	})
	for _, c := range []struct {
		name, path, body string
		check            func(t *testing.T, data string)
	}{
		{"native", "/ai/run/" + modelStories, `{"prompt":"x","stream":true}`, func(t *testing.T, data string) {
			code, msg := nativeErr(t, []byte(data))
			if code != 3007 || msg != "deadline passed" {
				t.Errorf("error event %d %q", code, msg)
			}
		}},
		{"openai", "/v1/chat/completions", `{"model":"` + modelStories + `","messages":[{"role":"user","content":"x"}],"stream":true}`,
			func(t *testing.T, data string) {
				typ, code, _ := openAIErr(t, []byte(data))
				if typ != "server_error" || code != "timeout" {
					t.Errorf("error event %s %s", typ, code)
				}
			}},
	} {
		t.Run(c.name, func(t *testing.T) {
			status, _, body := h.do("POST", c.path, "alice", c.body)
			if status != http.StatusOK {
				t.Fatalf("status %d: %s", status, body)
			}
			evs := parseSSE(t, body)
			if len(evs) < 2 {
				t.Fatalf("events %q", evs)
			}
			last := evs[len(evs)-1]
			if last.name != "error" {
				t.Fatalf("last event %q, want an error event", last)
			}
			for _, e := range evs {
				if e.data == "[DONE]" {
					t.Errorf("a broken stream must not end with [DONE]: %q", evs)
				}
			}
			if !strings.Contains(evs[0].data, "Once") && !strings.Contains(evs[1].data, "Once") {
				t.Errorf("the token before the error is missing: %q", evs)
			}
			c.check(t, last.data)
		})
	}
}

package edge

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/bulkhead-ai/bulkhead/queue"
)

// TestChoices: n 3 runs three jobs, choice i with the request's seed + i,
// the first queued before the others; the answer has the three choices in
// index order, each with its seed, and their usage summed.
func TestChoices(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	before := h.jobCount()
	status, _, b := h.do("POST", "/v1/chat/completions", "alice",
		`{"model":"`+modelStories+`","messages":[{"role":"user","content":"Hi"}],"n":3,"seed":5,"max_tokens":4}`)
	if status != 200 {
		t.Fatalf("status %d: %s", status, b)
	}
	h.mu.Lock()
	jobs := append([]*queue.Job(nil), h.jobs[before:]...)
	h.mu.Unlock()
	if len(jobs) != 3 {
		t.Fatalf("%d jobs, want 3", len(jobs))
	}
	var got struct {
		ID      string `json:"id"`
		Choices []struct {
			Index   int     `json:"index"`
			Seed    *uint64 `json:"seed"`
			Finish  string  `json:"finish_reason"`
			Message struct {
				Content string `json:"content"`
			} `json:"message"`
		} `json:"choices"`
		Usage openAIUsage `json:"usage"`
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if got.ID != "chatcmpl-"+jobs[0].ID || len(got.Choices) != 3 {
		t.Fatalf("answer %s", b)
	}
	prompt := 0
	for i, c := range got.Choices {
		if c.Index != i || c.Seed == nil || *c.Seed != uint64(5+i) || c.Message.Content != "Hello world" || c.Finish != "stop" {
			t.Errorf("choice %d: %+v", i, c)
		}
		if jobs[i].ID != choiceID(jobs[0].ID, i) || jobs[i].Sampling.Seed != uint64(5+i) || !jobs[i].CachePrefix || jobs[i].Prompt != jobs[0].Prompt {
			t.Errorf("job %d: id %s seed %d cache %v", i, jobs[i].ID, jobs[i].Sampling.Seed, jobs[i].CachePrefix)
		}
		prompt += jobs[i].PromptTokens
	}
	if got.Usage.PromptTokens != prompt || got.Usage.CompletionTokens != 6 || got.Usage.TotalTokens != prompt+6 {
		t.Errorf("usage %+v, want the three choices' summed", got.Usage)
	}

	t.Run("completions", func(t *testing.T) {
		status, _, b := h.do("POST", "/v1/completions", "alice", `{"model":"`+modelStories+`","prompt":"Once","n":2,"max_tokens":4}`)
		var got textCompletion
		if status != 200 || json.Unmarshal(b, &got) != nil || len(got.Choices) != 2 || got.Choices[1].Index != 1 ||
			got.Choices[1].Seed == nil || *got.Choices[1].Seed != 1 || got.Choices[1].Text != "Hello world" {
			t.Fatalf("status %d: %s", status, b)
		}
	})
}

// TestChoicesStream: every choice's chunks carry its index, each choice
// begins with its role and ends with its finish reason and seed, and the
// stream ends once: the usage of all choices, then [DONE].
func TestChoicesStream(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	status, _, b := h.do("POST", "/v1/chat/completions", "alice",
		`{"model":"`+modelStories+`","messages":[{"role":"user","content":"Hi"}],"n":2,"stream":true,"stream_options":{"include_usage":true}}`)
	if status != 200 {
		t.Fatalf("status %d: %s", status, b)
	}
	evs := parseSSE(t, b)
	if len(evs) == 0 || evs[len(evs)-1].data != "[DONE]" || strings.Count(string(b), "[DONE]") != 1 {
		t.Fatalf("events %q", evs)
	}
	text := map[int]string{}
	roles, finishes := map[int]int{}, map[int]int{}
	var usage *openAIUsage
	for i, ev := range evs[:len(evs)-1] {
		var c struct {
			Choices []struct {
				Index int `json:"index"`
				Delta struct {
					Role    string  `json:"role"`
					Content *string `json:"content"`
				} `json:"delta"`
				Finish *string `json:"finish_reason"`
				Seed   *uint64 `json:"seed"`
			} `json:"choices"`
			Usage *openAIUsage `json:"usage"`
		}
		if err := json.Unmarshal([]byte(ev.data), &c); err != nil {
			t.Fatalf("chunk %d: %v", i, err)
		}
		if c.Usage != nil {
			if i != len(evs)-2 || usage != nil {
				t.Fatalf("usage in chunk %d of %d", i, len(evs)-1)
			}
			usage = c.Usage
		}
		for _, ch := range c.Choices {
			if finishes[ch.Index] > 0 {
				t.Errorf("choice %d: a chunk after its finish", ch.Index)
			}
			if ch.Delta.Role == "assistant" {
				roles[ch.Index]++
			}
			if ch.Delta.Content != nil {
				text[ch.Index] += *ch.Delta.Content
			}
			if ch.Finish != nil {
				finishes[ch.Index]++
				if *ch.Finish != "stop" || ch.Seed == nil || *ch.Seed != uint64(ch.Index) {
					t.Errorf("choice %d ends %v with seed %v", ch.Index, *ch.Finish, ch.Seed)
				}
			}
		}
	}
	for i := range 2 {
		if roles[i] != 1 || finishes[i] != 1 || text[i] != "Hello world" {
			t.Errorf("choice %d: %d role chunks, %d finish chunks, text %q", i, roles[i], finishes[i], text[i])
		}
	}
	if usage == nil || usage.CompletionTokens != 4 {
		t.Errorf("usage %+v, want both choices' 4 completion tokens", usage)
	}
}

// TestChoicesRefused: n outside [1, 8], n with tools, and a choice that
// fails, which fails the request (its status) and cancels the others.
func TestChoicesRefused(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	for _, tc := range []struct{ name, body, want string }{
		{"n 9", `"n":9`, "n"},
		{"n 0", `"n":0`, "n"},
		{"n with tools", `"n":2,"tools":[{"type":"function","function":{"name":"f"}}]`, "n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, _, b := h.do("POST", "/v1/chat/completions", "alice", `{"model":"`+modelStories+`","messages":[{"role":"user","content":"Hi"}],`+tc.body+`}`)
			var e struct {
				Error struct {
					Param string `json:"param"`
				} `json:"error"`
			}
			if status != 400 || json.Unmarshal(b, &e) != nil || e.Error.Param != tc.want {
				t.Fatalf("status %d: %s, want 400 naming %q", status, b, tc.want)
			}
		})
	}
	t.Run("a choice fails", func(t *testing.T) {
		ok := reply("Hello", " world")
		h.setBehaviour(func(ctx context.Context, h *harness, job *queue.Job, rp *queue.Replier) {
			if strings.HasSuffix(job.ID, "-c1") {
				_ = rp.Fail(ctx, queue.ErrKindPromptTooLong, "too long for this worker")
				return
			}
			ok(ctx, h, job, rp)
		})
		defer h.setBehaviour(ok)
		status, _, b := h.do("POST", "/v1/chat/completions", "alice", `{"model":"`+modelStories+`","messages":[{"role":"user","content":"Hi"}],"n":3}`)
		if status == http.StatusOK || !strings.Contains(string(b), "too long") {
			t.Fatalf("status %d: %s, want the failing choice's error", status, b)
		}
	})
}

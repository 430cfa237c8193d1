package edge

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/bulkhead-ai/bulkhead/edge/quota"
	"github.com/bulkhead-ai/bulkhead/models/testkit"
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

// TestChoicesRefused: n outside [1, 8], with or without tools, and a
// choice that fails, which fails the request (its status) and cancels the
// others.
func TestChoicesRefused(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	for _, tc := range []struct{ name, body, want string }{
		{"n 9", `"n":9`, "n"},
		{"n 0", `"n":0`, "n"},
		{"n 9 with tools", `"n":9,"tools":[{"type":"function","function":{"name":"f"}}]`, "n"},
		{"n 0 with tools", `"n":0,"tools":[{"type":"function","function":{"name":"f"}}]`, "n"},
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

// TestChoicesRefusedAtAdmission: a request for n choices refused at
// admission, after its n concurrency slots were taken, gets its error and
// gives the slots back: with a real quota on redis-server and a limit of 2,
// a request for 2 choices runs after each refusal.
func TestChoicesRefusedAtAdmission(t *testing.T) {
	h := newHarness(t, harnessOpts{quota: realQuota(t, quota.Config{MaxConcurrent: 2})})
	chat := func(extra string) string {
		return `{"model":"` + modelStories + `","messages":[{"role":"user","content":"Hi"}],"n":2` + extra + `}`
	}
	for i := range 3 {
		status, _, b := h.do("POST", "/v1/chat/completions", "alice", chat(`,"max_tokens":4000`))
		if status != 400 || !strings.Contains(string(b), "context_length_exceeded") {
			t.Fatalf("refusal %d: status %d: %s, want 400 context_length_exceeded", i, status, b)
		}
		if status, _, b := h.do("POST", "/v1/chat/completions", "alice", chat(`,"max_tokens":4`)); status != 200 {
			t.Fatalf("after refusal %d: status %d: %s", i, status, b)
		}
	}
}

// Tool calls the choices of the tools tests write (Hermes, as hermesCall).
const (
	romeCall = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\", \"unit\": \"c\"}}\n</tool_call>"
	osloCall = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\", \"unit\": \"c\"}}\n</tool_call>"
)

// choiceOf is the choice a job samples: i for a job id ending -ci.
func choiceOf(id string) int {
	for i := 1; i < MaxChoices; i++ {
		if strings.HasSuffix(id, fmt.Sprintf("-c%d", i)) {
			return i
		}
	}
	return 0
}

// takeTurns answers the jobs of one request with several choices: choice i
// writes outs[i] in frames of size bytes, the choices taking turns frame by
// frame (a choice that ended passes its turns on), so that their frames
// reach the edge interleaved.
func takeTurns(size int, outs ...string) behaviour {
	turns := make([]chan struct{}, len(outs)) // the one turn token, held by one channel
	for i := range turns {
		turns[i] = make(chan struct{}, 1)
	}
	turns[0] <- struct{}{}
	var mu sync.Mutex // guards ended
	ended := make([]bool, len(outs))
	pass := func(i int) {
		mu.Lock()
		defer mu.Unlock()
		for k := 1; k <= len(outs); k++ {
			if j := (i + k) % len(outs); !ended[j] {
				turns[j] <- struct{}{}
				return
			}
		}
	}
	return func(ctx context.Context, h *harness, job *queue.Job, rp *queue.Replier) {
		i := choiceOf(job.ID)
		out := outs[i]
		var frames []string
		for len(out) > size {
			frames, out = append(frames, out[:size]), out[size:]
		}
		frames = append(frames, out)
		for k := 0; k <= len(frames); k++ {
			select {
			case <-turns[i]:
			case <-ctx.Done():
				return
			}
			var err error
			if k < len(frames) {
				err = rp.Token(ctx, frames[k], []int32{1})
			} else {
				mu.Lock()
				ended[i] = true
				mu.Unlock()
				err = rp.Final(ctx, "", "stop", queue.Usage{PromptTokens: job.PromptTokens, CompletionTokens: len(frames)})
			}
			pass(i)
			if err != nil {
				return // the request ended: the edge cancelled this choice
			}
		}
	}
}

// frameCount is how many token frames takeTurns cuts out into.
func frameCount(out string, size int) int { return max(1, (len(out)+size-1)/size) }

// cities are the city arguments of calls, in order.
func cities(t *testing.T, calls []openAIToolCall) []string {
	t.Helper()
	var out []string
	for _, c := range calls {
		var args struct {
			City string `json:"city"`
		}
		if c.Type != "function" || c.Function.Name != "get_weather" || json.Unmarshal([]byte(c.Function.Arguments), &args) != nil {
			t.Errorf("call %+v", c)
		}
		out = append(out, args.City)
	}
	return out
}

// TestChoicesTools: n 3 with tools, each choice's output parsed for calls
// on its own: its content, its calls (ids unique across the answer), its
// finish_reason (tool_calls only where it called one), its seed; usage is
// summed. parallel_tool_calls false and tool_choice hold per choice.
func TestChoicesTools(t *testing.T) {
	h := newChatHarness(t)
	tools := `,"tools":` + weatherTool
	outs := []string{hermesCall, "It is sunny in Paris.", romeCall + "\n" + osloCall}
	type choice struct {
		Index   int     `json:"index"`
		Seed    *uint64 `json:"seed"`
		Finish  string  `json:"finish_reason"`
		Message struct {
			Role      string           `json:"role"`
			Content   *string          `json:"content"`
			ToolCalls []openAIToolCall `json:"tool_calls"`
		} `json:"message"`
	}
	answer := func(t *testing.T, extra string) []choice {
		t.Helper()
		h.setBehaviour(takeTurns(5, outs...))
		before := h.jobCount()
		st, _, b := h.do("POST", "/v1/chat/completions", "alice", chatBody(modelQwenTools, "Weather in Paris, Rome and Oslo?", tools+`,"n":3,"seed":7`+extra))
		var got struct {
			Choices []choice    `json:"choices"`
			Usage   openAIUsage `json:"usage"`
		}
		if st != 200 || json.Unmarshal(b, &got) != nil || len(got.Choices) != 3 {
			t.Fatalf("status %d: %s", st, b)
		}
		h.mu.Lock()
		jobs := h.jobs[before:]
		prompt := 0
		for _, j := range jobs {
			prompt += j.PromptTokens
			if !strings.Contains(j.Prompt, "<tools>") {
				t.Errorf("job %s: the prompt lacks the tools", j.ID)
			}
		}
		h.mu.Unlock()
		frames := 0
		for _, o := range outs {
			frames += frameCount(o, 5)
		}
		if len(jobs) != 3 || got.Usage.PromptTokens != prompt || got.Usage.CompletionTokens != frames {
			t.Errorf("%d jobs, usage %+v, want 3 jobs and usage %d+%d", len(jobs), got.Usage, prompt, frames)
		}
		for i, c := range got.Choices {
			if c.Index != i || c.Seed == nil || *c.Seed != uint64(7+i) || c.Message.Role != "assistant" {
				t.Errorf("choice %d: index %d seed %v role %q", i, c.Index, c.Seed, c.Message.Role)
			}
		}
		return got.Choices
	}

	cs := answer(t, "")
	ids := map[string]bool{}
	for i, want := range []struct {
		content *string
		cities  []string
		finish  string
	}{
		{ptr("Let me check."), []string{"Paris"}, "tool_calls"},
		{ptr("It is sunny in Paris."), nil, "stop"},
		{nil, []string{"Rome", "Oslo"}, "tool_calls"},
	} {
		c := cs[i]
		if got := cities(t, c.Message.ToolCalls); !slices.Equal(got, want.cities) || c.Finish != want.finish ||
			(c.Message.Content == nil) != (want.content == nil) || (want.content != nil && *c.Message.Content != *want.content) {
			t.Errorf("choice %d: content %v calls %v finish %q, want %v %v %q", i, c.Message.Content, got, c.Finish, want.content, want.cities, want.finish)
		}
		for _, tc := range c.Message.ToolCalls {
			if !strings.HasPrefix(tc.ID, "call_") || ids[tc.ID] || tc.Index != nil {
				t.Errorf("choice %d: call id %q (index %v) missing, repeated or indexed", i, tc.ID, tc.Index)
			}
			ids[tc.ID] = true
		}
	}

	t.Run("parallel_tool_calls false", func(t *testing.T) {
		cs := answer(t, `,"parallel_tool_calls":false`)
		for i, want := range [][]string{{"Paris"}, nil, {"Rome"}} {
			if got := cities(t, cs[i].Message.ToolCalls); !slices.Equal(got, want) {
				t.Errorf("choice %d: calls %v, want %v", i, got, want)
			}
		}
	})
	t.Run("named function", func(t *testing.T) {
		// A forced call is constrained to {"name":...,"parameters":{...}}
		// (structured.go), whatever the model's own format.
		h.setBehaviour(takeTurns(5, `{"name":"get_weather","parameters":{"city":"Paris"}}`, `{"name":"get_weather","parameters":{"city":"Rome"}}`))
		st, _, b := h.do("POST", "/v1/chat/completions", "alice", chatBody(modelQwenTools, "Weather?", tools+`,"n":2,"tool_choice":{"type":"function","function":{"name":"get_weather"}}`))
		var got struct {
			Choices []choice `json:"choices"`
		}
		if st != 200 || json.Unmarshal(b, &got) != nil || len(got.Choices) != 2 {
			t.Fatalf("%d %s", st, b)
		}
		for i, want := range []string{"Paris", "Rome"} {
			if c := got.Choices[i]; c.Finish != "tool_calls" || !slices.Equal(cities(t, c.Message.ToolCalls), []string{want}) {
				t.Errorf("choice %d: %+v, want a call for %s", i, c, want)
			}
		}
	})
	t.Run("tool_choice required, one choice answers in text", func(t *testing.T) {
		for _, stream := range []string{"", `,"stream":true`} {
			h.setBehaviour(takeTurns(5, `{"name":"get_weather","parameters":{"city":"Paris"}}`, "It is sunny.", `{"name":"get_weather","parameters":{"city":"Rome"}}`))
			st, _, b := h.do("POST", "/v1/chat/completions", "alice", chatBody(modelQwenTools, "Weather?", tools+`,"n":3,"tool_choice":"required"`+stream))
			if stream == "" {
				if _, _, msg := openAIErr(t, b); st != 500 || !strings.Contains(msg, "tool_choice") {
					t.Fatalf("%d %s", st, b)
				}
				continue
			}
			evs := parseSSE(t, b)
			if st != 200 || len(evs) == 0 || evs[len(evs)-1].name != "error" || !strings.Contains(evs[len(evs)-1].data, "tool_choice") ||
				strings.Count(string(b), "event: error") != 1 || strings.Contains(string(b), "[DONE]") {
				t.Fatalf("stream %d %s", st, b)
			}
		}
	})
}

// streamedChoice is what the chunks of one choice of a stream add up to.
type streamedChoice struct {
	roles, finishes int
	text            string
	calls           []openAIToolCall
	finish          string
	seed            *uint64
}

// streamedChoices adds up a chat stream's chunks by choice, checking that no
// chunk of a choice follows its finish and that the stream ends once, with
// [DONE].
func streamedChoices(t *testing.T, b []byte) (map[int]*streamedChoice, *openAIUsage) {
	t.Helper()
	evs := parseSSE(t, b)
	if len(evs) == 0 || evs[len(evs)-1].data != "[DONE]" || strings.Count(string(b), "[DONE]") != 1 {
		t.Fatalf("events %q", evs)
	}
	out := map[int]*streamedChoice{}
	var usage *openAIUsage
	for i, ev := range evs[:len(evs)-1] {
		var c struct {
			Choices []struct {
				Index int `json:"index"`
				Delta struct {
					Role      string           `json:"role"`
					Content   *string          `json:"content"`
					ToolCalls []openAIToolCall `json:"tool_calls"`
				} `json:"delta"`
				Finish *string `json:"finish_reason"`
				Seed   *uint64 `json:"seed"`
			} `json:"choices"`
			Usage *openAIUsage `json:"usage"`
		}
		if ev.name != "" || json.Unmarshal([]byte(ev.data), &c) != nil {
			t.Fatalf("event %d: %+v", i, ev)
		}
		if c.Usage != nil {
			usage = c.Usage
		}
		for _, ch := range c.Choices {
			sc := out[ch.Index]
			if sc == nil {
				sc = &streamedChoice{}
				out[ch.Index] = sc
			}
			if sc.finishes > 0 {
				t.Errorf("choice %d: a chunk after its finish", ch.Index)
			}
			if ch.Delta.Role == "assistant" {
				sc.roles++
			}
			if ch.Delta.Content != nil {
				sc.text += *ch.Delta.Content
			}
			sc.calls = append(sc.calls, ch.Delta.ToolCalls...)
			if ch.Finish != nil {
				sc.finishes++
				sc.finish, sc.seed = *ch.Finish, ch.Seed
			}
		}
	}
	return out, usage
}

// TestChoicesToolsStream: n 2 with tools streamed, the choices' frames
// interleaved: each choice's text and tool_calls deltas carry its index,
// its calls are numbered from 0 within it and never mix with the other's,
// each ends with its own finish_reason, and the usage of both ends the
// stream. parallel_tool_calls false drops the later calls of each choice.
func TestChoicesToolsStream(t *testing.T) {
	h := newChatHarness(t)
	tools := `,"tools":` + weatherTool
	outs := []string{hermesCall, "Checking both.\n" + romeCall + "\n" + osloCall}
	texts := []string{"Let me check.", "Checking both."}
	// A forced call is constrained to {"name":...,"parameters":{...}}
	// (structured.go), one call, whatever the model's own format.
	forced := []string{`{"name":"get_weather","parameters":{"city":"Paris"}}`, `{"name":"get_weather","parameters":{"city":"Rome"}}`}
	for _, tc := range []struct {
		name, extra string
		outs, texts []string
		want        [2][]string
	}{
		{"parallel", "", outs, texts, [2][]string{{"Paris"}, {"Rome", "Oslo"}}},
		{"parallel_tool_calls false", `,"parallel_tool_calls":false`, outs, texts, [2][]string{{"Paris"}, {"Rome"}}},
		{"tool_choice required", `,"tool_choice":"required"`, forced, []string{"", ""}, [2][]string{{"Paris"}, {"Rome"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h.setBehaviour(takeTurns(3, tc.outs...))
			st, _, b := h.do("POST", "/v1/chat/completions", "alice",
				chatBody(modelQwenTools, "Weather in Paris, Rome and Oslo?", tools+`,"n":2,"stream":true,"stream_options":{"include_usage":true}`+tc.extra))
			if st != 200 {
				t.Fatalf("status %d: %s", st, b)
			}
			got, usage := streamedChoices(t, b)
			ids := map[string]bool{}
			for i, text := range tc.texts {
				c := got[i]
				if c == nil || c.roles != 1 || c.finishes != 1 || c.finish != "tool_calls" || c.seed == nil || *c.seed != uint64(i) || c.text != text {
					t.Fatalf("choice %d: %+v, want text %q ending in tool_calls", i, c, text)
				}
				if cs := cities(t, c.calls); !slices.Equal(cs, tc.want[i]) {
					t.Errorf("choice %d: calls %v, want %v", i, cs, tc.want[i])
				}
				for k, call := range c.calls {
					if call.Index == nil || *call.Index != k || !strings.HasPrefix(call.ID, "call_") || ids[call.ID] {
						t.Errorf("choice %d call %d: index %v id %q", i, k, call.Index, call.ID)
					}
					ids[call.ID] = true
				}
			}
			if len(got) != 2 {
				t.Errorf("chunks for %d choices, want 2", len(got))
			}
			if frames := frameCount(tc.outs[0], 3) + frameCount(tc.outs[1], 3); usage == nil || usage.CompletionTokens != frames {
				t.Errorf("usage %+v, want both choices' %d completion tokens", usage, frames)
			}
		})
	}
}

// TestOpenAISDKChoicesTools: OpenAI's official Go SDK reads n 2 with
// tools, whole and streamed (its accumulator gathers each choice's calls
// by index).
func TestOpenAISDKChoicesTools(t *testing.T) {
	h := newChatHarness(t)
	ctx := context.Background()
	cl := openai.NewClient(option.WithBaseURL(h.http.URL+"/v1"), option.WithAPIKey("alice"), option.WithMaxRetries(0))
	params := openai.ChatCompletionNewParams{
		Model:    modelQwenTools,
		N:        openai.Int(2),
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Weather in Paris, Rome and Oslo?")},
		Tools: []openai.ChatCompletionToolUnionParam{openai.ChatCompletionFunctionTool(openai.FunctionDefinitionParam{
			Name:       "get_weather",
			Parameters: openai.FunctionParameters{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}},
		})},
	}
	outs := []string{hermesCall, romeCall + "\n" + osloCall}
	want := [][]string{{"Paris"}, {"Rome", "Oslo"}}
	check := func(how string, choices []openai.ChatCompletionChoice) {
		t.Helper()
		if len(choices) != 2 {
			t.Fatalf("%s: %d choices", how, len(choices))
		}
		for i, c := range choices {
			var got []openAIToolCall
			for _, tc := range c.Message.ToolCalls {
				got = append(got, openAIToolCall{Type: string(tc.Type), Function: openAIFunctionCall{Name: tc.Function.Name, Arguments: tc.Function.Arguments}})
			}
			if c.Index != int64(i) || c.FinishReason != "tool_calls" || !slices.Equal(cities(t, got), want[i]) {
				t.Errorf("%s: choice %d: index %d finish %q calls %v, want %v", how, i, c.Index, c.FinishReason, cities(t, got), want[i])
			}
		}
	}
	h.setBehaviour(takeTurns(4, outs...))
	res, err := cl.Chat.Completions.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	check("whole", res.Choices)

	h.setBehaviour(takeTurns(4, outs...))
	stream := cl.Chat.Completions.NewStreaming(ctx, params)
	var acc openai.ChatCompletionAccumulator
	for stream.Next() {
		acc.AddChunk(stream.Current())
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	check("streamed", acc.Choices)
}

// TestChoicesRoutedAfterTheFirst: choices 1 and up are routed once choice
// 0's first token arrived, by what the edge knows then. Here the edge knew
// one worker when the request came, so choice 0 took the shared queue; a
// second worker announced itself before choice 0's first token, and the
// first had announced the prompt's prefix: every other choice goes to the
// worker holding the prompt. Routed with choice 0, they took the shared
// queue too, where any worker could take them.
func TestChoicesRoutedAfterTheFirst(t *testing.T) {
	h := newHarness(t, harnessOpts{routed: true})
	announce := func(subj string, v any) { // also from the worker's goroutine: no Fatal
		t.Helper()
		b, err := json.Marshal(v)
		if err == nil {
			err = h.nc.Publish(subj, b)
		}
		if err != nil {
			t.Error(err)
		}
	}
	status := func(id string) queue.WorkerStatus {
		return queue.WorkerStatus{Worker: id, MaxBatch: 16, Pages: 100, FreePages: 100, PageSize: 16}
	}
	body := func(n int) string {
		return fmt.Sprintf(`{"model":"%s","messages":[{"role":"user","content":"%s"}],"n":%d,"max_tokens":2}`,
			modelStories, strings.Repeat("Tell me a story about a cat. ", 8), n)
	}
	if status, _, b := h.do("POST", "/v1/chat/completions", "alice", body(1)); status != 200 {
		t.Fatalf("%d %s", status, b)
	}
	prompt := h.lastJob().Prompt // the rendered prompt, as a worker announces it
	announce(queue.PrefixSubject(modelStories), queue.PrefixNotice{Worker: "w1", Tenant: queue.TenantToken("alice"), Keys: queue.PrefixKeys("alice", prompt)})
	announce(queue.StatusSubject(modelStories), status("w1"))
	testkit.Poll(t, 5*time.Second, testkit.Cond("one worker announced", func() bool { return len(h.router.Workers(modelStories)) == 1 }))
	h.setBehaviour(func(ctx context.Context, h *harness, job *queue.Job, rp *queue.Replier) {
		if !strings.Contains(job.ID, "-c") { // choice 0: a second worker comes before its first token
			announce(queue.StatusSubject(modelStories), status("w2"))
			for deadline := time.Now().Add(5 * time.Second); len(h.router.Workers(modelStories)) < 2; time.Sleep(time.Millisecond) {
				if time.Now().After(deadline) {
					t.Error("the second worker's announcement never reached the router")
					break
				}
			}
		}
		reply("Hello", " world")(ctx, h, job, rp)
	})
	before := h.jobCount()
	if status, _, b := h.do("POST", "/v1/chat/completions", "alice", body(3)); status != 200 {
		t.Fatalf("%d %s", status, b)
	}
	h.mu.Lock()
	jobs := slices.Clone(h.jobs[before:])
	h.mu.Unlock()
	if len(jobs) != 3 {
		t.Fatalf("%d jobs, want 3", len(jobs))
	}
	for _, job := range jobs {
		want := "w1"
		if !strings.Contains(job.ID, "-c") {
			want = "" // one worker known: the shared queue
		}
		if job.Route != want {
			t.Errorf("job %s routed to %q, want %q", job.ID, job.Route, want)
		}
	}
}

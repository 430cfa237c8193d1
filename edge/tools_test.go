package edge

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

const weatherTool = `[{"type":"function","function":{"name":"get_weather","description":"Current weather for a city","parameters":{"type":"object","properties":{"city":{"type":"string","description":"City name"},"unit":{"type":"string","enum":["c","f"]}},"required":["city"]}}}]`

// hermesCall is what a Qwen model writes to call get_weather.
const hermesCall = "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"c\"}}\n</tool_call>"

// chunks answers with out cut into frames of n bytes.
func chunks(out string, n int) behaviour {
	var parts []string
	for len(out) > n {
		parts = append(parts, out[:n])
		out = out[n:]
	}
	return reply(append(parts, out)...)
}

func TestOpenAIToolCalls(t *testing.T) {
	h := newChatHarness(t)
	tools := `,"tools":` + weatherTool
	for _, n := range []int{1, 3, 7, 1000} {
		h.setBehaviour(chunks(hermesCall, n))
		st, _, b := h.do("POST", "/v1/chat/completions", "alice", chatBody(modelQwenTools, "Weather in Paris?", tools))
		if st != 200 {
			t.Fatalf("status %d: %s", st, b)
		}
		var res struct {
			Choices []struct {
				Message struct {
					Content   *string          `json:"content"`
					ToolCalls []openAIToolCall `json:"tool_calls"`
				} `json:"message"`
				FinishReason string `json:"finish_reason"`
			} `json:"choices"`
		}
		if err := json.Unmarshal(b, &res); err != nil {
			t.Fatal(err)
		}
		c := res.Choices[0]
		if c.FinishReason != "tool_calls" || c.Message.Content == nil || *c.Message.Content != "Let me check." || len(c.Message.ToolCalls) != 1 {
			t.Fatalf("frames of %d: %s", n, b)
		}
		tc := c.Message.ToolCalls[0]
		if tc.Type != "function" || !strings.HasPrefix(tc.ID, "call_") || tc.Function.Name != "get_weather" || tc.Function.Arguments != `{"city":"Paris","unit":"c"}` || tc.Index != nil {
			t.Fatalf("tool call %+v", tc)
		}
		if !strings.Contains(h.lastJob().Prompt, "<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"get_weather\"") {
			t.Fatalf("the prompt lacks the tools: %q", h.lastJob().Prompt)
		}

		// Streamed: text deltas, then one tool_calls delta, then tool_calls.
		st, _, b = h.do("POST", "/v1/chat/completions", "alice", chatBody(modelQwenTools, "Weather in Paris?", tools+`,"stream":true`))
		if st != 200 {
			t.Fatalf("stream status %d: %s", st, b)
		}
		evs := parseSSE(t, b)
		var text strings.Builder
		var calls []openAIToolCall
		finish := ""
		for _, e := range evs[:len(evs)-1] {
			var ch chatChunk
			var raw struct {
				Choices []struct {
					Delta struct {
						Content   *string          `json:"content"`
						ToolCalls []openAIToolCall `json:"tool_calls"`
					} `json:"delta"`
					FinishReason *string `json:"finish_reason"`
				} `json:"choices"`
			}
			if e.name != "" || json.Unmarshal([]byte(e.data), &ch) != nil || json.Unmarshal([]byte(e.data), &raw) != nil {
				t.Fatalf("event %+v", e)
			}
			d := raw.Choices[0]
			if d.Delta.Content != nil {
				text.WriteString(*d.Delta.Content)
			}
			calls = append(calls, d.Delta.ToolCalls...)
			if d.FinishReason != nil {
				finish = *d.FinishReason
			}
		}
		if evs[len(evs)-1].data != "[DONE]" || text.String() != "Let me check." || finish != "tool_calls" || len(calls) != 1 ||
			calls[0].Index == nil || *calls[0].Index != 0 || calls[0].Function.Arguments != `{"city":"Paris","unit":"c"}` {
			t.Fatalf("frames of %d: text %q finish %q calls %+v", n, text.String(), finish, calls)
		}
	}

	t.Run("malformed call is text", func(t *testing.T) {
		bad := "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \n</tool_call>"
		h.setBehaviour(chunks(bad, 4))
		st, _, b := h.do("POST", "/v1/chat/completions", "alice", chatBody(modelQwenTools, "Weather?", tools))
		m := mustJSON(t, b)
		msg := m["choices"].([]any)[0].(map[string]any)
		if st != 200 || msg["finish_reason"] != "stop" || msg["message"].(map[string]any)["content"] != bad || msg["message"].(map[string]any)["tool_calls"] != nil {
			t.Fatalf("%d %s", st, b)
		}
	})
}

func TestToolChoice(t *testing.T) {
	h := newChatHarness(t)
	tools := `,"tools":` + weatherTool
	t.Run("none: no tools in the prompt, output is text", func(t *testing.T) {
		h.setBehaviour(reply(hermesCall))
		st, _, b := h.do("POST", "/v1/chat/completions", "alice", chatBody(modelQwenTools, "Hi", tools+`,"tool_choice":"none"`))
		if st != 200 || strings.Contains(h.lastJob().Prompt, "<tools>") || !strings.Contains(string(b), `"finish_reason":"stop"`) || strings.Contains(string(b), `"tool_calls"`) {
			t.Fatalf("%d %s / %q", st, b, h.lastJob().Prompt)
		}
	})
	t.Run("required but the model answered in text", func(t *testing.T) {
		h.setBehaviour(reply("It is sunny."))
		st, _, b := h.do("POST", "/v1/chat/completions", "alice", chatBody(modelQwenTools, "Hi", tools+`,"tool_choice":"required"`))
		if _, _, msg := openAIErr(t, b); st != 500 || !strings.Contains(msg, "tool_choice") {
			t.Fatalf("%d %s", st, b)
		}
		st, _, b = h.do("POST", "/v1/chat/completions", "alice", chatBody(modelQwenTools, "Hi", tools+`,"tool_choice":"required","stream":true`))
		evs := parseSSE(t, b)
		if st != 200 || evs[len(evs)-1].name != "error" {
			t.Fatalf("stream %d %s", st, b)
		}
	})
	t.Run("named function", func(t *testing.T) {
		// A forced call is constrained to {"name":...,"parameters":{...}}
		// (structured.go), whatever the model's own format.
		h.setBehaviour(reply(`{"name":"get_weather","parameters":{"city":"Paris"}}`))
		st, _, b := h.do("POST", "/v1/chat/completions", "alice", chatBody(modelQwenTools, "Hi", tools+`,"tool_choice":{"type":"function","function":{"name":"get_weather"}}`))
		if st != 200 || !strings.Contains(string(b), `"finish_reason":"tool_calls"`) || !strings.Contains(string(b), `{\"city\":\"Paris\"}`) {
			t.Fatalf("%d %s", st, b)
		}
		if g := h.lastJob().Grammar; g == nil || g.Kind != "json_schema" || !strings.Contains(string(g.Schema), `"const":"get_weather"`) {
			t.Fatalf("job grammar %+v", g)
		}
	})
	for _, bad := range []struct{ name, extra, msg string }{
		{"unknown function", tools + `,"tool_choice":{"type":"function","function":{"name":"nope"}}`, "tool_choice.function.name"},
		{"bad mode", tools + `,"tool_choice":"always"`, "tool_choice"},
		{"required without tools", `,"tool_choice":"required"`, "needs tools"},
		{"tool without function", `,"tools":[{"type":"function"}]`, "tools[0]"},
		{"bad name", `,"tools":[{"type":"function","function":{"name":"a b"}}]`, "tools[0].function.name"},
		{"twice", `,"tools":[{"type":"function","function":{"name":"a"}},{"type":"function","function":{"name":"a"}}]`, "defined twice"},
		{"arguments not JSON", ``, "arguments"},
	} {
		t.Run(bad.name, func(t *testing.T) {
			body := chatBody(modelQwenTools, "Hi", bad.extra)
			if bad.name == "arguments not JSON" {
				body = `{"model":"` + modelQwenTools + `","messages":[{"role":"user","content":"Hi"},{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{nope"}}]}]}`
			}
			st, _, b := h.do("POST", "/v1/chat/completions", "alice", body)
			if _, _, msg := openAIErr(t, b); st != 400 || !strings.Contains(msg, bad.msg) {
				t.Fatalf("%d %s", st, b)
			}
		})
	}
}

func TestNativeToolCalls(t *testing.T) {
	h := newChatHarness(t)
	h.setBehaviour(chunks(hermesCall, 5))
	// Workers AI's own tool shape.
	tools := `,"tools":[{"name":"get_weather","description":"Current weather for a city","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}]`
	st, _, b := h.do("POST", "/ai/run/"+modelQwenTools, "alice", chatBody("", "Weather in Paris?", tools))
	var res struct {
		Result struct {
			Response  string `json:"response"`
			ToolCalls []struct {
				ID        string          `json:"id"`
				Name      string          `json:"name"`
				Arguments json.RawMessage `json:"arguments"`
			} `json:"tool_calls"`
		} `json:"result"`
	}
	if err := json.Unmarshal(b, &res); err != nil || st != 200 {
		t.Fatalf("%d %s", st, b)
	}
	if res.Result.Response != "Let me check." || len(res.Result.ToolCalls) != 1 || res.Result.ToolCalls[0].Name != "get_weather" ||
		string(res.Result.ToolCalls[0].Arguments) != `{"city":"Paris","unit":"c"}` {
		t.Fatalf("%s", b)
	}
	if !strings.Contains(h.lastJob().Prompt, `{"type": "function", "function": {"name": "get_weather", "description"`) {
		t.Fatalf("tools not in OpenAI shape in the prompt: %q", h.lastJob().Prompt)
	}
	st, _, b = h.do("POST", "/ai/run/"+modelQwenTools, "alice", chatBody("", "Weather in Paris?", tools+`,"stream":true`))
	evs := parseSSE(t, b)
	var text strings.Builder
	calls := 0
	for _, e := range evs[:len(evs)-1] {
		var r nativeResult
		if err := json.Unmarshal([]byte(e.data), &r); err != nil {
			t.Fatal(err)
		}
		text.WriteString(r.Response)
		for _, c := range r.ToolCalls {
			if c.Name != "get_weather" || string(c.Arguments) != `{"city":"Paris","unit":"c"}` {
				t.Fatalf("call %+v", c)
			}
			calls++
		}
	}
	if st != 200 || text.String() != "Let me check." || calls != 1 || evs[len(evs)-1].data != "[DONE]" {
		t.Fatalf("%d %s", st, b)
	}
	// Raw prompts skip the template, so they cannot carry tools.
	st, _, b = h.do("POST", "/ai/run/"+modelQwenTools, "alice", `{"prompt":"x","raw":true`+tools+`}`)
	if code, _ := nativeErr(t, b); st != 400 || code != 5004 {
		t.Fatalf("raw with tools: %d %s", st, b)
	}
}

// TestToolRoundTripAtTheEdge: an OpenAI history with an assistant tool call
// (arguments as a JSON string) and the tool's result becomes exactly the
// prompt transformers renders (models/chat/testdata/roundtrip.json).
func TestToolRoundTripAtTheEdge(t *testing.T) {
	h := newChatHarness(t)
	var doc struct {
		Cases []struct {
			Template string `json:"template"`
			Text     string `json:"text"`
		} `json:"cases"`
	}
	b, err := os.ReadFile("../models/chat/testdata/roundtrip.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	want := ""
	for _, c := range doc.Cases {
		if c.Template == "Qwen-Qwen2.5-7B-Instruct.jinja" {
			want = c.Text
		}
	}
	body := `{"model":"` + modelQwenTools + `","tools":` + weatherTool + `,"messages":[` +
		`{"role":"user","content":"What's the weather in Paris?"},` +
		`{"role":"assistant","content":null,"tool_calls":[{"id":"call12345","type":"function","function":{"name":"get_weather","arguments":"{\"city\": \"Paris\", \"unit\": \"c\"}"}}]},` +
		`{"role":"tool","content":"{\"temperature\": 21, \"sky\": \"clear\"}","tool_call_id":"call12345"}]}`
	if st, _, b := h.do("POST", "/v1/chat/completions", "alice", body); st != 200 {
		t.Fatalf("%d %s", st, b)
	}
	if got := h.lastJob().Prompt; got != want {
		t.Fatalf("prompt\n%q\nwant\n%q", got, want)
	}
}

// TestOpenAISDKTools drives tools with OpenAI's official Go SDK: a call,
// the same call streamed, and the follow-up turn with the tool's result.
func TestOpenAISDKTools(t *testing.T) {
	h := newChatHarness(t)
	ctx := context.Background()
	cl := openai.NewClient(option.WithBaseURL(h.http.URL+"/v1"), option.WithAPIKey("alice"), option.WithMaxRetries(0))
	params := openai.ChatCompletionNewParams{
		Model:    modelQwenTools,
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("What's the weather in Paris?")},
		Tools: []openai.ChatCompletionToolUnionParam{openai.ChatCompletionFunctionTool(openai.FunctionDefinitionParam{
			Name: "get_weather", Description: openai.String("Current weather for a city"),
			Parameters: openai.FunctionParameters{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}},
		})},
	}
	h.setBehaviour(chunks(hermesCall, 6))
	res, err := cl.Chat.Completions.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	msg := res.Choices[0].Message
	if res.Choices[0].FinishReason != "tool_calls" || len(msg.ToolCalls) != 1 || msg.ToolCalls[0].Function.Name != "get_weather" ||
		msg.ToolCalls[0].Function.Arguments != `{"city":"Paris","unit":"c"}` {
		t.Fatalf("%+v", res.Choices[0])
	}

	stream := cl.Chat.Completions.NewStreaming(ctx, params)
	var acc openai.ChatCompletionAccumulator
	finished := 0
	for stream.Next() {
		acc.AddChunk(stream.Current())
		if tc, ok := acc.JustFinishedToolCall(); ok && tc.Name == "get_weather" && tc.Arguments == `{"city":"Paris","unit":"c"}` {
			finished++
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if len(acc.Choices) != 1 || acc.Choices[0].FinishReason != "tool_calls" || len(acc.Choices[0].Message.ToolCalls) != 1 {
		t.Fatalf("accumulated %+v (finished %d)", acc.Choices, finished)
	}

	h.setBehaviour(reply("It is 21 °C and clear in Paris."))
	params.Messages = append(params.Messages, msg.ToParam(), openai.ToolMessage(`{"temperature": 21}`, msg.ToolCalls[0].ID))
	res, err = cl.Chat.Completions.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	prompt := h.lastJob().Prompt
	if res.Choices[0].Message.Content != "It is 21 °C and clear in Paris." ||
		!strings.Contains(prompt, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"c\"}}\n</tool_call>") ||
		!strings.Contains(prompt, "<tool_response>\n{\"temperature\": 21}\n</tool_response>") {
		t.Fatalf("answer %+v, prompt %q", res.Choices[0].Message, prompt)
	}
}

// TestParallelToolCallsFalse: with parallel_tool_calls false an answer of
// two calls carries the first only, plain and streamed; by default both.
func TestParallelToolCallsFalse(t *testing.T) {
	h := newChatHarness(t)
	second := "\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\", \"unit\": \"c\"}}\n</tool_call>"
	h.setBehaviour(chunks(hermesCall+second, 5))
	tools := `,"tools":` + weatherTool
	for _, tc := range []struct {
		extra string
		want  []string
	}{
		{"", []string{"Paris", "Rome"}},
		{`,"parallel_tool_calls":true`, []string{"Paris", "Rome"}},
		{`,"parallel_tool_calls":false`, []string{"Paris"}},
	} {
		st, _, b := h.do("POST", "/v1/chat/completions", "alice", chatBody(modelQwenTools, "Weather in Paris and Rome?", tools+tc.extra))
		var res struct {
			Choices []struct {
				Message struct {
					ToolCalls []openAIToolCall `json:"tool_calls"`
				} `json:"message"`
			} `json:"choices"`
		}
		if st != 200 || json.Unmarshal(b, &res) != nil {
			t.Fatalf("%s: %d %s", tc.extra, st, b)
		}
		var got []string
		for _, c := range res.Choices[0].Message.ToolCalls {
			got = append(got, c.Function.Arguments)
		}
		if len(got) != len(tc.want) || !strings.Contains(got[0], tc.want[0]) {
			t.Errorf("%q: calls %v, want the cities %v", tc.extra, got, tc.want)
		}
		st, _, b = h.do("POST", "/v1/chat/completions", "alice", chatBody(modelQwenTools, "Weather in Paris and Rome?", tools+tc.extra+`,"stream":true`))
		if st != 200 {
			t.Fatalf("stream %s: %d %s", tc.extra, st, b)
		}
		if n := strings.Count(string(b), `"function":{"name":"get_weather"`); n != len(tc.want) {
			t.Errorf("%q streamed %d calls, want %d:\n%s", tc.extra, n, len(tc.want), b)
		}
	}
}

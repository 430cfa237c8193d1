package edge

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/bulkhead-ai/bulkhead/queue"
)

func TestParseResponseFormat(t *testing.T) {
	tests := []struct {
		name   string
		raw    string
		native bool
		kind   string // "" for no grammar
		field  string // refusal's field; "" for accepted
		msg    string // in the refusal's message
	}{
		{"absent", ``, false, "", "", ""},
		{"text", `{"type":"text"}`, false, "", "", ""},
		{"json_object", `{"type":"json_object"}`, false, queue.GrammarJSONObject, "", ""},
		{"json_schema", `{"type":"json_schema","json_schema":{"name":"p","schema":{"type":"object","properties":{"a":{"type":"string"}},"required":["a"]},"strict":true}}`, false, queue.GrammarJSONSchema, "", ""},
		{"native json_schema", `{"type":"json_schema","json_schema":{"type":"object","properties":{"a":{"type":"integer"}}}}`, true, queue.GrammarJSONSchema, "", ""},
		{"native json_object", `{"type":"json_object"}`, true, queue.GrammarJSONObject, "", ""},
		{"unknown type", `{"type":"xml"}`, false, "", "response_format.type", "json_schema"},
		{"not an object", `"json"`, false, "", "response_format", "object"},
		{"no name", `{"type":"json_schema","json_schema":{"schema":{}}}`, false, "", "response_format.json_schema.name", "required"},
		{"no schema", `{"type":"json_schema","json_schema":{"name":"x"}}`, false, "", "response_format.json_schema.schema", "required"},
		{"unsupported keyword", `{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"string","format":"email"}}}`, false, "", "response_format.json_schema.schema", `"format"`},
		{"impossible range", `{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"integer","minimum":3,"maximum":1}}}`, false, "", "response_format.json_schema.schema", `"minimum"`},
		{"native unsupported", `{"type":"json_schema","json_schema":{"type":"object","patternProperties":{}}}`, true, "", "response_format.json_schema", `"patternProperties"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g, err := parseResponseFormat(json.RawMessage(tc.raw), tc.native)
			if tc.field != "" {
				var ie *InputError
				if !errors.As(err, &ie) || ie.Field != tc.field || !strings.Contains(ie.Msg, tc.msg) {
					t.Fatalf("err %v, want an InputError on %s mentioning %s", err, tc.field, tc.msg)
				}
				if c := Classify(err); c.Row.Status != 400 || c.Row.Code != 5004 {
					t.Errorf("classified %d/%d, want 400/5004", c.Row.Status, c.Row.Code)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if (g == nil) != (tc.kind == "") || (g != nil && g.Kind != tc.kind) {
				t.Fatalf("grammar %+v, want kind %q", g, tc.kind)
			}
		})
	}
}

func TestToolCallGrammar(t *testing.T) {
	tools := []json.RawMessage{
		json.RawMessage(`{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}`),
		json.RawMessage(`{"type":"function","function":{"name":"noargs"}}`),
	}
	for _, choice := range []toolChoice{{mode: choiceRequired}, {mode: choiceNamed, name: "get_weather"}} {
		g, err := toolCallGrammar(tools, choice)
		if err != nil || g.Kind != queue.GrammarJSONSchema {
			t.Fatalf("%+v: %+v %v", choice, g, err)
		}
		if choice.mode == choiceNamed && strings.Contains(string(g.Schema), "noargs") {
			t.Errorf("named choice's grammar allows other tools: %s", g.Schema)
		}
	}
	bad := []json.RawMessage{json.RawMessage(`{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"d":{"type":"string","format":"date"}}}}}`)}
	_, err := toolCallGrammar(bad, toolChoice{mode: choiceRequired})
	var ie *InputError
	if !errors.As(err, &ie) || ie.Field != "tools[0].function.parameters" || !strings.Contains(ie.Msg, `"format"`) {
		t.Fatalf("err %v", err)
	}
}

// TestStructuredJobs: response_format and forced tool calls become the job's
// grammar on every API, logprobs its flags, and stop next to a grammar is
// refused.
func TestStructuredJobs(t *testing.T) {
	h := newChatHarness(t)
	h.setBehaviour(reply(`{"name":"get_weather","parameters":{"city":"Paris"}}`))
	rf := `,"response_format":{"type":"json_object"}`
	tools := `,"tools":` + weatherTool
	cases := []struct {
		name, path, body, kind string
	}{
		{"chat json_object", "/v1/chat/completions", chatBody(modelQwenTools, "Hi", rf), "json_object"},
		{"completions json_schema", "/v1/completions", `{"model":"` + modelQwenTools + `","prompt":"Hi","response_format":{"type":"json_schema","json_schema":{"name":"n","schema":{"type":"integer"}}}}`, "json_schema"},
		{"native json_schema", "/ai/run/" + modelQwenTools, `{"prompt":"Hi","response_format":{"type":"json_schema","json_schema":{"type":"object","properties":{"a":{"type":"null"}}}}}`, "json_schema"},
		{"native tool_choice required", "/ai/run/" + modelQwenTools, `{"messages":[{"role":"user","content":"Weather?"}],"tool_choice":"required"` + tools + `}`, "json_schema"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st, _, b := h.do("POST", tc.path, "alice", tc.body)
			if st != 200 {
				t.Fatalf("%d %s", st, b)
			}
			if g := h.lastJob().Grammar; g == nil || g.Kind != tc.kind {
				t.Fatalf("job grammar %+v, want %s", g, tc.kind)
			}
			if strings.Contains(tc.name, "tool_choice") && !strings.Contains(string(b), `"tool_calls"`) {
				t.Fatalf("no tool calls: %s", b)
			}
		})
	}
	t.Run("logprobs", func(t *testing.T) {
		st, _, b := h.do("POST", "/v1/chat/completions", "alice", chatBody(modelQwenTools, "Hi", `,"logprobs":true,"top_logprobs":4`))
		if j := h.lastJob(); st != 200 || !j.Logprobs || j.TopLogprobs != 4 {
			t.Fatalf("%d %s / %+v", st, b, j)
		}
	})
	for _, bad := range []struct{ name, path, body, msg string }{
		{"stop with a grammar", "/v1/chat/completions", chatBody(modelQwenTools, "Hi", rf+`,"stop":["x"]`), "stop"},
		{"top_logprobs without logprobs", "/v1/chat/completions", chatBody(modelQwenTools, "Hi", `,"top_logprobs":2`), "top_logprobs"},
		{"top_logprobs above 20", "/v1/chat/completions", chatBody(modelQwenTools, "Hi", `,"logprobs":true,"top_logprobs":21`), "top_logprobs"},
		{"completions logprobs above 20", "/v1/completions", `{"model":"` + modelQwenTools + `","prompt":"Hi","logprobs":21}`, "logprobs"},
		{"tool schema keyword", "/v1/chat/completions", chatBody(modelQwenTools, "Hi", `,"tool_choice":"required","tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"x":{"type":"string","format":"uri"}}}}}]`), `"format"`},
		{"impossible schema", "/v1/chat/completions", chatBody(modelQwenTools, "Hi", `,"response_format":{"type":"json_schema","json_schema":{"name":"n","schema":{"type":"array","minItems":4,"maxItems":2}}}`), `"minItems"`},
	} {
		t.Run(bad.name, func(t *testing.T) {
			st, _, b := h.do("POST", bad.path, "alice", bad.body)
			// 400 with the keyword named; TestParseResponseFormat checks the
			// table row is 5004 (the OpenAI error shape has no numeric code).
			if _, _, msg := openAIErr(t, b); st != 400 || !strings.Contains(msg, bad.msg) {
				t.Fatalf("%d %s", st, b)
			}
		})
	}
}

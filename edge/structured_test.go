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

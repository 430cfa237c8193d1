package chat

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

// TestToolRoundTrip renders tools, a tool call and its result through every
// tool-capable shared template, byte for byte as transformers renders them
// (testdata/gen_roundtrip.py). The call's arguments arrive as OpenAI's JSON
// string and are turned into the object templates expect.
func TestToolRoundTrip(t *testing.T) {
	var doc struct {
		Now      time.Time         `json:"now"`
		Tools    []json.RawMessage `json:"tools"`
		Messages []struct {
			Role       string `json:"role"`
			Content    string `json:"content"`
			ToolCallID string `json:"tool_call_id"`
			ToolCalls  []struct {
				ID       string `json:"id"`
				Function struct {
					Name      string          `json:"name"`
					Arguments json.RawMessage `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"messages"`
		Cases []struct {
			Template string  `json:"template"`
			BOS      string  `json:"bos_token"`
			EOS      string  `json:"eos_token"`
			Text     *string `json:"text"`
			Error    string  `json:"error"`
		} `json:"cases"`
	}
	readJSON(t, "testdata/roundtrip.json", &doc)
	if len(doc.Cases) < 4 {
		t.Fatalf("only %d round-trip cases", len(doc.Cases))
	}
	in := Input{Tools: doc.Tools, AddGenerationPrompt: true, Now: doc.Now}
	for _, m := range doc.Messages {
		msg := Message{Role: m.Role, Content: m.Content, ToolCallID: m.ToolCallID}
		for _, c := range m.ToolCalls {
			// As an OpenAI client sends it: a string holding the JSON.
			args, err := ArgumentsObject(string(c.Function.Arguments))
			if err != nil {
				t.Fatal(err)
			}
			msg.ToolCalls = append(msg.ToolCalls, ToolCall{ID: c.ID, Name: c.Function.Name, Arguments: args})
		}
		in.Messages = append(in.Messages, msg)
	}
	for _, c := range doc.Cases {
		t.Run(strings.TrimSuffix(c.Template, ".jinja"), func(t *testing.T) {
			tmpl := mustCompile(t, c.Template, Config{BOS: c.BOS, EOS: c.EOS})
			p, err := tmpl.Render(context.Background(), in)
			if c.Text == nil {
				var te *TemplateError
				if !errors.As(err, &te) {
					t.Fatalf("Render error %v, want the refusal %q", err, c.Error)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if p.Text() != *c.Text {
				t.Fatalf("Render =\n%q\nwant\n%q", p.Text(), *c.Text)
			}
		})
	}
}

func TestArgumentsObject(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		ok       bool
	}{
		{`{"city":"Paris"}`, `{"city":"Paris"}`, true},
		{``, `{}`, true},
		{`  `, `{}`, true},
		{`[1]`, ``, false},
		{`"x"`, ``, false},
		{`null`, ``, false},
		{`{"a":`, ``, false},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ArgumentsObject(tc.in)
			if !tc.ok {
				if !errors.Is(err, ErrInvalidInput) {
					t.Fatalf("ArgumentsObject(%q) = %s, %v; want ErrInvalidInput", tc.in, got, err)
				}
				return
			}
			if err != nil || string(got) != tc.want {
				t.Fatalf("ArgumentsObject(%q) = %s, %v; want %s", tc.in, got, err, tc.want)
			}
		})
	}
}

package toolcall

import (
	"bytes"
	"encoding/json"
	"io"
	"strings"
)

// Result is model output split into text and tool calls.
type Result struct {
	// Content is the text outside the calls, in order. When there are calls,
	// text that is only whitespace between or around them is dropped.
	Content string
	// Reasoning is text the model wrote for itself (gpt-oss's analysis
	// channel); it is not part of the answer.
	Reasoning string
	Calls     []Call
}

// Parse splits a whole model output. Malformed calls stay in Content as the
// model wrote them.
func Parse(f Format, text string) Result {
	s := NewStream(f)
	evs := append(s.Push(text), s.Finish()...)
	var r Result
	var content, reasoning strings.Builder
	for _, e := range evs {
		content.WriteString(e.Content)
		reasoning.WriteString(e.Reasoning)
		if e.Call != nil {
			r.Calls = append(r.Calls, *e.Call)
		}
	}
	r.Content, r.Reasoning = content.String(), reasoning.String()
	return r
}

// hermesBlock parses the inside of <tool_call>...</tool_call>.
func hermesBlock(body string) (Call, bool) {
	var obj map[string]json.RawMessage
	if err := decodeOne(body, &obj); err != nil {
		return Call{}, false
	}
	return call(obj, "arguments", "parameters")
}

// jsonCalls parses one call object or an array of them, and nothing else.
func jsonCalls(body string, argsKeys ...string) ([]Call, bool) {
	body = strings.TrimSpace(body)
	var objs []map[string]json.RawMessage
	if strings.HasPrefix(body, "[") {
		if err := decodeOne(body, &objs); err != nil || len(objs) == 0 {
			return nil, false
		}
	} else {
		var obj map[string]json.RawMessage
		if err := decodeOne(body, &obj); err != nil {
			return nil, false
		}
		objs = []map[string]json.RawMessage{obj}
	}
	calls := make([]Call, 0, len(objs))
	for _, o := range objs {
		c, ok := call(o, argsKeys...)
		if !ok {
			return nil, false
		}
		calls = append(calls, c)
	}
	return calls, true
}

// llamaCalls parses Llama 3.x's answer: one or more {"name":...,
// "parameters":{...}} objects, separated by ";" or whitespace.
func llamaCalls(text string) ([]Call, bool) {
	text = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(text), "<|python_tag|>"))
	if !strings.HasPrefix(text, "{") {
		return nil, false
	}
	var calls []Call
	for _, part := range splitTop(text) {
		var obj map[string]json.RawMessage
		if err := decodeOne(part, &obj); err != nil {
			return nil, false
		}
		c, ok := call(obj, "parameters", "arguments")
		if !ok {
			return nil, false
		}
		calls = append(calls, c)
	}
	return calls, len(calls) > 0
}

// splitTop splits text at ";" outside JSON strings and brackets.
func splitTop(text string) []string {
	var parts []string
	depth, inStr, esc, start := 0, false, false, 0
	for i := 0; i < len(text); i++ {
		c := text[i]
		switch {
		case esc:
			esc = false
		case inStr && c == '\\':
			esc = true
		case c == '"':
			inStr = !inStr
		case inStr:
		case c == '{' || c == '[':
			depth++
		case c == '}' || c == ']':
			depth--
		case c == ';' && depth == 0:
			parts = append(parts, text[start:i])
			start = i + 1
		}
	}
	if rest := strings.TrimSpace(text[start:]); rest != "" || len(parts) == 0 {
		parts = append(parts, text[start:])
	}
	return parts
}

// decodeOne decodes exactly one JSON value from s.
func decodeOne(s string, v any) error {
	dec := json.NewDecoder(strings.NewReader(s))
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errTrailing
	}
	return nil
}

var errTrailing = bytes.ErrTooLarge // any non-nil error; never shown

// harmony parses gpt-oss output (after the "<|start|>assistant" the
// generation prompt wrote) into events.
func harmony(text string) []Event {
	if !strings.Contains(text, "<|message|>") {
		return []Event{{Content: text}}
	}
	var evs []Event
	for i, msg := range strings.Split(text, "<|start|>") {
		if i > 0 {
			msg = strings.TrimPrefix(msg, "assistant")
		}
		if msg == "" {
			continue
		}
		header, body, ok := strings.Cut(msg, "<|message|>")
		if !ok {
			evs = append(evs, Event{Content: msg})
			continue
		}
		for _, end := range []string{"<|end|>", "<|call|>", "<|return|>"} {
			body, _, _ = strings.Cut(body, end)
		}
		channel, recipient := harmonyHeader(header)
		switch {
		case strings.HasPrefix(recipient, "functions."):
			name := strings.TrimPrefix(recipient, "functions.")
			if args, ok := compactObject(json.RawMessage(body)); ok && name != "" {
				evs = append(evs, Event{Call: &Call{Name: name, Arguments: args}})
			} else {
				evs = append(evs, Event{Content: body})
			}
		case channel == "analysis":
			evs = append(evs, Event{Reasoning: body})
		default:
			evs = append(evs, Event{Content: body})
		}
	}
	return evs
}

// harmonyHeader reads "<|channel|>commentary to=functions.x <|constrain|>json"
// (the recipient may also come before the channel).
func harmonyHeader(h string) (channel, recipient string) {
	h = strings.ReplaceAll(h, "<|constrain|>", " ")
	if _, after, ok := strings.Cut(h, "<|channel|>"); ok {
		if f := strings.Fields(after); len(f) > 0 {
			channel = f[0]
		}
	}
	for _, f := range strings.Fields(strings.ReplaceAll(h, "<|channel|>", " ")) {
		if r, ok := strings.CutPrefix(f, "to="); ok {
			recipient = r
		}
	}
	return channel, recipient
}

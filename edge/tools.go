package edge

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"

	"github.com/bulkhead-ai/bulkhead/models/chat"
	"github.com/bulkhead-ai/bulkhead/models/toolcall"
	"github.com/bulkhead-ai/bulkhead/queue"
)

// Limits on tools.
const maxTools = 128

// toolName is what OpenAI accepts as a function name.
var toolName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// Tool choice modes (OpenAI's tool_choice).
const (
	choiceAuto     = "auto"
	choiceNone     = "none"
	choiceRequired = "required"
	choiceNamed    = "function" // {"type":"function","function":{"name":...}}
)

// toolChoice is a request's tool_choice.
type toolChoice struct {
	mode string // one of the choice modes; "" when there are no tools
	name string // choiceNamed: the function
}

// toolsOn reports whether the model sees tools and its output is parsed for
// calls.
func (in *genInput) toolsOn() bool { return len(in.tools) > 0 && in.toolChoice.mode != choiceNone }

// templateTools are the tools the chat template writes: none for
// tool_choice "none", only the named one for a named choice.
func (in *genInput) templateTools() []json.RawMessage {
	if !in.toolsOn() {
		return nil
	}
	if in.toolChoice.mode != choiceNamed {
		return in.tools
	}
	for _, t := range in.tools {
		if toolFunctionName(t) == in.toolChoice.name {
			return []json.RawMessage{t}
		}
	}
	return nil
}

type wireFunction struct {
	Name        *string         `json:"name"`
	Description json.RawMessage `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
}

type wireTool struct {
	Type     string        `json:"type"`
	Function *wireFunction `json:"function"`
	wireFunction
}

func toolFunctionName(raw json.RawMessage) string {
	var t wireTool
	if json.Unmarshal(raw, &t) != nil || t.Function == nil || t.Function.Name == nil {
		return ""
	}
	return *t.Function.Name
}

// parseTools reads "tools": OpenAI's [{"type":"function","function":{...}}];
// the native API also takes Workers AI's [{"name","description",
// "parameters"}], rewritten to OpenAI's shape with its keys in order.
func parseTools(raw json.RawMessage, native bool) ([]json.RawMessage, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var list []json.RawMessage
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, &InputError{Field: "tools", Msg: "must be an array of tools"}
	}
	if len(list) > maxTools {
		return nil, &InputError{Field: "tools", Msg: fmt.Sprintf("at most %d tools, not %d", maxTools, len(list))}
	}
	out := make([]json.RawMessage, 0, len(list))
	seen := map[string]bool{}
	for i, item := range list {
		field := fmt.Sprintf("tools[%d]", i)
		var t wireTool
		if err := json.Unmarshal(item, &t); err != nil {
			return nil, &InputError{Field: field, Msg: "must be an object"}
		}
		fn := bytes.TrimSpace(item)
		switch {
		case t.Function != nil:
			if t.Type != "function" {
				return nil, &InputError{Field: field + ".type", Msg: `must be "function"`}
			}
			var w struct {
				Function json.RawMessage `json:"function"`
			}
			_ = json.Unmarshal(item, &w)
			fn = bytes.TrimSpace(w.Function)
			t.wireFunction = *t.Function
			field += ".function"
		case native && t.Type == "":
			// Workers AI's own shape: the function itself.
		default:
			return nil, &InputError{Field: field, Msg: `must be {"type":"function","function":{...}}`}
		}
		if t.Name == nil || !toolName.MatchString(*t.Name) {
			return nil, &InputError{Field: field + ".name", Msg: "must be 1 to 64 letters, digits, _ or -"}
		}
		if seen[*t.Name] {
			return nil, &InputError{Field: field + ".name", Msg: fmt.Sprintf("%q is defined twice", *t.Name)}
		}
		seen[*t.Name] = true
		if p := bytes.TrimSpace(t.Parameters); len(p) > 0 && p[0] != '{' && string(p) != "null" {
			return nil, &InputError{Field: field + ".parameters", Msg: "must be a JSON Schema object"}
		}
		if len(fn) == 0 || fn[0] != '{' {
			return nil, &InputError{Field: field, Msg: "must be an object"}
		}
		out = append(out, json.RawMessage(`{"type":"function","function":`+string(fn)+`}`))
	}
	return out, nil
}

// parseToolChoice reads OpenAI's tool_choice: "auto" (the default with
// tools), "none", "required", or {"type":"function","function":{"name":...}}
// naming one of the tools.
func parseToolChoice(raw json.RawMessage, tools []json.RawMessage) (toolChoice, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		if len(tools) == 0 {
			return toolChoice{}, nil
		}
		return toolChoice{mode: choiceAuto}, nil
	}
	var mode string
	if raw[0] == '"' {
		if err := json.Unmarshal(raw, &mode); err != nil {
			return toolChoice{}, &InputError{Field: "tool_choice", Msg: "must be a string or an object"}
		}
		switch mode {
		case choiceAuto, choiceNone, choiceRequired:
		default:
			return toolChoice{}, &InputError{Field: "tool_choice", Msg: fmt.Sprintf(`must be "auto", "none", "required" or a function, not %q`, mode)}
		}
		if mode != choiceNone && len(tools) == 0 {
			return toolChoice{}, &InputError{Field: "tool_choice", Msg: "needs tools"}
		}
		return toolChoice{mode: mode}, nil
	}
	var named struct {
		Type     string `json:"type"`
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	}
	if err := json.Unmarshal(raw, &named); err != nil || named.Type != "function" {
		return toolChoice{}, &InputError{Field: "tool_choice", Msg: `must be {"type":"function","function":{"name":...}}`}
	}
	for _, t := range tools {
		if toolFunctionName(t) == named.Function.Name {
			return toolChoice{mode: choiceNamed, name: named.Function.Name}, nil
		}
	}
	return toolChoice{}, &InputError{Field: "tool_choice.function.name", Msg: fmt.Sprintf("%q is not one of the tools", named.Function.Name)}
}

// wireToolCall is a tool call in a message's history: OpenAI's
// {"id","type":"function","function":{"name","arguments":"<JSON>"}}, or
// Workers AI's {"name","arguments":{...}} (arguments an object).
type wireToolCall struct {
	ID        string          `json:"id"`
	Type      string          `json:"type"`
	Function  *wireCallFunc   `json:"function"`
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
}

type wireCallFunc struct {
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
}

func (c wireToolCall) toChat() (chat.ToolCall, error) {
	name, args := c.Name, c.Arguments
	if c.Function != nil {
		name, args = c.Function.Name, c.Function.Arguments
	}
	if name == "" {
		return chat.ToolCall{}, errors.New("needs a function name")
	}
	args = bytes.TrimSpace(args)
	var obj json.RawMessage
	switch {
	case len(args) == 0 || string(args) == "null":
		obj = json.RawMessage("{}")
	case args[0] == '"':
		var s string
		if err := json.Unmarshal(args, &s); err != nil {
			return chat.ToolCall{}, errors.New("arguments must be a JSON string or object")
		}
		o, err := chat.ArgumentsObject(s)
		if err != nil {
			return chat.ToolCall{}, errors.New("arguments must hold a JSON object")
		}
		obj = o
	case args[0] == '{':
		obj = args
	default:
		return chat.ToolCall{}, errors.New("arguments must be a JSON string or object")
	}
	return chat.ToolCall{ID: c.ID, Name: name, Arguments: obj}, nil
}

// toolAPI is what an API's format adds for tool calls.
type toolAPI interface {
	format
	writeToolResult(w http.ResponseWriter, res *result, content string, calls []toolcall.Call)
	streamCall(sw *sse, res *result, index int, c toolcall.Call) error
}

// toolFormat wraps an API's format for a request with tools: the model's
// output is parsed with the model's tool-call format, text streamed as it
// becomes final and each call when it is complete. A tool_choice of
// "required" or a named function that the model did not follow ends the
// request with an error, never with an answer that ignores the choice.
type toolFormat struct {
	api    toolAPI
	format toolcall.Format
	choice toolChoice
	single bool // parallel_tool_calls false: the first call only
	stream *toolcall.Stream
	calls  int
}

var _ format = (*toolFormat)(nil)

// withTools returns f itself when the request has no tools in play. Each
// call returns a new parser: a request with several choices (choices.go)
// takes one a choice, a toolChoices, so that one choice's calls never reach
// another's.
func withTools(f toolAPI, v *vocab, in *genInput) format {
	if !in.toolsOn() {
		return f
	}
	tf := v.tools
	if in.forcedCall() {
		tf = toolcall.Llama3 // the constrained call's shape (toolCallGrammar)
	}
	t := &toolFormat{api: f, format: tf, choice: in.toolChoice, single: in.singleCall, stream: toolcall.NewStream(tf)}
	if ca, ok := f.(toolChoicesAPI); ok && in.n > 1 {
		return toolChoices{toolFormat: t, api: ca}
	}
	return t
}

// frameText is the text of a frame as the tool-call parser reads it: with
// the control tokens of the model's tool-call format (which the worker's
// detokenizer drops) put back after the frame's text.
func (v *vocab) frameText(in *genInput, fr *queue.Frame) string {
	if len(v.control) == 0 || !in.toolsOn() {
		return fr.Text
	}
	text := fr.Text
	for _, id := range fr.Tokens {
		if v.control[id] {
			text += v.tok.Piece(id)
		}
	}
	return text
}

// errToolChoice is a tool_choice the model's answer did not follow.
var errToolChoice = errors.New("edge: the model's answer does not call the tool that tool_choice requires")

func (t *toolFormat) check(calls []toolcall.Call) error {
	switch t.choice.mode {
	case choiceRequired:
		if len(calls) == 0 {
			return errToolChoice
		}
	case choiceNamed:
		if len(calls) == 0 {
			return errToolChoice
		}
		for _, c := range calls {
			if c.Name != t.choice.name {
				return errToolChoice
			}
		}
	}
	return nil
}

func (t *toolFormat) toolError(err error) *Error {
	return &Error{Row: rowInternal, Message: "the model did not call a tool as tool_choice requires; try again or use tool_choice auto", Err: err}
}

func (t *toolFormat) writeError(w http.ResponseWriter, e *Error) { t.api.writeError(w, e) }

func (t *toolFormat) writeResult(w http.ResponseWriter, res *result) {
	content, calls, err := t.answer(res)
	if err != nil {
		t.api.writeError(w, err)
		return
	}
	t.api.writeToolResult(w, res, content, calls)
}

// answer parses res's whole text: its content and calls (with ids), res's
// finish "tool_calls" when it called one, or the error of a tool_choice
// it did not follow.
func (t *toolFormat) answer(res *result) (string, []toolcall.Call, *Error) {
	r := toolcall.Parse(t.format, res.text)
	if len(r.Calls) == 0 && res.finish == "length" {
		// max_tokens ran out before the call closed: say so, with the text.
		return res.text, nil, nil
	}
	if err := t.check(r.Calls); err != nil {
		return "", nil, t.toolError(err)
	}
	if t.single && len(r.Calls) > 1 {
		r.Calls = r.Calls[:1]
	}
	calls := t.withIDs(r.Calls)
	if len(calls) > 0 && res.finish == "stop" {
		res.finish = "tool_calls"
	}
	return r.Content, calls, nil
}

func (t *toolFormat) streamBegin(sw *sse, res *result) error { return t.api.streamBegin(sw, res) }

func (t *toolFormat) emit(sw *sse, res *result, evs []toolcall.Event) error {
	for _, e := range evs {
		switch {
		case e.Call != nil:
			if t.choice.mode == choiceNamed && e.Call.Name != t.choice.name {
				return errToolChoice
			}
			if t.single && t.calls > 0 {
				continue // parallel_tool_calls false: calls after the first are dropped
			}
			c := t.withIDs([]toolcall.Call{*e.Call})[0]
			if err := t.api.streamCall(sw, res, t.calls, c); err != nil {
				return err
			}
			t.calls++
		case e.Content != "":
			if err := t.api.streamText(sw, res, e.Content); err != nil {
				return err
			}
		}
	}
	return nil
}

func (t *toolFormat) streamText(sw *sse, res *result, text string) error {
	err := t.emit(sw, res, t.stream.Push(text))
	if errors.Is(err, errToolChoice) {
		_ = t.api.streamError(sw, t.toolError(err))
	}
	return err
}

func (t *toolFormat) streamEnd(sw *sse, res *result) error {
	err := t.flush(sw, res)
	if errors.Is(err, errToolChoice) {
		return t.api.streamError(sw, t.toolError(err))
	}
	if err != nil {
		return err
	}
	return t.api.streamEnd(sw, res)
}

// flush sends what the parser still holds at the end of the output, checks
// that the calls followed tool_choice, and makes res's finish "tool_calls"
// when there were some.
func (t *toolFormat) flush(sw *sse, res *result) error {
	err := t.emit(sw, res, t.stream.Finish())
	if err == nil && (t.choice.mode == choiceRequired || t.choice.mode == choiceNamed) && t.calls == 0 && res.finish != "length" {
		err = errToolChoice
	}
	if err != nil {
		return err
	}
	if t.calls > 0 && res.finish == "stop" {
		res.finish = "tool_calls"
	}
	return nil
}

func (t *toolFormat) streamError(sw *sse, e *Error) error { return t.api.streamError(sw, e) }

// toolChoicesAPI is a toolAPI that answers with several choices.
type toolChoicesAPI interface {
	toolAPI
	choicesFormat
	// toolChoice is one choice of a whole answer: res with its content
	// and calls.
	toolChoice(res *result, content string, calls []toolcall.Call) any
}

// toolChoices is toolFormat for one choice of several (OpenAI's n). Each
// choice of a request has its own (withTools), so its output is parsed,
// checked against tool_choice and parallel_tool_calls, and its calls
// numbered apart from the other choices'. It leaves the error event to the
// group (choices.go), which sends one for the whole request.
type toolChoices struct {
	*toolFormat
	api toolChoicesAPI
}

var _ choicesFormat = toolChoices{}

func (t toolChoices) choice(res *result) (any, error) {
	content, calls, err := t.answer(res)
	if err != nil {
		return nil, err
	}
	return t.api.toolChoice(res, content, calls), nil
}

func (t toolChoices) writeChoices(w http.ResponseWriter, res *result, choices []any) {
	t.api.writeChoices(w, res, choices)
}

// streamText is toolFormat's, less the error event.
func (t toolChoices) streamText(sw *sse, res *result, text string) error {
	return t.asError(t.emit(sw, res, t.stream.Push(text)))
}

func (t toolChoices) streamFinish(sw *sse, res *result) error {
	if err := t.flush(sw, res); err != nil {
		return t.asError(err)
	}
	return t.api.streamFinish(sw, res)
}

func (t toolChoices) streamClose(sw *sse, res *result) error { return t.api.streamClose(sw, res) }

// asError is err with a tool_choice the model did not follow as its table
// row.
func (t toolChoices) asError(err error) error {
	if errors.Is(err, errToolChoice) {
		return t.toolError(err)
	}
	return err
}

// withIDs gives every call an id: the model's own when it wrote one, else a
// new one (Mistral's templates take exactly nine letters and digits).
func (t *toolFormat) withIDs(calls []toolcall.Call) []toolcall.Call {
	for i := range calls {
		if calls[i].ID == "" {
			if t.format == toolcall.Mistral {
				calls[i].ID = randomID(9)
			} else {
				calls[i].ID = "call_" + randomID(24)
			}
		}
	}
	return calls
}

func randomID(n int) string {
	const alnum = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
	b := make([]byte, n)
	_, _ = rand.Read(b)
	for i := range b {
		b[i] = alnum[int(b[i])%len(alnum)]
	}
	return string(b)
}

package chat

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

var (
	// ErrNoTemplate is returned by Compile for an empty template.
	ErrNoTemplate = errors.New("chat: no chat template")
	// ErrCompile is returned by Compile for a template that does not parse.
	ErrCompile = errors.New("chat: chat template does not compile")
	// ErrRender is returned when a render fails for a reason other than the
	// template raising (a type error in the template, a budget exceeded).
	ErrRender = errors.New("chat: chat template render failed")
	// ErrNoMessages is returned when there is nothing to render.
	ErrNoMessages = errors.New("chat: no messages")
	// ErrInvalidRole is returned for a role other than system, user,
	// assistant or tool.
	ErrInvalidRole = errors.New("chat: invalid role")
	// ErrInvalidInput is returned for template variables that are not what a
	// template expects (tool arguments that are not a JSON object, a bad
	// "now").
	ErrInvalidInput = errors.New("chat: invalid template input")
	// ErrInvalidTool is ErrInvalidInput for a request's tools: a tool that
	// is not JSON, or tools nested deeper than MaxToolDepth or holding more
	// than MaxToolNodes values in all.
	ErrInvalidTool = fmt.Errorf("%w: tools", ErrInvalidInput)
)

// TemplateError is a template's own refusal (raise_exception), such as
// Gemma's "System role not supported". Message is the template's text.
type TemplateError struct{ Message string }

func (e *TemplateError) Error() string { return "chat: template refused: " + e.Message }

// Roles a Message may have.
const (
	RoleSystem    = "system"
	RoleUser      = "user"
	RoleAssistant = "assistant"
	RoleTool      = "tool"
)

// Message is one turn of a conversation.
type Message struct {
	Role    string
	Content string
	// ToolCalls are an assistant turn's calls. Content is always a string
	// for the template (OpenAI's null content is ""): several templates
	// (Qwen3's) cannot take None.
	ToolCalls []ToolCall
	// ToolCallID and Name identify the call a tool turn answers.
	ToolCallID string
	Name       string
}

// ToolCall is one function call of an assistant turn. Arguments is a JSON
// object (OpenAI's string form is decoded by the caller, see
// ArgumentsObject); templates receive it as a mapping.
type ToolCall struct {
	ID        string
	Name      string
	Arguments json.RawMessage
}

// ArgumentsObject turns OpenAI's arguments (a string holding JSON) into the
// object templates expect. An empty string is {}; anything that is not a
// JSON object is ErrInvalidInput.
func ArgumentsObject(s string) (json.RawMessage, error) {
	if strings.TrimSpace(s) == "" {
		return json.RawMessage("{}"), nil
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal([]byte(s), &obj); err != nil || obj == nil {
		return nil, fmt.Errorf("%w: tool call arguments are not a JSON object", ErrInvalidInput)
	}
	return json.RawMessage(s), nil
}

// Input is what one render needs.
type Input struct {
	Messages []Message
	// Tools are tool definitions in OpenAI's shape
	// ({"type":"function","function":{"name",...}}), passed to the template
	// as written (key order kept).
	Tools               []json.RawMessage
	AddGenerationPrompt bool
	// Now is the time strftime_now formats (the request's arrival).
	Now time.Time
	// ReasoningEffort sets the template's thinking switch (reasoning.go):
	// one of none, minimal, low, medium and high; "" leaves the template's
	// default. A template without a switch refuses any other value
	// (ErrNoReasoningSwitch).
	ReasoningEffort string
}

// Segment is a piece of the rendered prompt. Special segments hold one
// control token written by the template and are tokenized with
// special-token parsing on; all other text is tokenized with it off.
type Segment struct {
	Text    string
	Special bool
}

// Prompt is a rendered conversation.
type Prompt struct {
	Segments []Segment
}

// Text returns the prompt as one string: what transformers renders.
func (p Prompt) Text() string {
	var b strings.Builder
	for _, s := range p.Segments {
		b.WriteString(s.Text)
	}
	return b.String()
}

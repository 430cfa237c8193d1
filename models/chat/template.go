package chat

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/bulkhead-ai/bulkhead/models/chat/internal/jinja"
)

// Config says how a Template renders for one model.
type Config struct {
	// BOS and EOS are the texts of the model's BOS and EOS tokens, the
	// bos_token and eos_token variables.
	BOS, EOS string
	// ControlTokens are the texts of the vocabulary's control tokens. Text
	// that did not come from the template never becomes one of them.
	ControlTokens []string
	// TrustContent turns that protection off (a per-model compatibility
	// setting): the whole prompt is one Special segment, so control-token
	// text in messages becomes control tokens.
	TrustContent bool
	// Steps, Output and Depth bound one render: evaluation steps, output
	// bytes and nested macro calls. Memory bounds the bytes of all the
	// strings and lists it makes, each charged before it is allocated (so
	// what one render can hold at once). Zero means the defaults.
	Steps, Output, Depth, Memory int
	// Timeout bounds one render's wall time. Zero means DefaultTimeout.
	Timeout time.Duration
}

// Default render limits.
const (
	DefaultSteps   = 4 << 20
	DefaultOutput  = 8 << 20
	DefaultDepth   = 64
	DefaultMemory  = 16 << 20
	DefaultTimeout = 2 * time.Second
)

// Template is a compiled chat template. It is safe for concurrent use.
type Template struct {
	tmpl    *jinja.Template
	cfg     Config
	esc     *escaper // nil when TrustContent or no control tokens
	source  string
	limits  jinja.Limits
	timeout time.Duration
	// reasoning is the thinking switch the source reads (reasoning.go).
	reasoning ReasoningSwitch
}

// Compile parses a chat template once, for all its renders.
func Compile(source string, cfg Config) (*Template, error) {
	if len(bytes.TrimSpace([]byte(source))) == 0 {
		return nil, ErrNoTemplate
	}
	if cfg.Steps < 0 || cfg.Output < 0 || cfg.Depth < 0 || cfg.Memory < 0 || cfg.Timeout < 0 {
		return nil, fmt.Errorf("%w: negative render limit", ErrCompile)
	}
	tm, err := compile(source)
	if err != nil {
		return nil, err
	}
	t := &Template{
		tmpl:   tm,
		cfg:    cfg,
		source: source,
		limits: jinja.Limits{
			Steps:  orDefault(cfg.Steps, DefaultSteps),
			Output: orDefault(cfg.Output, DefaultOutput),
			Depth:  orDefault(cfg.Depth, DefaultDepth),
			Memory: orDefault(cfg.Memory, DefaultMemory),
		},
		timeout:   cfg.Timeout,
		reasoning: detectReasoning(source),
	}
	if t.timeout == 0 {
		t.timeout = DefaultTimeout
	}
	if !cfg.TrustContent {
		t.esc = newEscaper(cfg.ControlTokens)
	}
	return t, nil
}

// compile guards against a parser panic on a hostile template.
func compile(source string) (tm *jinja.Template, err error) {
	defer func() {
		if r := recover(); r != nil {
			tm, err = nil, fmt.Errorf("%w: %v", ErrCompile, r)
		}
	}()
	tm, err = jinja.Compile(source)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCompile, err)
	}
	return tm, nil
}

func orDefault(v, d int) int {
	if v == 0 {
		return d
	}
	return v
}

// Probe renders the largest conversation a request of maxBody bytes can
// carry (its text in 64 alternating user and assistant turns, and 16 tools)
// and returns the render's error if the template cannot do it within its
// limits: every request that large would be refused with ErrRender. A
// template's own refusal (TemplateError) is not a failure of the probe.
func (t *Template) Probe(ctx context.Context, maxBody int) error {
	const turns, tools = 64, 16
	in := Input{AddGenerationPrompt: true, Now: time.Unix(0, 0)}
	text := strings.Repeat("word ", max(maxBody/2/turns/5, 1))
	for i := range turns {
		role := RoleUser
		if i%2 == 1 {
			role = RoleAssistant
		}
		in.Messages = append(in.Messages, Message{Role: role, Content: fmt.Sprintf("turn %d: %s", i, text)})
	}
	props := `"p":{"type":"string","description":"` + strings.Repeat("d", 64) + `"},`
	for i := range tools {
		param := fmt.Sprintf(`{"type":"object","properties":{%s"q%d":{"type":"array","items":{"type":"integer"}}}}`, props, i)
		in.Tools = append(in.Tools, json.RawMessage(fmt.Sprintf(
			`{"type":"function","function":{"name":"tool_%d","description":"%s","parameters":%s}}`, i, strings.Repeat("x", max(maxBody/2/tools-400, 1)), param)))
	}
	_, err := t.Render(ctx, in)
	var te *TemplateError
	if errors.As(err, &te) {
		return nil
	}
	return err
}

// Source returns the template text.
func (t *Template) Source() string { return t.source }

// Render renders a conversation for the model. Every string of the
// conversation and its tools is untrusted text: it never yields a Special
// segment (unless Config.TrustContent).
func (t *Template) Render(ctx context.Context, in Input) (Prompt, error) {
	if len(in.Messages) == 0 {
		return Prompt{}, ErrNoMessages
	}
	msgs := make([]jinja.Value, len(in.Messages))
	for i, m := range in.Messages {
		v, err := t.messageValue(i, m)
		if err != nil {
			return Prompt{}, err
		}
		msgs[i] = v
	}
	tools := jinja.None()
	if len(in.Tools) > 0 {
		list := make([]jinja.Value, len(in.Tools))
		lim := &jsonLimit{depth: MaxToolDepth, nodes: MaxToolNodes} // all the tools together
		for i, raw := range in.Tools {
			v, err := decodeLimited(raw, t.esc, lim)
			if err != nil {
				return Prompt{}, fmt.Errorf("%w: tool %d: %w", ErrInvalidTool, i, err)
			}
			list[i] = v
		}
		tools = jinja.NewList(list)
	}
	vars := map[string]jinja.Value{
		"messages":              jinja.NewList(msgs),
		"tools":                 tools,
		"documents":             jinja.None(),
		"add_generation_prompt": jinja.NewBool(in.AddGenerationPrompt),
		"bos_token":             jinja.NewString(t.cfg.BOS),
		"eos_token":             jinja.NewString(t.cfg.EOS),
	}
	if err := t.reasoningVars(vars, in.ReasoningEffort); err != nil {
		return Prompt{}, err
	}
	text, err := t.render(ctx, vars, in.Now)
	if err != nil {
		return Prompt{}, err
	}
	if t.esc == nil {
		return Prompt{Segments: []Segment{{Text: text, Special: true}}}, nil
	}
	return Prompt{Segments: t.esc.segments(text)}, nil
}

// RenderVars renders with template variables given as one JSON object, as
// `bulkhead chat render --input` reads them: messages, tools,
// add_generation_prompt, bos_token, eos_token and any other variable the
// template reads, plus "now" (RFC 3339), the time strftime_now formats (the
// current time when absent). Values are passed as written; nothing is
// escaped, so the result is text only.
func (t *Template) RenderVars(ctx context.Context, vars []byte) (string, error) {
	v, err := decodeValue(vars, nil)
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrInvalidInput, err)
	}
	if !v.IsDict() {
		return "", fmt.Errorf("%w: template variables must be a JSON object", ErrInvalidInput)
	}
	d := v.AsDict()
	data := map[string]jinja.Value{
		"tools":     jinja.None(),
		"documents": jinja.None(),
	}
	now := time.Now()
	for _, k := range d.Keys {
		val := d.Data[k]
		if k == "now" {
			if !val.IsString() {
				return "", fmt.Errorf("%w: now must be an RFC 3339 string", ErrInvalidInput)
			}
			if now, err = time.Parse(time.RFC3339, val.AsString()); err != nil {
				return "", fmt.Errorf("%w: now: %w", ErrInvalidInput, err)
			}
			continue
		}
		data[k] = val
	}
	return t.render(ctx, data, now)
}

func (t *Template) render(ctx context.Context, vars map[string]jinja.Value, now time.Time) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, t.timeout)
	defer cancel()
	vars["raise_exception"] = jinja.NewCallable("raise_exception", raiseException)
	vars["strftime_now"] = jinja.NewCallable("strftime_now", func(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
		if len(args) != 1 || !args[0].IsString() {
			return jinja.Undefined(), errors.New("strftime_now takes one format string")
		}
		return jinja.NewString(strftime(now, args[0].AsString())), nil
	})
	out, err := t.tmpl.RenderLimited(ctx, vars, t.limits)
	if err != nil {
		var te *TemplateError
		if errors.As(err, &te) {
			return "", te
		}
		return "", fmt.Errorf("%w: %w", ErrRender, err)
	}
	return out, nil
}

func raiseException(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	msg := "raise_exception called"
	if len(args) > 0 {
		msg = args[0].String()
		if args[0].IsString() {
			msg = args[0].AsString()
		}
	}
	return jinja.Undefined(), &TemplateError{Message: msg}
}

// messageValue builds a message mapping as OpenAI clients send it to
// transformers: role, content, then tool_calls, tool_call_id and name when
// present.
func (t *Template) messageValue(i int, m Message) (jinja.Value, error) {
	switch m.Role {
	case RoleSystem, RoleUser, RoleAssistant, RoleTool:
	default:
		return jinja.Value{}, fmt.Errorf("%w: message %d has role %q", ErrInvalidRole, i, m.Role)
	}
	if len(m.ToolCalls) > 0 && m.Role != RoleAssistant {
		return jinja.Value{}, fmt.Errorf("%w: message %d: only assistant messages have tool calls", ErrInvalidInput, i)
	}
	d := jinja.NewDict()
	dict := d.AsDict()
	dict.Set("role", jinja.NewString(m.Role))
	dict.Set("content", t.str(m.Content))
	if len(m.ToolCalls) > 0 {
		calls := make([]jinja.Value, len(m.ToolCalls))
		for j, c := range m.ToolCalls {
			args := c.Arguments
			if len(bytes.TrimSpace(args)) == 0 {
				args = json.RawMessage("{}")
			}
			av, err := decodeValue(args, t.esc)
			if err != nil || !av.IsDict() {
				return jinja.Value{}, fmt.Errorf("%w: message %d tool call %d: arguments are not a JSON object", ErrInvalidInput, i, j)
			}
			fn := jinja.NewDict()
			fn.AsDict().Set("name", t.str(c.Name))
			fn.AsDict().Set("arguments", av)
			call := jinja.NewDict()
			if c.ID != "" {
				call.AsDict().Set("id", t.str(c.ID))
			}
			call.AsDict().Set("type", jinja.NewString("function"))
			call.AsDict().Set("function", fn)
			calls[j] = call
		}
		dict.Set("tool_calls", jinja.NewList(calls))
	}
	if m.ToolCallID != "" {
		dict.Set("tool_call_id", t.str(m.ToolCallID))
	}
	if m.Name != "" {
		dict.Set("name", t.str(m.Name))
	}
	return d, nil
}

func (t *Template) str(s string) jinja.Value { return jinja.NewString(t.esc.escape(s)) }

// decodeValue decodes JSON into template values keeping object key order
// (Python dicts keep insertion order, and tojson writes them in it),
// escaping every string and key with esc (nil: none).
func decodeValue(raw []byte, esc *escaper) (jinja.Value, error) {
	return decodeLimited(raw, esc, &jsonLimit{depth: maxJSONDepth, nodes: -1})
}

// Bounds on a request's tools, checked before any render: the nesting of
// one tool (its {"type","function":{"parameters"}} wrapper, then a schema
// as deep as models/grammar compiles) and the values of all tools
// together. A render's work grows with both (tojson(indent) writes a
// line per value, indented by its depth).
const (
	MaxToolDepth = 3 + 32
	MaxToolNodes = 1 << 16
)

// jsonLimit bounds a decode: the nesting depth, and the values left to
// decode (negative: no bound).
type jsonLimit struct {
	depth, nodes int
}

func decodeLimited(raw []byte, esc *escaper, lim *jsonLimit) (jinja.Value, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	v, err := decodeNext(dec, esc, lim, 0)
	if err != nil {
		return jinja.Value{}, err
	}
	if _, err := dec.Token(); err == nil {
		return jinja.Value{}, errors.New("trailing data after JSON value")
	}
	return v, nil
}

const maxJSONDepth = 128

func decodeNext(dec *json.Decoder, esc *escaper, lim *jsonLimit, depth int) (jinja.Value, error) {
	if depth > lim.depth {
		return jinja.Value{}, fmt.Errorf("JSON nested deeper than %d", lim.depth)
	}
	if lim.nodes == 0 {
		return jinja.Value{}, fmt.Errorf("more than %d JSON values", MaxToolNodes)
	}
	lim.nodes--
	tok, err := dec.Token()
	if err != nil {
		return jinja.Value{}, err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			d := jinja.NewDict()
			for dec.More() {
				k, err := dec.Token()
				if err != nil {
					return jinja.Value{}, err
				}
				v, err := decodeNext(dec, esc, lim, depth+1)
				if err != nil {
					return jinja.Value{}, err
				}
				d.AsDict().Set(esc.escape(k.(string)), v)
			}
			if _, err := dec.Token(); err != nil {
				return jinja.Value{}, err
			}
			return d, nil
		case '[':
			items := []jinja.Value{}
			for dec.More() {
				v, err := decodeNext(dec, esc, lim, depth+1)
				if err != nil {
					return jinja.Value{}, err
				}
				items = append(items, v)
			}
			if _, err := dec.Token(); err != nil {
				return jinja.Value{}, err
			}
			return jinja.NewList(items), nil
		}
		return jinja.Value{}, fmt.Errorf("unexpected %v", t)
	case string:
		return jinja.NewString(esc.escape(t)), nil
	case json.Number:
		if i, err := t.Int64(); err == nil && !bytes.ContainsAny([]byte(t), ".eE") {
			return jinja.NewInt(i), nil
		}
		f, err := t.Float64()
		if err != nil {
			return jinja.Value{}, err
		}
		return jinja.NewFloat(f), nil
	case bool:
		return jinja.NewBool(t), nil
	case nil:
		return jinja.None(), nil
	}
	return jinja.Value{}, fmt.Errorf("unexpected JSON token %v", tok)
}

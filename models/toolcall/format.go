package toolcall

import (
	"bytes"
	"encoding/json"
	"strings"
)

// Format is how a model writes tool calls.
type Format int

// Formats.
const (
	None    Format = iota // no tool-call format known: output is text
	Hermes                // <tool_call>{...}</tool_call> blocks (Hermes, Qwen 2.5 and 3, SmolLM3)
	Llama3                // the whole answer is {"name":..., "parameters":{...}} (Llama 3.1 to 3.3)
	Mistral               // [TOOL_CALLS][{...}, ...]
	Granite               // <|tool_call|>[{...}, ...]
	GPTOSS                // harmony: <|channel|>commentary to=functions.NAME ...<|message|>{...}
)

var formatNames = map[Format]string{
	None: "none", Hermes: "hermes", Llama3: "llama3-json", Mistral: "mistral", Granite: "granite", GPTOSS: "gpt-oss",
}

func (f Format) String() string { return formatNames[f] }

// Detect picks the format a chat template asks its model to write, from the
// markers the template itself writes.
func Detect(template string) Format {
	switch {
	case strings.Contains(template, "[TOOL_CALLS]"):
		return Mistral
	case strings.Contains(template, "<|tool_call|>"):
		return Granite
	case strings.Contains(template, "<|channel|>") && strings.Contains(template, "<|call|>"):
		return GPTOSS
	case strings.Contains(template, "<tool_call>"):
		return Hermes
	case strings.Contains(template, "<|start_header_id|>") && strings.Contains(template, `"parameters"`):
		return Llama3
	}
	return None
}

// ControlTokens are the texts of the tokens a format's markers are made
// of. Detokenizers usually drop control tokens; the caller puts these back
// into the text it parses (see Stream).
func (f Format) ControlTokens() []string {
	switch f {
	case Hermes:
		return []string{"<tool_call>", "</tool_call>"}
	case Llama3:
		return []string{"<|python_tag|>"}
	case Mistral:
		return []string{"[TOOL_CALLS]"}
	case Granite:
		return []string{"<|tool_call|>"}
	case GPTOSS:
		return []string{"<|start|>", "<|channel|>", "<|constrain|>", "<|message|>", "<|end|>", "<|call|>", "<|return|>"}
	}
	return nil
}

// Call is one parsed tool call. Arguments is the JSON object the model
// wrote, compacted. ID is the model's own id when it wrote one (Mistral),
// else "".
type Call struct {
	ID        string
	Name      string
	Arguments string
}

// call builds a Call from a decoded {"name":..., <one of argsKeys>:{...}} object,
// or reports that it is not one.
func call(obj map[string]json.RawMessage, argsKeys ...string) (Call, bool) {
	var name string
	if err := json.Unmarshal(obj["name"], &name); err != nil || name == "" {
		return Call{}, false
	}
	var args json.RawMessage
	for _, k := range argsKeys {
		if a, ok := obj[k]; ok {
			args = a
			break
		}
	}
	if args == nil {
		args = json.RawMessage("{}")
	}
	a, ok := compactObject(args)
	if !ok {
		return Call{}, false
	}
	c := Call{Name: name, Arguments: a}
	if raw, ok := obj["id"]; ok {
		if err := json.Unmarshal(raw, &c.ID); err != nil {
			return Call{}, false
		}
	}
	return c, true
}

// compactObject returns raw compacted if it is a JSON object. A JSON string
// holding an object (some models write arguments that way) is unwrapped.
func compactObject(raw json.RawMessage) (string, bool) {
	raw = json.RawMessage(strings.TrimSpace(string(raw)))
	if len(raw) > 0 && raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", false
		}
		raw = json.RawMessage(strings.TrimSpace(s))
	}
	if len(raw) == 0 || raw[0] != '{' {
		return "", false
	}
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return "", false
	}
	return b.String(), true
}

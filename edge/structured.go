package edge

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/bulkhead-ai/bulkhead/models/grammar"
	"github.com/bulkhead-ai/bulkhead/queue"
)

// Structured output. The edge checks a response_format (or a forced tool
// call) up front by compiling its grammar with the compiler the worker uses
// (models/grammar: what output a model may produce): a schema keyword the grammar does not implement, or
// a constraint no value meets, is refused here with 5004 naming the keyword,
// never silently ignored downstream.

type wireResponseFormat struct {
	Type       string          `json:"type"`
	JSONSchema json.RawMessage `json:"json_schema"`
}

type wireJSONSchema struct {
	Name   string          `json:"name"`
	Schema json.RawMessage `json:"schema"`
	Strict *bool           `json:"strict"`
}

// parseResponseFormat reads response_format: OpenAI's {"type":"text"},
// {"type":"json_object"} and {"type":"json_schema","json_schema":{"name",
// "schema","strict"}}; the native API's json_schema holds the schema itself.
func parseResponseFormat(raw json.RawMessage, native bool) (*queue.Grammar, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var rf wireResponseFormat
	if err := json.Unmarshal(raw, &rf); err != nil {
		return nil, &InputError{Field: "response_format", Msg: "must be an object"}
	}
	switch rf.Type {
	case "text":
		return nil, nil
	case queue.GrammarJSONObject:
		return &queue.Grammar{Kind: queue.GrammarJSONObject}, nil
	case queue.GrammarJSONSchema:
	default:
		return nil, &InputError{Field: "response_format.type", Msg: `must be "text", "json_object" or "json_schema"`}
	}
	schema := bytes.TrimSpace(rf.JSONSchema)
	field := "response_format.json_schema"
	if !native {
		var js wireJSONSchema
		if err := json.Unmarshal(schema, &js); err != nil || len(schema) == 0 || schema[0] != '{' {
			return nil, &InputError{Field: field, Msg: `must be {"name":...,"schema":{...}}`}
		}
		if js.Name == "" {
			return nil, &InputError{Field: field + ".name", Msg: "is required"}
		}
		schema, field = bytes.TrimSpace(js.Schema), field+".schema"
	}
	if len(schema) == 0 || string(schema) == "null" {
		return nil, &InputError{Field: field, Msg: "is required"}
	}
	if err := checkSchema(field, schema); err != nil {
		return nil, err
	}
	return &queue.Grammar{Kind: queue.GrammarJSONSchema, Schema: json.RawMessage(schema)}, nil
}

// checkSchema compiles a schema, turning a refusal into an *InputError that
// names the keyword.
func checkSchema(field string, schema []byte) error {
	_, err := grammar.CompileSchema(schema)
	var se *grammar.SchemaError
	if errors.As(err, &se) {
		return &InputError{Field: field, Msg: fmt.Sprintf("schema keyword %q: %s", se.Keyword, se.Reason)}
	}
	return err
}

// toolCallGrammar is the grammar of a forced tool call (tool_choice
// "required" or a named function): exactly one call, written as
// {"name":NAME,"parameters":{...}} (the Llama 3 JSON format, which the edge
// then parses whatever the model's own format is), its parameters valid for
// the tool's schema.
func toolCallGrammar(tools []json.RawMessage, choice toolChoice) (*queue.Grammar, error) {
	var alts []json.RawMessage
	for i, t := range tools {
		var w struct {
			Function struct {
				Name       string          `json:"name"`
				Parameters json.RawMessage `json:"parameters"`
			} `json:"function"`
		}
		if err := json.Unmarshal(t, &w); err != nil {
			return nil, &InputError{Field: fmt.Sprintf("tools[%d]", i), Msg: "must be an object"}
		}
		if choice.mode == choiceNamed && w.Function.Name != choice.name {
			continue
		}
		params := bytes.TrimSpace(w.Function.Parameters)
		if len(params) == 0 || string(params) == "null" {
			params = []byte(`{"type":"object","properties":{},"additionalProperties":false}`)
		}
		if err := checkSchema(fmt.Sprintf("tools[%d].function.parameters", i), params); err != nil {
			return nil, err
		}
		name, _ := json.Marshal(w.Function.Name)
		alts = append(alts, json.RawMessage(`{"type":"object","properties":{"name":{"const":`+string(name)+
			`},"parameters":`+string(params)+`},"required":["name","parameters"],"additionalProperties":false}`))
	}
	schema, _ := json.Marshal(map[string]any{"anyOf": alts})
	if len(alts) == 1 {
		schema = alts[0]
	}
	if err := checkSchema("tools", schema); err != nil {
		return nil, err
	}
	return &queue.Grammar{Kind: queue.GrammarJSONSchema, Schema: schema}, nil
}

// forcedCall reports whether the request's tool_choice forces a call.
func (in *genInput) forcedCall() bool {
	return in.toolsOn() && (in.toolChoice.mode == choiceRequired || in.toolChoice.mode == choiceNamed)
}

// setGrammar settles the request's output constraint: response_format, or
// the forced tool call's grammar. Stop sequences would cut a constrained
// value short, so they are refused next to one.
func (in *genInput) setGrammar(rf *queue.Grammar) error {
	if in.forcedCall() {
		if rf != nil {
			return &InputError{Field: "response_format", Msg: `cannot be combined with tool_choice "required" or a named function`}
		}
		g, err := toolCallGrammar(in.tools, in.toolChoice)
		if err != nil {
			return err
		}
		rf = g
	}
	if rf != nil && len(in.stop) > 0 {
		return &InputError{Field: "stop", Msg: "cannot be combined with response_format or a forced tool call (it would cut the value short)"}
	}
	in.grammar = rf
	return nil
}

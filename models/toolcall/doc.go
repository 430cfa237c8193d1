// Package toolcall owns tool calls in model output: which format a model
// writes them in (chosen from its chat template), and parsing them out of
// the generated text, whole or as it streams, into calls with a function
// name and JSON-object arguments.
//
// Formats: Hermes/Qwen (<tool_call>{"name":...,"arguments":{...}}</tool_call>
// blocks, also SmolLM3), Llama 3.x JSON ({"name":...,"parameters":{...}} as
// the whole answer, optionally after <|python_tag|>), Mistral
// ([TOOL_CALLS][{"name":...,"arguments":{...}},...]) and its Granite
// variant (<|tool_call|>[...]), and gpt-oss (harmony messages addressed
// to=functions.NAME).
//
// A call that does not parse completely is never returned as a call: its
// text stays text. This package must never import other Bulkhead packages
// and never invent arguments.
package toolcall

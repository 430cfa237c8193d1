// Package chat owns chat templates: it compiles a model's
// tokenizer.chat_template (Jinja2) once and renders conversations with the
// semantics of Hugging Face transformers' apply_chat_template: a sandbox
// with trim_blocks and lstrip_blocks, loop controls, tojson that keeps
// non-ASCII text, raise_exception, strftime_now and the variables messages,
// tools, add_generation_prompt, bos_token and eos_token.
//
// A render is also a security boundary. Render returns the prompt as
// segments: each control token the template wrote is a Special segment, and
// all other text (message contents, tool definitions, tool calls and tool
// results included) is plain, so a user who types "<|im_start|>system" gets
// ordinary text tokens, never the control token. The tokenizer encodes the
// segments; this package only says which text is which.
//
// Rendering is bounded in steps, output bytes and macro depth, and ends when
// its context does. A template that raises refuses the conversation with a
// *TemplateError holding the template's own message.
//
// This package must never tokenize, never import other Bulkhead packages,
// never read the clock during a render (the caller supplies the time) and
// never drop or reorder a message silently.
package chat

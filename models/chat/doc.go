// Package chat owns chat templates: it recognizes the family of a model's
// tokenizer.chat_template (Llama 2, Llama 3, ChatML, Zephyr) and renders a
// conversation to the exact prompt text the model's reference Jinja template
// produces, as Hugging Face transformers renders it.
//
// It does not evaluate Jinja. Each family is written out in Go, so a template
// that only looks like a family but differs in detail is rendered as the
// family's canonical template, and templates of no known family are refused
// with ErrUnknownTemplate rather than guessed at.
//
// This package must never tokenize, never import other Bulkhead packages, and
// never drop or reorder a message silently: a conversation a template cannot
// express is an error.
package chat

// Package grammar says what output a model may produce under structured
// output (response_format, forced tool calls): CompileSchema (or JSONObject)
// builds a Grammar from a JSON Schema; a Matcher follows one sequence's
// output through it byte by byte; Matcher.Mask marks, from a Vocab (a trie of
// the bytes each token emits, built once per model), the tokens that keep the
// output a prefix of the language, and the sampler (workers/sample,
// SampleAllowed) draws among them. Unsupported or impossible schemas are
// refused with a *SchemaError naming the keyword. Mask allocates parse frames
// for the trie prefixes the grammar allows, not for the whole vocabulary.
//
// The edge compiles a request's schema here to refuse it up front; the
// worker compiles it again to decode. This package must never import other
// Bulkhead packages or allocate in proportion to the vocabulary on each call.
package grammar

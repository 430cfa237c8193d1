// Package engine runs llama-family models: it loads a GGUF file into a Model,
// computes the forward pass for a batch of sequences over the paged KV cache, and
// schedules requests with continuous batching (sequences join and leave between
// steps, prompts are prefilled in chunks).
//
// The engine owns the order of arithmetic: each row of a batch is computed the
// same way whatever else shares the batch, so a request's greedy output depends
// only on its own input. It reads KV only through kvcache views, which refuse
// slots the sequence did not write.
//
// For disaggregated serving, Prefill runs a prompt and samples its first token
// but hands the still-allocated KV sequence to the caller; Resume continues a
// request from a sequence whose prompt KV was imported into this engine's pool
// (NewSequenceFor reserves it) and refuses one that does not hold exactly the
// prompt, for this tenant, with room to decode.
//
// It must never truncate a prompt, substitute a placeholder, or continue a
// sequence whose KV could not be reserved: those are errors for that sequence.
// It must never resume from a sequence whose prefill did not complete.
package engine

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
// It must never truncate a prompt, substitute a placeholder, or continue a
// sequence whose KV could not be reserved: those are errors for that sequence.
package engine

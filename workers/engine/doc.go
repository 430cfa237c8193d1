// Package engine runs llama-family models: it loads a GGUF file into a Model,
// computes the forward pass for a batch of sequences over the paged KV cache, and
// schedules requests with continuous batching (sequences join and leave between
// steps, prompts are prefilled in chunks), fairly between tenants: admission
// by virtual token counter, with preemption (and recompute) of a tenant over
// its fair share when one under it is held out (fair.go).
//
// The engine owns the order of arithmetic: each row of a batch is computed the
// same way whatever else shares the batch, so a request's greedy output depends
// only on its own input. It reads KV only through kvcache views, which refuse
// slots the sequence did not write.
//
// For disaggregated serving, Prefill runs a prompt and samples its first token
// but hands the still-allocated KV sequence to the caller; Resume continues a
// request from a sequence whose prompt KV was imported into this engine's pool
// (Reserve reserves it in the tenant's turn, NewSequenceFor at once or not at
// all) and refuses one that does not hold exactly the prompt, for this
// tenant, with room to decode. A resumed sequence may be preempted like any
// other: it then recomputes its prompt and output here, writing its own KV.
// Recompute continues a request from the prefill's first token without its
// pages (they were let go before this pool had room): it computes the prompt
// here, in the tenant's turn, as after a preemption.
//
// A request with CachePrefix set uses its tenant's prefix cache in the KV
// pool: admission attaches the longest run of the prompt's full pages that
// the request's namespace cached for this model's weights (never the page
// holding the last prompt token, which must be computed for the first
// logits), prefill starts after them, and once the prompt is written its full
// pages are published for the namespace's later requests. Usage.CachedTokens
// says how many prompt tokens were attached rather than computed. Requests
// without CachePrefix neither look up nor publish.
//
// It must never truncate a prompt, substitute a placeholder, or continue a
// sequence whose KV could not be reserved: those are errors for that sequence.
// It must never resume from a sequence whose prefill did not complete, and
// must never take a cache namespace from anywhere but Request.Owner.
package engine

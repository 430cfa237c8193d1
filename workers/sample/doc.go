// Package sample owns the last step of decoding: turning one row of logits into
// the next token, and cutting streamed text at the client's stop sequences.
//
// A Sampler applies, in llama.cpp's default order, the repetition, frequency and
// presence penalties, then top-k, top-p and min-p filtering, then temperature,
// and draws from the resulting softmax with a PCG generator seeded from
// Params.Seed, so the same parameters and the same logits always give the same
// tokens. Temperature 0 is greedy. A Sampler keeps its scratch buffers between
// calls and is not safe for concurrent use: hold one per sequence.
//
// A StopMatcher holds back the streamed text that could still become a stop
// sequence, so that no part of a stop string (and nothing after it) is ever
// emitted, and never emits a split UTF-8 character.
//
// SampleAllowed draws among the tokens a mask allows (constrained decoding:
// models/grammar's Matcher fills the mask). Logprobs reports the distribution
// the last draw used (after penalties, before temperature, filters and mask).
//
// This package must never import other Bulkhead packages, touch model weights,
// or allocate in proportion to the vocabulary on each call.
package sample

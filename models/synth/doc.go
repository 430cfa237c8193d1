// Package synth writes random-weight llama models in the shapes of real ones,
// as GGUF files that llama.cpp and Bulkhead both load: a valid SentencePiece
// vocabulary, the llama.* hyperparameters, and every weight drawn from a seeded
// normal distribution, so the same configuration always gives the same bytes.
//
// It owns the shape table and the synthetic vocabulary. It streams tensors to
// the output one chunk at a time and must never hold a whole model in memory,
// nor import anything above models/.
package synth

// Package synth writes random-weight models in the shapes of real ones, as
// GGUF files that llama.cpp and Bulkhead both load: a valid SentencePiece
// vocabulary, the hyperparameter keys and tensor names llama.cpp expects for
// each architecture (llama, qwen2, qwen3, gemma2, gemma3, phi3), and every
// tensor, norm weights and biases included, drawn from a seeded normal
// distribution, so the same configuration always gives the same bytes and a
// missing operation in an engine changes its output.
//
// It owns the shape table and the synthetic vocabulary. It streams tensors to
// the output one chunk at a time and must never hold a whole model in memory,
// nor import anything above models/.
package synth

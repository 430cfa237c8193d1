// Package lora reads LoRA adapters: llama.cpp's GGUF adapter files and
// PEFT's adapter_model.safetensors with adapter_config.json, into one
// format-neutral form (Adapter: per layer and projection, the low-rank
// matrices A and B as float32, with alpha and rank). It also writes both
// formats (for models synth).
//
// It knows adapters, not base models: binding an adapter to a model's
// shapes (and the head permutation llama.cpp applies to llama's Q and K)
// is the engine's. It never trusts a file: sizes, ranks, names and shapes
// are checked before anything is allocated from them, and every refusal
// wraps ErrNotAdapter or ErrBadAdapter.
package lora

// Package tokenizer owns text <-> token id conversion for models whose
// vocabulary is stored in GGUF metadata: SentencePiece-style ("llama"),
// byte-level BPE ("gpt2") and WordPiece ("bert") vocabularies, special-token
// splitting, end-of-generation detection and streaming detokenization.
//
// Its behaviour is defined by llama.cpp's llama_tokenize / llama_detokenize: the
// same ids for the same text, the same pre-tokenizer splits, the same special
// token handling. The pre-tokenizers are written by hand because the Hugging Face
// patterns need look-ahead, which Go's regexp does not have.
//
// A Tokenizer is immutable after FromGGUF and safe for concurrent use; a
// StreamDecoder is not. The package reads only metadata: it must never touch
// tensor data, never panic on a corrupt vocabulary (that is an error from
// FromGGUF) and never import anything above models/.
package tokenizer

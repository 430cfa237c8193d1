// Package gguf reads and writes GGUF model files and owns GGML's tensor types:
// their names and block layouts, dequantization (bit for bit equal to GGML's
// dequantize_row_* for every supported type) and the reference quantizers.
// The reader refuses a tensor of any other type by tensor and type name
// (*UnsupportedTypeError).
//
// A file is mapped read-only; tensor data is never copied whole into the heap.
// Every length, count and offset in a file is checked against the file's size
// before it is used, so a corrupt, truncated or hostile file is an error, never a
// panic or an allocation larger than a small multiple of the file.
//
// The Writer lays a file out as GGML's own writer does (a file parsed and written
// back is byte-identical) and can stream tensor data from a source, so a large
// model is never held in memory twice. The Q8_0 and Q4_0 quantizers are
// bit-exact with GGML's reference ones, which llama-quantize uses.
//
// This package must never import anything above models/.
package gguf

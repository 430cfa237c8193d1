// Package gguf reads and writes GGUF model files and owns GGML's tensor types:
// their block layouts, dequantization and the reference quantizers.
//
// A file is mapped read-only; tensor data is never copied whole into the heap.
// Every length, count and offset in a file is checked against the file's size
// before it is used, so a corrupt, truncated or hostile file is an error, never a
// panic or an allocation larger than the file.
//
// This package must never import anything above models/.
package gguf

// Package catalog owns the list of models a deployment serves: each model's
// public name, the GGUF file behind it, the context window advertised to
// clients, the worker's KV pool size and the prices used to meter usage.
//
// A catalog comes from a YAML file (Load, Parse) or from --model NAME=PATH
// flags (FromFlags). Every entry is validated when the catalog is built: a bad
// value is an error that names the model and the field, never a silent
// default. Resolve opens each model file's GGUF header (a cheap mapping; tensor
// data is not read) to learn its architecture and trained context; Load and
// FromFlags resolve before they return.
//
// A Catalog is safe for concurrent use. The *Model values it hands out are
// immutable snapshots: Clamp replaces a model's entry rather than changing it
// in place, so a caller must look a model up again to see a clamp.
//
// A model's advertised context window only ever falls below what the file or
// flags give: Clamp lowers it for good (a local KV pool too small for it), and
// LimitContext lowers it for as long as the smallest live worker cannot hold
// more (the edge follows workers' published windows). No call raises a window
// above the catalog's own.
//
// The package must never run a model, read tensor data, hold a connection or
// import anything above models/.
package catalog

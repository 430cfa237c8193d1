// Package builtin owns the model Bulkhead ships inside its binary: the real
// TinyStories model stories260K (llama, 260K parameters, MIT licence; see
// LICENSE beside this file), which `bulkhead dev` serves when no model is
// given, so a first request returns a readable story.
//
// It never downloads anything and never writes anywhere but the directory it
// is given; the bytes it writes are checked against their SHA-256 first.
package builtin

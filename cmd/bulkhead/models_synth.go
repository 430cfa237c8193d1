package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/bulkhead-ai/bulkhead/models/gguf"
	"github.com/bulkhead-ai/bulkhead/models/synth"
)

func runModelsSynth(_ context.Context, args []string, stdout, stderr io.Writer) error {
	var shapes []string
	for _, s := range synth.Shapes() {
		shapes = append(shapes, s.Name)
	}
	fs := newFlags("models synth", stderr)
	arch := fs.String("arch", "llama", "architecture (llama)")
	shape := fs.String("shape", "", "model shape: "+strings.Join(shapes, ", "))
	typ := fs.String("type", "f32", "weight type: f32, f16, q8_0, q4_0")
	seed := fs.Uint64("seed", 0, "random seed; the same seed writes the same bytes")
	out := fs.String("out", "", "output GGUF file")
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := require(fs, "shape", "out"); err != nil {
		return err
	}
	if *arch != "llama" {
		return fmt.Errorf("%w: --arch %q (only llama)", errUsage, *arch)
	}
	t, err := gguf.ParseType(*typ)
	if err != nil {
		return fmt.Errorf("%w: --type: %v", errUsage, err)
	}
	if err := synth.GenerateFile(synth.Config{Shape: *shape, Type: t, Seed: *seed}, *out); err != nil {
		return err
	}
	_, err = fmt.Fprintf(stdout, "wrote %s: random-weight %s %s (seed %d); its text output is meaningless\n", *out, *shape, t, *seed)
	return err
}

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/bulkhead-ai/bulkhead/models/gguf"
	"github.com/bulkhead-ai/bulkhead/models/synth"
)

// runModelsSynth writes a random-weight model. --arch alone selects that
// architecture's tiny shape; with --shape it must name the shape's
// architecture.
func runModelsSynth(_ context.Context, args []string, stdout, stderr io.Writer) error {
	var shapes, archs []string
	for _, s := range synth.Shapes() {
		shapes = append(shapes, fmt.Sprintf("%s (%s)", s.Name, s.Arch))
	}
	for _, a := range append(synth.Archs(), synth.EncoderArchs()...) {
		archs = append(archs, string(a))
	}
	archs = append(archs, "xlm-roberta")
	fs := newFlags("models synth", stderr)
	arch := fs.String("arch", "", "architecture: "+strings.Join(archs, ", ")+
		"; alone, it selects the architecture's <arch>-tiny shape; with --shape, it must be the shape's")
	shape := fs.String("shape", "", "model shape: "+strings.Join(shapes, ", "))
	typ := fs.String("type", "f32", "weight type: f32, f16, q8_0, q4_0")
	seed := fs.Uint64("seed", 0, "random seed; the same seed writes the same bytes")
	out := fs.String("out", "", "output GGUF file")
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := require(fs, "out"); err != nil {
		return err
	}
	if *shape == "" && *arch == "" {
		return fmt.Errorf("%w: give --shape, --arch or both", errUsage)
	}
	s, err := synth.ResolveShape(*arch, *shape)
	switch {
	case errors.Is(err, synth.ErrUnknownArch):
		return fmt.Errorf("%w: --arch: %w", errUsage, err)
	case errors.Is(err, synth.ErrArchMismatch):
		return fmt.Errorf("%w: --arch %s --shape %s: %w", errUsage, *arch, *shape, err)
	case err != nil:
		return err
	}
	t, err := gguf.ParseType(*typ)
	if err != nil {
		return fmt.Errorf("%w: --type: %v", errUsage, err)
	}
	if err := synth.GenerateFile(synth.Config{Shape: s.Name, Type: t, Seed: *seed}, *out); err != nil {
		return err
	}
	_, err = fmt.Fprintf(stdout, "wrote %s: random-weight %s %s %s (seed %d); its text output is meaningless\n", *out, s.Arch, s.Name, t, *seed)
	return err
}

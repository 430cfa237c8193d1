package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"github.com/bulkhead-ai/bulkhead/models/lora"
	"io"
	"os"
	"path/filepath"
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
	typ := fs.String("type", "f32", "weight type: f32, f16, q8_0, q4_0 (an adapter: f32, f16, bf16)")
	seed := fs.Uint64("seed", 0, "random seed; the same seed writes the same bytes")
	out := fs.String("out", "", "output GGUF file (with --lora: the GGUF adapter)")
	lf := loraSynthFlags(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	if *lf.rank != 0 {
		return synthLoRA(lf, *typ, *seed, *out, stdout)
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

// loraSynth is models synth's adapter flags.
type loraSynth struct {
	rank          *int
	base, targets *string
	peft          *string
	alpha         *float64
}

func loraSynthFlags(fs *flag.FlagSet) loraSynth {
	return loraSynth{
		rank:    fs.Int("lora", 0, "write a random LoRA adapter of this rank (1 to 32) for --base instead of a model"),
		base:    fs.String("base", "", "with --lora: the base model's GGUF file"),
		targets: fs.String("targets", "attn", "with --lora: projections, comma-separated: attn_q, attn_k, attn_v, attn_qkv, attn_output, ffn_gate, ffn_up, ffn_down; attn (all attention), all"),
		peft:    fs.String("peft", "", "with --lora: also write the same adapter as PEFT files into this directory"),
		alpha:   fs.Float64("alpha", 0, "with --lora: lora_alpha (0: twice the rank)"),
	}
}

// synthLoRA writes a random adapter for --base: GGUF to out, PEFT to --peft.
func synthLoRA(f loraSynth, typ string, seed uint64, out string, stdout io.Writer) error {
	if *f.base == "" || (out == "" && *f.peft == "") {
		return fmt.Errorf("%w: --lora needs --base and --out or --peft", errUsage)
	}
	ts, err := lora.ParseTargets(*f.targets)
	if err != nil {
		return fmt.Errorf("%w: --targets: %v", errUsage, err)
	}
	t, err := gguf.ParseType(typ)
	if err != nil {
		return fmt.Errorf("%w: --type: %v", errUsage, err)
	}
	a, err := synth.LoRA(synth.LoRAConfig{Base: *f.base, Rank: *f.rank, Targets: ts, Alpha: float32(*f.alpha), Seed: seed, Type: t})
	if err != nil {
		return err
	}
	if out != "" {
		if err := writeGGUFAdapter(out, a); err != nil {
			return err
		}
	}
	if *f.peft != "" {
		heads, kvHeads, err := synth.HeadCounts(*f.base)
		if err != nil {
			return err
		}
		hf := a
		if a.Arch == "llama" {
			hf = a.Permuted(heads, kvHeads, true)
		}
		if err := os.MkdirAll(*f.peft, 0o755); err != nil {
			return err
		}
		if err := lora.WritePEFT(*f.peft, hf, filepath.Base(*f.base)); err != nil {
			return err
		}
	}
	_, err = fmt.Fprintf(stdout, "wrote a random rank-%d %s adapter (%d matrices, seed %d) for %s\n", a.Rank, a.Arch, 2*len(a.Pairs), seed, *f.base)
	return err
}

func writeGGUFAdapter(path string, a *lora.Adapter) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := lora.WriteGGUF(f, a); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

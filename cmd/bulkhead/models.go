package main

import (
	"context"
	"fmt"
	"io"
)

// modelsCommands are the subcommands of `bulkhead models`.
func modelsCommands() []command {
	return []command{
		{"synth", "write a random-weight model of a real shape (benchmarks and tests)", runModelsSynth},
		{"pull", "download a GGUF model into the model directory", runModelsPull},
		{"list", "list the models in the model directory", runModelsList},
	}
}

func runModels(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 {
		for _, c := range modelsCommands() {
			if c.name == args[0] {
				return c.run(ctx, args[1:], stdout, stderr)
			}
		}
	}
	msg := "bulkhead models synth|pull|list ..."
	for _, c := range modelsCommands() {
		msg += fmt.Sprintf("\n  %-6s %s", c.name, c.summary)
	}
	return fmt.Errorf("%w: %s", errUsage, msg)
}

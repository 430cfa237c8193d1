package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

// command is one subcommand. run returns the error to report; usage errors
// wrap errUsage so they exit 2.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

var errUsage = errors.New("usage")

func commands() []command {
	return []command{
		{"tokenize", "print a text's token ids for a model or vocab-only GGUF file", runTokenize},
		{"chat", "chat templates: `chat render` prints a conversation as a model's template renders it", runChat},
		{"generate", "generate text from a prompt with a GGUF model", runGenerate},
		{"embed", "print the embeddings of texts with a GGUF encoder model (bert)", runEmbed},
		{"models", "model tools: `models synth|pull|list`", runModels},
		{"bench", "benchmarks: `bench engine` (prefill/decode tokens/s), `bench serve` (streams against a live edge)", runBench},
		{"dev", "run everything in one process: NATS, edge, a worker per model, Redis", runDev},
		{"edge", "run the HTTP edge (Workers AI and OpenAI APIs)", runEdgeCmd},
		{"worker", "run a worker that serves jobs from NATS on the engine", runWorkerCmd},
		{"billing", "run the billing consumer: usage events into per-tenant rollups in Redis", runBilling},
		{"usage-export", "read counted usage events as CloudEvents: JSON Lines, or batches POSTed to a meter (OpenMeter)", runUsageExport},
		{"nats", "run a standalone NATS server with JetStream", runNATS},
		{"token", "mint a tenant token with the dev signing key", runToken},
		{"canary", "check a running edge for cross-tenant leaks with canary tenants", runCanary},
		{"finetunes", "your LoRA adapters on a running edge: `finetunes create|upload|list|delete`", runFinetunes},
		{"status", "list the fleet: workers (role, models, KV pool, running, waiting), edges, billing", runFleetStatus},
	}
}

// run dispatches args to a subcommand and returns the process exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		usage(stdout)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	for _, c := range commands() {
		if c.name != args[0] {
			continue
		}
		err := c.run(ctx, args[1:], stdout, stderr)
		switch {
		case err == nil:
			return 0
		case errors.Is(err, flag.ErrHelp):
			return 0
		case errors.Is(err, errUsage):
			fmt.Fprintf(stderr, "bulkhead %s: %v\n", c.name, err)
			return 2
		default:
			fmt.Fprintf(stderr, "bulkhead %s: %v\n", c.name, err)
			return 1
		}
	}
	fmt.Fprintf(stderr, "bulkhead: unknown command %q\n\n", args[0])
	usage(stderr)
	return 2
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "Bulkhead: a serverless inference platform.\n\nUsage: bulkhead <command> [flags]\n\nCommands:")
	cs := commands()
	sort.Slice(cs, func(i, j int) bool { return cs[i].name < cs[j].name })
	for _, c := range cs {
		fmt.Fprintf(w, "  %-10s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nRun `bulkhead <command> --help` for a command's flags.")
}

// newFlags makes a flag set that reports errors instead of exiting. Every flag
// can also be set from the environment as BULKHEAD_<NAME> (upper case, dashes as
// underscores); a flag on the command line wins.
func newFlags(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("bulkhead "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: bulkhead %s [flags]\n\nFlags (each also read from the environment variable shown):\n", name)
		fs.VisitAll(func(f *flag.Flag) {
			def := ""
			if f.DefValue != "" && f.DefValue != "0" && f.DefValue != "false" && f.DefValue != "[]" {
				def = fmt.Sprintf(" (default %s)", f.DefValue)
			}
			fmt.Fprintf(stderr, "  --%s  [%s]\n      %s%s\n", f.Name, envName(f.Name), f.Usage, def)
		})
	}
	return fs
}

// envName is the environment variable that sets a flag.
func envName(flagName string) string {
	return "BULKHEAD_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// parse parses flags, applies BULKHEAD_* variables to flags not given on the
// command line, and refuses positional leftovers.
func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected arguments: %s", errUsage, strings.Join(fs.Args(), " "))
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		v, ok := os.LookupEnv(envName(f.Name))
		if set[f.Name] || !ok || err != nil {
			return
		}
		if e := fs.Set(f.Name, v); e != nil {
			err = fmt.Errorf("%w: %s=%q: %v", errUsage, envName(f.Name), v, e)
		}
	})
	return err
}

// require names the missing flags, if any.
func require(fs *flag.FlagSet, names ...string) error {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var missing []string
	for _, n := range names {
		if !set[n] {
			missing = append(missing, "--"+n)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: missing %s", errUsage, strings.Join(missing, ", "))
	}
	return nil
}

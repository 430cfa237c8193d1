// Command local runs the local cluster of real processes (package local):
//
//	go run ./deploy/local/cmd/local up [--dir D] [--edges host:port,host:port] [--prefills N] [--decoders N]
//	go run ./deploy/local/cmd/local status --dir D
//	go run ./deploy/local/cmd/local down --dir D
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/bulkhead-ai/bulkhead/deploy/local"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		msg := err.Error()
		if !strings.HasPrefix(msg, "local:") { // the package's errors name it already
			msg = "local: " + msg
		}
		fmt.Fprintln(os.Stderr, msg)
		if errors.Is(err, flag.ErrHelp) || errors.Is(err, errUsage) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

var errUsage = errors.New("usage: go run ./deploy/local/cmd/local up|down|status [flags]")

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return errUsage
	}
	fs := flag.NewFlagSet("local "+args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("dir", filepath.Join(os.TempDir(), "bulkhead-local"), "state file, logs, stores and keys")
	var cfg local.Config
	bin := fs.String("bin", "", "the bulkhead binary (default: go build ./cmd/bulkhead into --dir)")
	fs.StringVar(&cfg.Model, "model", "", "NAME=PATH.gguf to serve (default: the built-in model)")
	fs.Func("also-model", "another NAME=PATH.gguf every worker and edge serves (repeatable)", func(v string) error {
		cfg.More = append(cfg.More, v)
		return nil
	})
	edges := fs.String("edges", "127.0.0.1:8787,127.0.0.1:8788", "the two edges' listen addresses (host:0 picks a free port)")
	decoders := fs.Int("decoders", 2, "decode workers")
	prefills := fs.Int("prefills", 1, "prefill workers (the edges route between two or more by prefix and load)")
	fs.DurationVar(&cfg.Grace, "grace", 10*time.Second, "each node's drain grace on SIGTERM")
	fs.BoolVar(&cfg.FailOpen, "quota-fail-open", false, "edges admit requests while Redis is down (default: refuse with 503)")
	fs.DurationVar(&cfg.Timeout, "timeout", 3*time.Minute, "how long up waits for the cluster to serve")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	switch args[0] {
	case "up":
		if *prefills < 0 || *decoders < 0 {
			return fmt.Errorf("%w: --prefills %d, --decoders %d", local.ErrConfig, *prefills, *decoders)
		}
		cfg.Workers = append(slices.Repeat([]string{local.RolePrefill}, *prefills), slices.Repeat([]string{local.RoleDecode}, *decoders)...)
		cfg.Dir, cfg.Bin, cfg.EdgeAddrs, cfg.Progress = *dir, *bin, strings.Split(*edges, ","), stdout
		return up(ctx, cfg, stdout)
	case "down":
		st, err := local.ReadState(*dir)
		if err != nil {
			return err
		}
		if err := st.Down(cfg.Grace); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "local cluster in %s stopped (logs kept in %s)\n", st.Dir, filepath.Join(st.Dir, "logs"))
		return nil
	case "status":
		st, err := local.ReadState(*dir)
		if err != nil {
			return err
		}
		for _, p := range st.Procs {
			fmt.Fprintf(stdout, "%-10s %-8s %-22s pid %-8d alive %v\n", p.Name, p.Role, p.Addr, p.PID, p.Alive())
		}
		return nil
	}
	return errUsage
}

func up(ctx context.Context, cfg local.Config, stdout io.Writer) error {
	if cfg.Bin == "" {
		bin, err := build(ctx, cfg.Dir)
		if err != nil {
			return err
		}
		cfg.Bin = bin
	}
	fmt.Fprintf(stdout, "starting a local cluster in %s\n", cfg.Dir)
	c, err := local.Up(ctx, cfg)
	if err != nil {
		return err
	}
	st := c.State
	fmt.Fprintf(stdout, "\nNATS (JetStream cluster %s, 3 replicas): %s\nRedis: %s\n", local.NATSCluster, st.NATS, st.Redis)
	for _, e := range st.ByRole(local.RoleEdge) {
		fmt.Fprintf(stdout, "edge %s: %s\n", e.Name, c.EdgeURL(e))
	}
	fmt.Fprintf(stdout, "\nstate: %s\nlogs:  %s\n\n", filepath.Join(st.Dir, local.StateFile), filepath.Join(st.Dir, "logs"))
	fmt.Fprintf(stdout, "TOKEN=$(%s token --key-dir %s --tenant acme)\n", cfg.Bin, st.KeyDir)
	e := st.ByRole(local.RoleEdge)[0]
	fmt.Fprintf(stdout, "curl -s %s/ai/run/%s -H \"Authorization: Bearer $TOKEN\" -d '{\"prompt\":\"Once upon a time\"}'\n\n", c.EdgeURL(e), st.Model)
	fmt.Fprintf(stdout, "stop it with: go run ./deploy/local/cmd/local down --dir %s\n", cfg.Dir)
	return nil
}

// build compiles the bulkhead binary (no race detector: the cluster is for
// load) into dir/bin, from the module this command runs in.
func build(ctx context.Context, dir string) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil || strings.TrimSpace(string(out)) == "" {
		return "", fmt.Errorf("local: run from inside the bulkhead module, or give --bin: %v", err)
	}
	root := filepath.Dir(strings.TrimSpace(string(out)))
	bin, err := filepath.Abs(filepath.Join(dir, "bin", "bulkhead"))
	if err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/bulkhead")
	cmd.Dir, cmd.Stderr = root, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("local: go build: %w", err)
	}
	return bin, nil
}

//go:build faults

package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/bulkhead-ai/bulkhead/billing/meter"
	"github.com/bulkhead-ai/bulkhead/queue"
)

// faultFlags are the fault-injection flags. They exist only in a binary
// built with -tags faults (the fault tests build one); the shipped binary
// has none (nofaults.go).
type faultFlags struct {
	exitAfter int64 // billing --fault-exit-after
	holdAt    int   // worker --fault-hold-at
	engineAt  int   // worker --fault-engine-hold-at
}

// registerWorker registers the worker's fault flags.
func (f *faultFlags) registerWorker(fs *flag.FlagSet) {
	fs.IntVar(&f.holdAt, "fault-hold-at", 0, "testing: hold every stream after its token N went out, until the job ends (cancelled, timed out, the worker stopped); longer generations thus never finish (0: never)")
	fs.IntVar(&f.engineAt, "fault-engine-hold-at", 0, "testing: every sequence stops after its token N and keeps its engine slot until its job ends, so the engine stays busy however fast it is (0: never)")
}

// engineHoldAt is the engines' HoldAt (engine.Config) for --fault-engine-hold-at.
func (f *faultFlags) engineHoldAt() int { return f.engineAt }

// workerHook is the worker's AfterToken hook for --fault-hold-at: at token
// N it says so on stderr and waits for the job's context to end.
func (f *faultFlags) workerHook(stderr io.Writer) func(context.Context, *queue.Job, int) {
	if f.holdAt <= 0 {
		return nil
	}
	return func(ctx context.Context, job *queue.Job, n int) {
		if n != f.holdAt {
			return
		}
		fmt.Fprintf(stderr, "worker: --fault-hold-at %d: holding job %s\n", n, job.ID)
		<-ctx.Done()
	}
}

func (f *faultFlags) register(fs *flag.FlagSet) {
	fs.Int64Var(&f.exitAfter, "fault-exit-after", 0, "testing: exit (status 3) right after counting this many events, before acknowledging the last (0: never)")
}

// hook makes the billing process exit mid-event with --fault-exit-after:
// right after counting event n, before acknowledging it.
func (f *faultFlags) hook(cfg *meter.Config, stderr io.Writer) {
	if f.exitAfter <= 0 {
		return
	}
	cfg.AfterCount = func(n int64) {
		if n == f.exitAfter {
			fmt.Fprintf(stderr, "billing: --fault-exit-after %d: exiting with event %d counted and not acknowledged\n", n, n)
			os.Exit(3)
		}
	}
}

//go:build faults

package main

import (
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/bulkhead-ai/bulkhead/billing/meter"
)

// faultFlags are the fault-injection flags. They exist only in a binary
// built with -tags faults (the fault tests build one); the shipped binary
// has none (nofaults.go).
type faultFlags struct {
	exitAfter int64 // billing --fault-exit-after
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

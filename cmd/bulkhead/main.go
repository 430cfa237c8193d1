// Command bulkhead is Bulkhead's one binary: each subcommand wires packages
// together and runs them. See `bulkhead help`.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, cancel := context.WithCancel(context.Background())
	stop := onSignals(cancel)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// onSignals cancels (the node drains) on the first SIGINT or SIGTERM and
// exits at once, status 1, on the second.
func onSignals(cancel context.CancelFunc) (stop func()) {
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		select {
		case <-sigs:
			cancel()
		case <-done:
			return
		}
		select {
		case s := <-sigs:
			fmt.Fprintf(os.Stderr, "bulkhead: second signal (%v): exiting without draining\n", s)
			os.Exit(1)
		case <-done:
		}
	}()
	return func() { signal.Stop(sigs); close(done); cancel() }
}

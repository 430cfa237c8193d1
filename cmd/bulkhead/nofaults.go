//go:build !faults

package main

import (
	"context"
	"flag"
	"io"

	"github.com/bulkhead-ai/bulkhead/billing/meter"
	"github.com/bulkhead-ai/bulkhead/queue"
)

// faultFlags is empty in the shipped binary: fault injection is built only
// with -tags faults (faults.go).
type faultFlags struct{}

func (*faultFlags) register(*flag.FlagSet)        {}
func (*faultFlags) hook(*meter.Config, io.Writer) {}
func (*faultFlags) registerWorker(*flag.FlagSet)  {}
func (*faultFlags) engineHoldAt() int             { return 0 }

func (*faultFlags) workerHook(io.Writer) func(context.Context, *queue.Job, int) { return nil }

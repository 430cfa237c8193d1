//go:build !faults

package main

import (
	"flag"
	"io"

	"github.com/bulkhead-ai/bulkhead/billing/meter"
)

// faultFlags is empty in the shipped binary: fault injection is built only
// with -tags faults (faults.go).
type faultFlags struct{}

func (*faultFlags) register(*flag.FlagSet)        {}
func (*faultFlags) hook(*meter.Config, io.Writer) {}

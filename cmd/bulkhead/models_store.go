package main

import (
	"context"
	"fmt"
	"io"
)

// runModelsPull and runModelsList are placeholders until the model store lands.
func runModelsPull(_ context.Context, _ []string, _, _ io.Writer) error {
	return fmt.Errorf("%w: models pull is not built yet", errUsage)
}

func runModelsList(_ context.Context, _ []string, _, _ io.Writer) error {
	return fmt.Errorf("%w: models list is not built yet", errUsage)
}

package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestSecondSignalExits: the first SIGTERM starts the drain (the context
// ends), a second one exits at once with status 1 while the drain would
// still run. The process is this test binary running signalHelper.
func TestSecondSignalExits(t *testing.T) {
	if os.Getenv("BULKHEAD_SIGNAL_HELPER") == "1" {
		signalHelper()
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestSecondSignalExits$")
	cmd.Env = append(os.Environ(), "BULKHEAD_SIGNAL_HELPER=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewScanner(out)
	expect := func(want string) {
		t.Helper()
		for lines.Scan() {
			if strings.Contains(lines.Text(), want) {
				return
			}
		}
		t.Fatalf("the helper never said %q", want)
	}
	expect("waiting")
	_ = cmd.Process.Signal(syscall.SIGTERM)
	expect("draining")
	start := time.Now()
	_ = cmd.Process.Signal(syscall.SIGTERM)
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("after the second signal: %v, want exit status 1", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("exited %v after the second signal", d)
	}
}

// signalHelper waits for the first signal, then drains forever.
func signalHelper() {
	ctx, cancel := context.WithCancel(context.Background())
	stop := onSignals(cancel)
	defer stop()
	fmt.Println("waiting")
	<-ctx.Done()
	fmt.Println("draining")
	select {} // a drain that never ends: only the second signal stops it
}

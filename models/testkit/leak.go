package testkit

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

// LeakWait is how long Run waits, after a passing run, for the goroutines
// its tests started to end. A run whose goroutines end at once waits not at
// all.
const LeakWait = 10 * time.Second

// Main runs the tests of m and exits with Run's code. A package's tests use
// it as their TestMain:
//
//	func TestMain(m *testing.M) { testkit.Main(m) }
func Main(m *testing.M) { os.Exit(Run(m)) }

// Run runs the tests of m and returns the code to exit with. A run whose
// tests pass fails all the same (code 1, the leaked goroutines' stacks on
// stderr) when goroutines that were not running before the tests are still
// running LeakWait after them: servers, connections, subscriptions, engines,
// pools and workers must all be stopped. A TestMain that sets up something
// for the whole package (a redis-server) calls Run between set-up and
// tear-down. Fuzzing runs skip the check: the fuzzing engine keeps
// goroutines of its own.
func Run(m *testing.M) int {
	before := Running()
	code := m.Run()
	if code != 0 || fuzzing() {
		return code
	}
	if err := before.Leaks(LeakWait); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return code
}

// fuzzing reports whether this process runs with -test.fuzz (the fuzzing
// coordinator or one of its workers).
func fuzzing() bool {
	for _, name := range []string{"test.fuzz", "test.fuzzworker"} {
		if f := flag.Lookup(name); f != nil && f.Value.String() != "" && f.Value.String() != "false" {
			return true
		}
	}
	return false
}

// Snapshot is the set of goroutines running at one moment.
type Snapshot struct {
	ids map[string]bool // goroutine IDs, as the stack dump writes them
}

// Running returns the goroutines running now.
func Running() Snapshot {
	s := Snapshot{ids: map[string]bool{}}
	for _, g := range goroutines() {
		s.ids[g.id] = true
	}
	return s
}

// Leaks polls until every goroutine started after s (except the ones the
// runtime keeps for the process's life) has ended, and returns nil; or,
// once within has passed, an error that counts them and holds their stacks.
func (s Snapshot) Leaks(within time.Duration) error {
	var left []goroutine
	err := poll(within, func() error {
		left = left[:0]
		for _, g := range goroutines() {
			if !s.ids[g.id] && !g.permanent() {
				left = append(left, g)
			}
		}
		if len(left) > 0 {
			return errLeak
		}
		return nil
	})
	if err == nil {
		return nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "goroutine leak: %d goroutines started since the snapshot still run after %v:\n", len(left), within)
	for _, g := range left {
		b.WriteString("\n")
		b.WriteString(g.stack)
		b.WriteString("\n")
	}
	return errors.New(b.String())
}

// errLeak tells poll to keep waiting; Leaks replaces it with the stacks.
var errLeak = errors.New("testkit: goroutines still running")

// goroutine is one entry of the runtime's stack dump.
type goroutine struct {
	id    string // "17" of "goroutine 17 [running]:"
	stack string // the whole entry
}

// permanent reports whether g is one the runtime or the standard library
// starts once and keeps for the life of the process: the signal watcher
// (os/signal, started by the first Notify and by the fuzzing engine).
func (g goroutine) permanent() bool {
	return strings.Contains(g.stack, "os/signal.signal_recv") || strings.Contains(g.stack, "runtime.ensureSigM")
}

// goroutines parses the stacks of all goroutines, the caller's included.
func goroutines() []goroutine {
	var out []goroutine
	for _, entry := range strings.Split(stacks(), "\n\n") {
		rest, ok := strings.CutPrefix(entry, "goroutine ")
		if !ok {
			continue
		}
		id, _, ok := strings.Cut(rest, " ")
		if !ok {
			continue
		}
		out = append(out, goroutine{id: id, stack: entry})
	}
	return out
}

// stacks returns the stack dump of all goroutines.
func stacks() string {
	buf := make([]byte, 1<<16)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return string(buf[:n])
		}
		buf = make([]byte, 2*len(buf))
	}
}

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bulkhead-ai/bulkhead/edge/auth"
	"github.com/bulkhead-ai/bulkhead/edge/canary/canarytest"
)

// TestCanaryExitsNonZeroOnLeak runs `bulkhead canary` against a real edge
// with one planted leak at a time (canarytest): a worker that returns
// another tenant's marker, a response that differs from its reference, an
// over-long prompt that gets served. Each exits 1 naming the problem; with
// no leak it exits 0. Tenants come from --key-dir, or from a --tokens file.
func TestCanaryExitsNonZeroOnLeak(t *testing.T) {
	tests := []struct {
		fault    canarytest.Fault
		tokens   bool                          // --tokens FILE instead of --key-dir
		code     int                           // exit status
		counted  func(col map[string]int) bool // the table's totals show the fault
		mentions string                        // in the problems listed
	}{
		{canarytest.None, false, 0, nil, ""},
		{canarytest.ForeignMarker, false, 1, func(c map[string]int) bool { return c["foreign"] > 0 }, "another tenant's marker"},
		{canarytest.DiffersUnderLoad, true, 1, func(c map[string]int) bool { return c["differ"] > 0 }, "under load"},
		{canarytest.OverlongServed, false, 1, func(c map[string]int) bool { return c["oversize"] > c["refused"] }, "was not refused"},
	}
	for _, tc := range tests {
		t.Run(tc.fault.String(), func(t *testing.T) {
			e := canarytest.Start(t, tc.fault)
			args := []string{"canary", "--edge", e.URL, "--tenants", "2", "--requests", "10", "--concurrency", "2",
				"--max-tokens", "4", "--timeout", "1m"}
			if tc.tokens {
				args = append(args, "--tokens", tokenFile(t, e.KeyDir, "canary-a", "canary-b"))
			} else {
				args = append(args, "--key-dir", e.KeyDir)
			}
			stdout, stderr, code := bulkhead(t, args...)
			if code != tc.code {
				t.Fatalf("exit %d, want %d\n%s\n%s", code, tc.code, stdout, stderr)
			}
			if tc.code == 0 {
				if strings.Contains(stdout, "!") {
					t.Fatalf("no leak planted, but problems listed:\n%s", stdout)
				}
				return
			}
			if !strings.Contains(stderr, errCanaryFailed.Error()) || !strings.Contains(stdout, tc.mentions) || !tc.counted(totals(t, stdout)) {
				t.Fatalf("planted %s: want %q on stderr and %q in the report:\n%s\n%s", tc.fault, errCanaryFailed, tc.mentions, stdout, stderr)
			}
		})
	}
}

// tokenFile writes a `tenant token` file for ids, minted with the dev key
// in keyDir.
func tokenFile(t *testing.T, keyDir string, ids ...string) string {
	t.Helper()
	key, err := auth.LoadOrCreateDevKey(keyDir)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	b.WriteString("# canary tenants\n")
	for _, id := range ids {
		tok, err := key.Mint(id, []string{auth.ScopeRun, auth.ScopeRead}, nil, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "%s %s\n", id, tok)
	}
	path := filepath.Join(t.TempDir(), "tokens.txt")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestCanaryTokenFileErrors(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "tokens.txt")
	if err := os.WriteFile(bad, []byte("acme\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, stderr, code := bulkhead(t, "canary", "--tokens", bad)
	if code != 2 || !strings.Contains(stderr, "want `tenant token` lines") || !strings.Contains(stderr, bad) {
		t.Fatalf("a malformed token file: exit %d, %q; want exit 2 naming the file", code, stderr)
	}
}

// totals sums the canary report table's columns over its tenants.
func totals(t *testing.T, report string) map[string]int {
	t.Helper()
	var header []string
	sum := map[string]int{}
	for _, line := range strings.Split(report, "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) == 0 || strings.HasPrefix(line, "canary:") || strings.HasPrefix(line, "  !"):
		case f[0] == "tenant":
			header = f
		case len(f) == len(header):
			for i, name := range header[1:] {
				var n int
				if _, err := fmt.Sscan(f[i+1], &n); err != nil {
					t.Fatalf("report row %q: %v", line, err)
				}
				sum[name] += n
			}
		}
	}
	if header == nil {
		t.Fatalf("no report table in:\n%s", report)
	}
	return sum
}

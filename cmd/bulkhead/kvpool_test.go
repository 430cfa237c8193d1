package main

import (
	"bufio"
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bulkhead-ai/bulkhead/models/catalog"
	"github.com/bulkhead-ai/bulkhead/models/refdatatest"
	"github.com/bulkhead-ai/bulkhead/models/testkit"
)

func TestParseMemAvailable(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    int64
		wantErr bool
	}{
		{"a real meminfo", "MemTotal:       24576000 kB\nMemFree:         1000000 kB\nMemAvailable:   23057100 kB\nBuffers:          1024 kB\n", 23057100 * 1024, false},
		{"the first line", "MemAvailable: 1 kB\n", 1024, false},
		{"zero", "MemAvailable: 0 kB\n", 0, false},
		{"no MemAvailable line (kernels before 3.14)", "MemTotal: 24576000 kB\nMemFree: 1000000 kB\n", 0, true},
		{"empty", "", 0, true},
		{"not a number", "MemAvailable: lots kB\n", 0, true},
		{"negative", "MemAvailable: -5 kB\n", 0, true},
		{"no unit", "MemAvailable: 5\n", 0, true},
		{"another unit", "MemAvailable: 5 MB\n", 0, true},
		{"overflows in bytes", "MemAvailable: 9223372036854775807 kB\n", 0, true},
		{"a name only starting so", "MemAvailableX: 5 kB\n", 0, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseMemAvailable(strings.NewReader(tc.in))
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Fatalf("got %d, %v; want %d, error %v", got, err, tc.want, tc.wantErr)
			}
		})
	}
}

func TestParseMemoryMax(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    int64
		wantErr bool
	}{
		{"no limit", "max\n", 0, false},
		{"a limit", "8589934592\n", 8 << 30, false},
		{"without a newline", "1048576", 1 << 20, false},
		{"empty", "", 0, true},
		{"not a number", "lots\n", 0, true},
		{"negative", "-1\n", 0, true},
		{"two values", "1 2\n", 0, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseMemoryMax(strings.NewReader(tc.in))
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Fatalf("got %d, %v; want %d, error %v", got, err, tc.want, tc.wantErr)
			}
		})
	}
}

// TestReadMemory reads MemAvailable and the cgroup limit from files: the
// lower one counts, and a file that cannot be read is said at WARN.
func TestReadMemory(t *testing.T) {
	const avail = "MemAvailable: 4194304 kB\n" // 4 GiB
	tests := []struct {
		name      string
		meminfo   string // "" : no file
		memoryMax string // "" : no file
		want      memory
		warn      bool
	}{
		{"no cgroup file", avail, "", memory{4 << 30, "MemAvailable"}, false},
		{"no cgroup limit", avail, "max\n", memory{4 << 30, "MemAvailable"}, false},
		{"a lower cgroup limit", avail, "1073741824\n", memory{1 << 30, "cgroup memory.max"}, false},
		{"a higher cgroup limit", avail, "17179869184\n", memory{4 << 30, "MemAvailable"}, false},
		{"a malformed cgroup limit", avail, "lots\n", memory{4 << 30, "MemAvailable"}, true},
		{"no meminfo", "", "1073741824\n", memory{}, true},
		{"a malformed meminfo", "MemAvailable: lots kB\n", "", memory{}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			meminfo, memoryMax := filepath.Join(dir, "meminfo"), filepath.Join(dir, "memory.max")
			for path, text := range map[string]string{meminfo: tc.meminfo, memoryMax: tc.memoryMax} {
				if text == "" {
					continue
				}
				if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			var logs syncBuffer
			if got := readMemory(newLogger(&logs), meminfo, memoryMax); got != tc.want {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
			if warned := strings.Contains(logs.String(), "level=WARN"); warned != tc.warn {
				t.Fatalf("WARN %v, want %v; log:\n%s", warned, tc.warn, logs.String())
			}
		})
	}
}

// TestPoolSize checks each model's pool: the flag, else the catalog, else a
// share of memory split among the pools, in whole pages, between one window
// and 2 × max batch windows.
func TestPoolSize(t *testing.T) {
	const pageBytes = 10240 // 640 bytes a token (stories260K) × 16
	gib := memory{1 << 30, "MemAvailable"}
	tests := []struct {
		name   string
		flags  engineFlags
		model  catalog.Model
		budget kvBudget
		want   poolSpec
	}{
		{"the flag wins over the catalog", engineFlags{kvTokens: 300, maxBatch: 16}, catalog.Model{ContextWindow: 256, KVPoolTokens: 512},
			kvBudget{gib, 0.25, 1}, poolSpec{tokens: 300, source: poolFromFlag}},
		{"the catalog's tokens", engineFlags{maxBatch: 16}, catalog.Model{ContextWindow: 256, KVPoolTokens: 512},
			kvBudget{gib, 0.25, 1}, poolSpec{tokens: 512, source: poolFromCatalog}},
		{"the catalog's bytes", engineFlags{maxBatch: 16}, catalog.Model{ContextWindow: 256, KVPoolBytes: 1 << 20},
			kvBudget{gib, 0.25, 1}, poolSpec{bytes: 1 << 20, source: poolFromCatalog}},
		// 1 GiB × 0.25 = 26214 pages = 419424 tokens; the cap is 2 × 16 × 2^15 = 2^20.
		{"a share of memory", engineFlags{maxBatch: 16}, catalog.Model{ContextWindow: 1 << 15},
			kvBudget{gib, 0.25, 1}, poolSpec{tokens: 26214 * 16, source: poolFromMemory}},
		{"split among four pools", engineFlags{maxBatch: 16}, catalog.Model{ContextWindow: 1 << 15},
			kvBudget{gib, 0.25, 4}, poolSpec{tokens: 6553 * 16, source: poolFromMemory}},
		{"a smaller share", engineFlags{maxBatch: 16}, catalog.Model{ContextWindow: 1 << 15},
			kvBudget{gib, 0.1, 1}, poolSpec{tokens: 10485 * 16, source: poolFromMemory}},
		{"at least one window", engineFlags{maxBatch: 16}, catalog.Model{ContextWindow: 1 << 17},
			kvBudget{gib, 0.25, 8}, poolSpec{tokens: 1 << 17, source: poolFromMemory, bound: boundFloor}},
		{"at most 2 × max batch windows", engineFlags{maxBatch: 16}, catalog.Model{ContextWindow: 2048},
			kvBudget{gib, 0.25, 1}, poolSpec{tokens: 2 * 16 * 2048, source: poolFromMemory, bound: boundCap}},
		{"the cap follows --max-batch", engineFlags{maxBatch: 1}, catalog.Model{ContextWindow: 2048},
			kvBudget{gib, 0.25, 1}, poolSpec{tokens: 2 * 2048, source: poolFromMemory, bound: boundCap}},
		{"a huge --max-batch does not overflow the cap", engineFlags{maxBatch: math.MaxInt}, catalog.Model{ContextWindow: 2048},
			kvBudget{gib, 0.25, 1}, poolSpec{tokens: 26214 * 16, source: poolFromMemory}},
		{"a share smaller than a page: one window", engineFlags{maxBatch: 16}, catalog.Model{ContextWindow: 2048},
			kvBudget{memory{1000, "MemAvailable"}, 0.25, 1}, poolSpec{tokens: 2048, source: poolFromMemory, bound: boundFloor}},
		{"memory unknown: one window", engineFlags{maxBatch: 16}, catalog.Model{ContextWindow: 2048},
			kvBudget{memory{}, 0.25, 1}, poolSpec{tokens: 2048, source: poolFromFloor}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.flags.pool(&tc.model, pageBytes, tc.budget); got != tc.want {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestKVBudget checks the flags' validation and the split among models and
// workers, and that memory is read only for a pool sized from it.
func TestKVBudget(t *testing.T) {
	path := refdatatest.Path(t, "models/stories260K.gguf")
	two, err := catalog.FromFlags([]string{"a=" + path, "b=" + path})
	if err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	log := newLogger(&logs)
	for _, tc := range []struct {
		name     string
		flags    engineFlags
		workers  int
		wantWays int
		readsMem bool
	}{
		{"two models, one worker", engineFlags{memShare: 0.25, maxBatch: 16}, 1, 2, true},
		{"two models, three workers", engineFlags{memShare: 0.25, maxBatch: 16}, 3, 6, true},
		{"every pool from the flag: memory unread", engineFlags{memShare: 0.25, maxBatch: 16, kvTokens: 512}, 1, 2, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := os.Stat(procMeminfo); err != nil && tc.readsMem {
				t.Skipf("no %s: %v", procMeminfo, err)
			}
			b := tc.flags.budget(log, two, tc.workers)
			if b.ways != tc.wantWays || b.share != tc.flags.memShare || (b.mem.bytes > 0) != tc.readsMem {
				t.Fatalf("got %+v, want %d ways, share %v, memory read %v", b, tc.wantWays, tc.flags.memShare, tc.readsMem)
			}
		})
	}
	for _, tc := range []struct {
		name  string
		flags engineFlags
		want  string // in the error; "" for none
	}{
		{"the default", engineFlags{memShare: defaultKVMemoryShare, maxBatch: 16}, ""},
		{"the largest share", engineFlags{memShare: 0.9, maxBatch: 1}, ""},
		{"a zero share", engineFlags{memShare: 0, maxBatch: 16}, "--kv-memory-share"},
		{"a negative share", engineFlags{memShare: -0.1, maxBatch: 16}, "--kv-memory-share"},
		{"too large a share", engineFlags{memShare: 0.95, maxBatch: 16}, "--kv-memory-share"},
		{"not a number", engineFlags{memShare: math.NaN(), maxBatch: 16}, "--kv-memory-share"},
		{"no batch", engineFlags{memShare: 0.25, maxBatch: 0}, "--max-batch"},
		{"drafting off", engineFlags{memShare: 0.25, maxBatch: 16, draft: -1}, ""},
		{"the most drafts", engineFlags{memShare: 0.25, maxBatch: 16, draft: 16}, ""},
		{"too many drafts", engineFlags{memShare: 0.25, maxBatch: 16, draft: 17}, "--draft-tokens"},
		{"a negative draft", engineFlags{memShare: 0.25, maxBatch: 16, draft: -2}, "--draft-tokens"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.flags.validatePool()
			if (err == nil) != (tc.want == "") || err != nil && !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one naming %q", err, tc.want)
			}
		})
	}
}

// TestDefaultPoolFromMemory runs `bulkhead worker` with its defaults on
// stories260K: the pool, sized from this machine's memory, holds more than
// one window, stays within the cap (2 × 16 × 2048 tokens of 640 bytes: 40
// MiB), and the "model ready" line says so. No NATS listens on port 1: the
// worker logs its models before it connects.
func TestDefaultPoolFromMemory(t *testing.T) {
	if _, err := os.Stat(procMeminfo); err != nil {
		t.Skipf("no %s: %v", procMeminfo, err)
	}
	model := refdatatest.Path(t, "models/stories260K.gguf")
	ctx, cancel := context.WithCancel(context.Background())
	var out, errb syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"worker", "--nats", "nats://127.0.0.1:1", "--model", clampModel + "=" + model, "--threads", "1", "--log-format", "json"}, &out, &errb)
	}()
	defer func() { cancel(); <-done }()
	var ready map[string]any
	testkit.Poll(t, time.Minute, testkit.Cond("the model ready line", func() bool {
		ready = readyLine(errb.String())
		return ready != nil
	}))
	const window, limit, perToken = 2048, 2 * 16 * 2048, 640
	tokens, bytes := int(ready["kv_pool_tokens"].(float64)), int64(ready["kv_pool_bytes"].(float64))
	t.Logf("default pool on this machine: %d tokens, %d bytes (memory %v bytes from %v)", tokens, bytes, ready["memory_bytes"], ready["memory_source"])
	switch {
	case ready["kv_pool_source"] != poolFromMemory || ready["kv_memory_share"] != defaultKVMemoryShare || ready["kv_pools"] != 1.0:
		t.Fatalf("source fields %v", ready)
	case tokens <= window || tokens > limit:
		t.Fatalf("pool of %d tokens, want more than one window (%d) and at most %d", tokens, window, limit)
	case bytes != int64(tokens)*perToken:
		t.Fatalf("pool of %d bytes, want %d tokens × %d", bytes, tokens, perToken)
	}
}

// readyLine returns the first JSON log record with msg "model ready", or nil.
func readyLine(log string) map[string]any {
	sc := bufio.NewScanner(strings.NewReader(log))
	for sc.Scan() {
		var rec map[string]any
		if json.Unmarshal(sc.Bytes(), &rec) == nil && rec["msg"] == "model ready" {
			return rec
		}
	}
	return nil
}

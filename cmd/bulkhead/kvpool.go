package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math"
	"os"
	"strconv"
	"strings"

	"github.com/bulkhead-ai/bulkhead/models/catalog"
	"github.com/bulkhead-ai/bulkhead/workers/kvcache"
)

// Where the machine's memory is read, once at start-up.
const (
	procMeminfo     = "/proc/meminfo"
	cgroupMemoryMax = "/sys/fs/cgroup/memory.max" // cgroup v2: the container's limit
)

// --kv-memory-share: its default, and the largest share accepted (the rest
// holds the weights, the activations and everything else on the machine).
const (
	defaultKVMemoryShare = 0.25
	maxKVMemoryShare     = 0.9
)

// Where a pool's size came from (the "kv_pool_source" log field).
const (
	poolFromFlag    = "--kv-pool-tokens"
	poolFromCatalog = "catalog"
	poolFromMemory  = "--kv-memory-share"
	poolFromFloor   = "one context window: memory unknown"
)

// memory is what start-up found of the machine's memory.
type memory struct {
	bytes  int64  // available for the pools; 0 when unknown
	source string // "MemAvailable" or "cgroup memory.max", the lower of the two
}

// readMemory reads MemAvailable from the file meminfo, bounded by the cgroup v2
// limit in the file memoryMax where that is set and lower. A meminfo that
// cannot be read or parsed gives an unknown memory, said at WARN (the pools
// sized from memory fall back to one context window). A memoryMax that is
// absent or "max" bounds nothing; one that cannot be read or parsed is said
// at WARN and bounds nothing.
func readMemory(log *slog.Logger, meminfo, memoryMax string) memory {
	avail, err := readFile(meminfo, parseMemAvailable)
	if err != nil {
		log.Warn("cannot read the machine's memory: KV pools not sized by the catalog or --kv-pool-tokens hold one context window",
			"file", meminfo, "err", err)
		return memory{}
	}
	m := memory{bytes: avail, source: "MemAvailable"}
	limit, err := readFile(memoryMax, parseMemoryMax)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		log.Warn("cannot read the cgroup's memory limit: sizing KV pools from MemAvailable alone", "file", memoryMax, "err", err)
	case limit > 0 && limit < m.bytes:
		m = memory{bytes: limit, source: "cgroup memory.max"}
	}
	return m
}

// readFile opens path and parses it with parse.
func readFile(path string, parse func(io.Reader) (int64, error)) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	n, err := parse(f)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	return n, nil
}

// parseMemAvailable returns the bytes of /proc/meminfo's MemAvailable line
// ("MemAvailable:   123456 kB"). A missing line, a value that is not a
// non-negative number of kB, or one that overflows is an error.
func parseMemAvailable(r io.Reader) (int64, error) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 || f[0] != "MemAvailable:" {
			continue
		}
		if len(f) != 3 || f[2] != "kB" {
			return 0, fmt.Errorf("malformed MemAvailable line %q", sc.Text())
		}
		kb, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil || kb < 0 || kb > math.MaxInt64/1024 {
			return 0, fmt.Errorf("malformed MemAvailable value %q", f[1])
		}
		return kb * 1024, nil
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, errors.New("no MemAvailable line")
}

// parseMemoryMax returns the bytes of a cgroup v2 memory.max file, or 0 for
// "max" (no limit). Anything but "max" or a non-negative integer is an error.
func parseMemoryMax(r io.Reader) (int64, error) {
	b, err := io.ReadAll(io.LimitReader(r, 64))
	if err != nil {
		return 0, err
	}
	s := strings.TrimSpace(string(b))
	if s == "max" {
		return 0, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("malformed memory.max %q", s)
	}
	return n, nil
}

// kvBudget is the memory for the KV pools sized from memory: a share of the
// machine's, split evenly among the pools a process builds.
type kvBudget struct {
	mem   memory
	share float64 // --kv-memory-share
	ways  int     // pools splitting it: models × workers
}

// perPool returns one pool's bytes, or 0 when the memory is unknown.
func (b kvBudget) perPool() int64 {
	if b.mem.bytes <= 0 || b.ways <= 0 {
		return 0
	}
	return int64(float64(b.mem.bytes) * b.share / float64(b.ways))
}

// poolSpec is one model's KV pool size and where it came from.
type poolSpec struct {
	tokens int   // the size in tokens, or
	bytes  int64 // in bytes (the catalog's kv_pool_bytes)
	source string
	// bound, for a size from memory, names the bound that set it, if any.
	bound string
}

// Bounds of a pool sized from memory (the "kv_pool_bound" log field).
const (
	boundFloor = "floor: one context window"
	boundCap   = "cap: 2 × --max-batch × context window"
)

// pool sizes model cm's pool, whose pages take pageBytes each: --kv-pool-tokens
// if set, else the catalog's size, else b's share per pool in whole pages, at
// least one context window (an unknown memory gives that floor) and at most
// 2 × --max-batch context windows (every batch slot at a full window, and as
// much again for cached prefixes).
func (e *engineFlags) pool(cm *catalog.Model, pageBytes int64, b kvBudget) poolSpec {
	switch {
	case e.kvTokens > 0:
		return poolSpec{tokens: e.kvTokens, source: poolFromFlag}
	case cm.KVPoolTokens > 0 || cm.KVPoolBytes > 0:
		return poolSpec{tokens: cm.KVPoolTokens, bytes: cm.KVPoolBytes, source: poolFromCatalog}
	}
	if b.mem.bytes <= 0 {
		return poolSpec{tokens: cm.ContextWindow, source: poolFromFloor}
	}
	s := poolSpec{source: poolFromMemory}
	window := int64(cm.ContextWindow)
	tokens := b.perPool() / pageBytes * pageSize
	limit := int64(math.MaxInt64)
	if int64(e.maxBatch) <= limit/(2*window) {
		limit = 2 * window * int64(e.maxBatch)
	}
	switch {
	case tokens < window:
		tokens, s.bound = window, boundFloor
	case tokens > limit:
		tokens, s.bound = limit, boundCap
	}
	s.tokens = int(tokens)
	return s
}

// attrs are the log fields saying where s came from, b being the budget.
func (s poolSpec) attrs(b kvBudget) []any {
	a := []any{"kv_pool_source", s.source}
	if s.source == poolFromMemory {
		a = append(a, "kv_memory_share", b.share, "memory_bytes", b.mem.bytes, "memory_source", b.mem.source, "kv_pools", b.ways)
		if s.bound != "" {
			a = append(a, "kv_pool_bound", s.bound)
		}
	}
	return a
}

// validatePool checks the flags that size the pools: --kv-memory-share in
// (0, 0.9], and --max-batch at least 1 (it bounds a pool sized from memory).
func (e *engineFlags) validatePool() error {
	if _, err := kvcache.ParseDType(e.kvType); err != nil {
		return fmt.Errorf("%w: --kv-type %q must be f16, q8_0 or q4_0", errUsage, e.kvType)
	}
	if !(e.memShare > 0 && e.memShare <= maxKVMemoryShare) {
		return fmt.Errorf("%w: --kv-memory-share %v must lie in (0, %v]", errUsage, e.memShare, maxKVMemoryShare)
	}
	if e.maxBatch < 1 {
		return fmt.Errorf("%w: --max-batch %d must be at least 1", errUsage, e.maxBatch)
	}
	if e.draft < -1 || e.draft > catalog.MaxDraftTokens {
		return fmt.Errorf("%w: --draft-tokens %d must lie in [-1, %d] (0: the default, -1: off)", errUsage, e.draft, catalog.MaxDraftTokens)
	}
	return nil
}

// budget is the memory for the pools of cat's models sized from memory, each
// of workers workers building a pool for every model. It reads the machine's
// memory when some model takes its pool from memory: call it once at
// start-up, after validatePool.
func (e *engineFlags) budget(log *slog.Logger, cat *catalog.Catalog, workers int) kvBudget {
	b := kvBudget{share: e.memShare, ways: max(1, generators(cat)) * workers}
	if e.kvTokens > 0 {
		return b
	}
	for _, cm := range cat.Models() {
		if !catalog.Encoder(cm.Task) && cm.KVPoolTokens == 0 && cm.KVPoolBytes == 0 {
			b.mem = readMemory(log, procMeminfo, cgroupMemoryMax)
			break
		}
	}
	return b
}

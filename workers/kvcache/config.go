package kvcache

import (
	"fmt"
	"math"

	"github.com/bulkhead-ai/bulkhead/workers/kernels"
)

// DefaultPageSize is the number of token slots per page when Config.PageSize is 0.
const DefaultPageSize = 16

// MaxPageSize bounds Config.PageSize.
const MaxPageSize = 1 << 16

// MaxPages bounds the number of pages in a pool (page ids are int32).
const MaxPages = math.MaxInt32

// PoisonF16 is the half-precision quiet NaN that a poisoning pool writes into
// every slot of a free page.
const PoisonF16 uint16 = 0x7e00

// ScrubMode says what happens to a page's contents when it is freed.
type ScrubMode int

const (
	// ScrubOnFree zeroes the written slots of a page when it is freed (default).
	ScrubOnFree ScrubMode = iota
	// ScrubNever leaves freed pages as they are. Isolation then rests on View's
	// written-slot checks alone.
	ScrubNever
)

// String names the mode.
func (m ScrubMode) String() string {
	switch m {
	case ScrubOnFree:
		return "ScrubOnFree"
	case ScrubNever:
		return "ScrubNever"
	}
	return fmt.Sprintf("ScrubMode(%d)", int(m))
}

// DType is the element type a pool stores K and V in. A quantized type
// stores each row as 32-value blocks (kernels.QuantizeQ8Halves,
// QuantizeQ4Halves), so it needs HeadDim to be a multiple of 32.
type DType string

const (
	DTypeF16  DType = "f16"  // IEEE half precision (the default)
	DTypeQ8_0 DType = "q8_0" // 8-bit blocks: 34 bytes per 32 values
	DTypeQ4_0 DType = "q4_0" // 4-bit blocks: 18 bytes per 32 values
)

// DTypes lists the element types a pool can store, default first.
var DTypes = []DType{DTypeF16, DTypeQ8_0, DTypeQ4_0}

// ParseDType returns the element type named s ("" is DTypeF16).
func ParseDType(s string) (DType, error) {
	switch d := DType(s); d {
	case "":
		return DTypeF16, nil
	case DTypeF16, DTypeQ8_0, DTypeQ4_0:
		return d, nil
	}
	return "", fmt.Errorf("%w: KV type %q is not one of f16, q8_0, q4_0", ErrConfig, s)
}

// RowHalves is the storage, in 2-byte units, of one row of n values (n a
// multiple of 32 for the quantized types).
func (d DType) RowHalves(n int) int {
	switch d {
	case DTypeQ8_0:
		return n / 32 * kernels.Q8Halves
	case DTypeQ4_0:
		return n / 32 * kernels.Q4Halves
	}
	return n
}

// Config describes a pool. Set exactly one of Pages and MemoryBytes.
type Config struct {
	Layers   int // transformer layers; > 0
	KVHeads  int // key/value heads per layer; > 0
	HeadDim  int // values per head; > 0
	PageSize int // token slots per page, a power of two; 0 means DefaultPageSize

	Pages       int   // number of pages, or
	MemoryBytes int64 // a byte budget: as many whole pages as fit

	// Poison fills every free page (at construction and on free) with
	// PoisonF16, so a read of a slot nobody wrote shows up as NaN. Debug aid;
	// it takes precedence over Scrub.
	Poison bool
	Scrub  ScrubMode

	// DType is the element type K and V are stored in; "" means DTypeF16.
	// A poisoned quantized row has NaN scales, so it still reads as NaN.
	DType DType

	// Kernels converts written K and V rows to half precision (bitwise the
	// same on every set; the quantized types use the kernels package's
	// quantizers, which have one form); the zero Set is the process's own.
	Kernels kernels.Set
}

// KVDim is the number of values in one K (or V) row: KVHeads*HeadDim.
func (c Config) KVDim() int { return c.KVHeads * c.HeadDim }

// rowHalves is one K (or V) row's storage in halves.
func (c Config) rowHalves() int { return c.DType.RowHalves(c.KVDim()) }

// Validate applies the defaults and resolves Pages from MemoryBytes (which
// becomes 0), or reports the first bad field, wrapping ErrConfig. It is
// idempotent; New calls it on its own copy.
func (c *Config) Validate() error {
	if err := c.checkShape(); err != nil {
		return err
	}
	if c.PageSize == 0 {
		c.PageSize = DefaultPageSize
	}
	if c.DType == "" {
		c.DType = DTypeF16
	}
	switch c.Scrub {
	case ScrubOnFree, ScrubNever:
	default:
		return fmt.Errorf("%w: Scrub %d is not a ScrubMode", ErrConfig, int(c.Scrub))
	}
	if c.Pages < 0 {
		return fmt.Errorf("%w: Pages must not be negative, got %d", ErrConfig, c.Pages)
	}
	if c.MemoryBytes < 0 {
		return fmt.Errorf("%w: MemoryBytes must not be negative, got %d", ErrConfig, c.MemoryBytes)
	}
	if (c.Pages == 0) == (c.MemoryBytes == 0) {
		return fmt.Errorf("%w: set exactly one of Pages (%d) and MemoryBytes (%d)", ErrConfig, c.Pages, c.MemoryBytes)
	}
	per, err := c.BytesPerPage()
	if err != nil {
		return err
	}
	if c.MemoryBytes > 0 {
		n := c.MemoryBytes / per
		if n == 0 {
			return fmt.Errorf("%w: MemoryBytes %d is smaller than one page (%d bytes)", ErrConfig, c.MemoryBytes, per)
		}
		if n > MaxPages {
			return fmt.Errorf("%w: MemoryBytes %d makes %d pages, more than %d", ErrConfig, c.MemoryBytes, n, MaxPages)
		}
		c.Pages = int(n)
		c.MemoryBytes = 0
	}
	if c.Pages > MaxPages {
		return fmt.Errorf("%w: Pages %d is more than %d", ErrConfig, c.Pages, MaxPages)
	}
	// Each layer's K slice holds Pages*PageSize*KVDim halves; its byte size
	// times 2*Layers must fit an int64 and its length an int.
	if int64(c.Pages) > math.MaxInt64/per {
		return fmt.Errorf("%w: %d pages of %d bytes overflow", ErrConfig, c.Pages, per)
	}
	return nil
}

// checkShape validates Layers, KVHeads, HeadDim and PageSize and that one page's
// byte size fits an int64.
func (c Config) checkShape() error {
	for _, f := range []struct {
		name string
		v    int
	}{{"Layers", c.Layers}, {"KVHeads", c.KVHeads}, {"HeadDim", c.HeadDim}} {
		if f.v <= 0 {
			return fmt.Errorf("%w: %s must be > 0, got %d", ErrConfig, f.name, f.v)
		}
	}
	if _, err := ParseDType(string(c.DType)); err != nil {
		return err
	}
	if c.DType != DTypeF16 && c.DType != "" && c.HeadDim%32 != 0 {
		return fmt.Errorf("%w: KV type %s stores 32-value blocks, and head size %d is not a multiple of 32", ErrConfig, c.DType, c.HeadDim)
	}
	if c.PageSize < 0 || c.PageSize > MaxPageSize || c.PageSize&(c.PageSize-1) != 0 {
		return fmt.Errorf("%w: PageSize must be 0 or a power of two up to %d, got %d", ErrConfig, MaxPageSize, c.PageSize)
	}
	ps := int64(c.PageSize)
	if ps == 0 {
		ps = DefaultPageSize
	}
	// 2 (K and V) * 2 bytes * Layers * PageSize * KVHeads * HeadDim, an
	// upper bound of every type's size
	b := int64(4)
	for _, f := range []int64{int64(c.Layers), ps, int64(c.KVHeads), int64(c.HeadDim)} {
		if b > math.MaxInt64/f {
			return fmt.Errorf("%w: page of %d layers x %d slots x %d heads x %d dims overflows", ErrConfig, c.Layers, ps, c.KVHeads, c.HeadDim)
		}
		b *= f
	}
	return nil
}

// BytesPerPage returns the bytes one page takes: K and V, every layer, all
// PageSize slots, two bytes a value for F16 (34/32 for Q8_0, 18/32 for
// Q4_0). It validates the shape fields only.
func (c Config) BytesPerPage() (int64, error) {
	if err := c.checkShape(); err != nil {
		return 0, err
	}
	ps := c.PageSize
	if ps == 0 {
		ps = DefaultPageSize
	}
	return 4 * int64(c.Layers) * int64(ps) * int64(c.rowHalves()), nil
}

// BytesForTokens returns the bytes of the whole pages one sequence of the given
// number of tokens needs, so a caller can check that a pool holds at least one
// request at its advertised context window.
func (c Config) BytesForTokens(tokens int) (int64, error) {
	if tokens < 0 {
		return 0, fmt.Errorf("%w: tokens must not be negative, got %d", ErrInvalidArgument, tokens)
	}
	per, err := c.BytesPerPage()
	if err != nil {
		return 0, err
	}
	pages := int64(PagesForTokens(tokens, c.PageSize))
	if pages > 0 && per > math.MaxInt64/pages {
		return 0, fmt.Errorf("%w: %d tokens need more than %d bytes", ErrInvalidArgument, tokens, int64(math.MaxInt64))
	}
	return pages * per, nil
}

// PagesForTokens returns the number of pages of pageSize slots needed to hold
// tokens tokens. A pageSize <= 0 means DefaultPageSize; tokens <= 0 needs none.
func PagesForTokens(tokens, pageSize int) int {
	if pageSize <= 0 {
		pageSize = DefaultPageSize
	}
	if tokens <= 0 {
		return 0
	}
	n := tokens / pageSize
	if tokens%pageSize != 0 {
		n++
	}
	return n
}

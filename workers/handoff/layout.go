package handoff

import "fmt"

// The element types of K and V in the pages this package knows how to size
// (kvcache.DType): IEEE half precision, two bytes a value; llama.cpp's 8-bit
// and 4-bit blocks, 34 and 18 bytes per 32 values.
const (
	DTypeF16  = "f16"
	DTypeQ8_0 = "q8_0"
	DTypeQ4_0 = "q4_0"
)

// blockBytes is the bytes per 32 values of each quantized element type.
var blockBytes = map[string]int{DTypeQ8_0: 34, DTypeQ4_0: 18}

// Upper bounds on a Layout's dimensions. They keep every size computation far
// from overflow whatever a manifest claims.
const (
	maxLayers   = 1 << 10
	maxKVHeads  = 1 << 10
	maxHeadDim  = 1 << 12
	maxPageSize = 1 << 12
)

// Layout is the shape of a KV page. It has the same fields as kvcache.Layout,
// so either converts to the other with a plain conversion.
type Layout struct {
	Layers   int    `json:"layers"`
	KVHeads  int    `json:"kv_heads"`
	HeadDim  int    `json:"head_dim"`
	PageSize int    `json:"page_size"` // token slots per page
	DType    string `json:"dtype"`     // element type of K and V: DTypeF16, DTypeQ8_0 or DTypeQ4_0
}

// Validate reports a dimension out of range or an unknown element type.
func (l Layout) Validate() error {
	check := func(name string, v, hi int) error {
		if v < 1 || v > hi {
			return fmt.Errorf("%w: layout %s %d out of range [1, %d]", ErrManifest, name, v, hi)
		}
		return nil
	}
	for _, c := range []struct {
		name  string
		v, hi int
	}{
		{"layers", l.Layers, maxLayers},
		{"kv_heads", l.KVHeads, maxKVHeads},
		{"head_dim", l.HeadDim, maxHeadDim},
		{"page_size", l.PageSize, maxPageSize},
	} {
		if err := check(c.name, c.v, c.hi); err != nil {
			return err
		}
	}
	if _, ok := blockBytes[l.DType]; ok {
		if l.HeadDim%32 != 0 {
			return fmt.Errorf("%w: layout dtype %s with head_dim %d, not a multiple of 32", ErrManifest, l.DType, l.HeadDim)
		}
	} else if l.DType != DTypeF16 {
		return fmt.Errorf("%w: layout dtype %q, want %q, %q or %q", ErrManifest, l.DType, DTypeF16, DTypeQ8_0, DTypeQ4_0)
	}
	return nil
}

// PageBytes is the serialized size of a page holding written token slots at
// every layer: per layer a 4-byte count, then the K rows and the V rows, each
// KVHeads*HeadDim values per slot in the layout's element type. It assumes a
// valid layout.
func (l Layout) PageBytes(written int) int {
	row := 2 * l.KVHeads * l.HeadDim
	if b, ok := blockBytes[l.DType]; ok {
		row = l.KVHeads * l.HeadDim / 32 * b
	}
	return l.Layers * (4 + 2*written*row)
}

// pageCount is the number of pages prompt tokens fill.
func (l Layout) pageCount(tokens int) int {
	return (tokens + l.PageSize - 1) / l.PageSize
}

// writtenIn is how many of tokens fall in page i of pages.
func (l Layout) writtenIn(i, tokens int) int {
	return min(l.PageSize, tokens-i*l.PageSize)
}

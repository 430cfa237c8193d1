package handoff

import "fmt"

// DTypeF16 is the element type of K and V in the pages this package knows how
// to size: IEEE half precision, two bytes.
const DTypeF16 = "f16"

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
	DType    string `json:"dtype"`     // element type of K and V; DTypeF16
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
	if l.DType != DTypeF16 {
		return fmt.Errorf("%w: layout dtype %q, want %q", ErrManifest, l.DType, DTypeF16)
	}
	return nil
}

// PageBytes is the serialized size of a page holding written token slots at
// every layer: per layer a 4-byte count, then the K rows and the V rows, each
// KVHeads*HeadDim two-byte halves per slot. It assumes a valid layout.
func (l Layout) PageBytes(written int) int {
	return l.Layers * (4 + 2*2*written*l.KVHeads*l.HeadDim)
}

// pageCount is the number of pages prompt tokens fill.
func (l Layout) pageCount(tokens int) int {
	return (tokens + l.PageSize - 1) / l.PageSize
}

// writtenIn is how many of tokens fall in page i of pages.
func (l Layout) writtenIn(i, tokens int) int {
	return min(l.PageSize, tokens-i*l.PageSize)
}

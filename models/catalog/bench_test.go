package catalog

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/bulkhead-ai/bulkhead/models/refdatatest"
)

// BenchmarkLookup is the edge's per-request path: find the model, read its
// window and prices.
func BenchmarkLookup(b *testing.B) {
	c := testCatalog()
	var sink float64
	for b.Loop() {
		m, ok := c.Lookup("@cf/b/two")
		if !ok {
			b.Fatal("missing")
		}
		sink += m.Prices.Neurons(m.ContextWindow, 64)
	}
	_ = sink
}

func BenchmarkNeurons(b *testing.B) {
	p := DefaultPrices()
	var sink float64
	for b.Loop() {
		sink += p.Neurons(1234, 567)
	}
	_ = sink
}

func BenchmarkParseExample(b *testing.B) {
	data, err := os.ReadFile(filepath.Join("..", "catalog.yaml"))
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, err := Parse(data, "/models"); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkResolveStories260K(b *testing.B) {
	c, err := FromFlags([]string{"s=" + refdatatest.Path(b, "models/stories260K.gguf")})
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if err := c.Resolve(); err != nil {
			b.Fatal(err)
		}
	}
}

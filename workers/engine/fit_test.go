package engine

import (
	"errors"
	"testing"

	"github.com/bulkhead-ai/bulkhead/workers/kvcache"
)

// TestPoolFit checks the one pool-fit rule as New applies it: the window an
// engine serves for each way of sizing its pool, and the *PoolError's numbers
// when the pool cannot hold one request at the window.
func TestPoolFit(t *testing.T) {
	m := loadStories(t)
	h := m.Hyper
	per, err := kvcache.Config{Layers: h.Layers, KVHeads: h.KVHeads, HeadDim: h.HeadDim, PageSize: 16}.BytesPerPage()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		cfg     Config
		want    int        // window served
		wantErr *PoolError // nil when the engine starts
	}{
		{"one full window by default", Config{Context: 2048}, 2048, nil},
		{"a window off the page size", Config{Context: 100}, 100, nil},
		{"a pool that holds the window", Config{Context: 2048, KVTokens: 4096}, 2048, nil},
		{"too small", Config{Context: 2048, KVTokens: 256}, 0, &PoolError{Pages: 16, PageSize: 16, Context: 2048}},
		{"tokens round up to a page", Config{Context: 2048, KVTokens: 300}, 0, &PoolError{Pages: 19, PageSize: 16, Context: 2048}},
		{"bytes round down to whole pages", Config{Context: 2048, KVBytes: 10*per + per - 1}, 0, &PoolError{Pages: 10, PageSize: 16, Context: 2048}},
		{"too small, clamped", Config{Context: 2048, KVTokens: 256, ClampContext: true}, 256, nil},
		{"clamped to whole pages", Config{Context: 2048, KVTokens: 250, ClampContext: true}, 256, nil},
		{"bytes clamped to whole pages", Config{Context: 2048, KVBytes: 10*per + per - 1, ClampContext: true}, 160, nil},
		{"a pool that fits needs no clamp", Config{Context: 2048, KVTokens: 2048, ClampContext: true}, 2048, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.Threads = 1
			e, err := New(nil, m, tc.cfg)
			if tc.wantErr != nil {
				var pe *PoolError
				if !errors.As(err, &pe) || *pe != *tc.wantErr || !errors.Is(err, ErrPoolTooSmall) || !errors.Is(err, ErrConfig) {
					t.Fatalf("error %v, want %+v matching ErrPoolTooSmall and ErrConfig", err, *tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("refused: %v", err)
			}
			runEngine(t, e)
			if got := e.Context(); got != tc.want {
				t.Fatalf("window %d, want %d", got, tc.want)
			}
		})
	}
	t.Run("an empty pool is refused even clamped", func(t *testing.T) {
		if _, err := fitContext(0, 16, 2048, true); !errors.Is(err, ErrPoolTooSmall) {
			t.Fatalf("error %v, want ErrPoolTooSmall", err)
		}
	})
}

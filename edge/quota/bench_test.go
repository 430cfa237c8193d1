package quota

import (
	"context"
	"testing"
)

func BenchmarkAcquireRelease(b *testing.B) {
	tests := []struct {
		name string
		cfg  Config
	}{
		{name: "all limits", cfg: Config{RequestsPerMinute: 1 << 30, MaxConcurrent: 1 << 20, DailyNeurons: 1e18}},
		{name: "concurrency only", cfg: Config{MaxConcurrent: 1 << 20}},
	}
	for _, tc := range tests {
		b.Run(tc.name, func(b *testing.B) {
			q := newQuota(b, newRedis(b), tc.cfg)
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				release, err := q.Acquire(ctx, "bench")
				if err != nil {
					b.Fatal(err)
				}
				release(Usage{Neurons: 1})
			}
		})
	}
}

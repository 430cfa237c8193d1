package ledger

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/bulkhead-ai/bulkhead/queue"
)

// BenchmarkRecord is the billing consumer's hot path: one script per event.
func BenchmarkRecord(b *testing.B) {
	l, err := New(newRedis(b, 6), Config{})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	at := time.Now()
	i := 0
	for b.Loop() {
		i++
		if _, err := l.Record(ctx, event("r"+strconv.Itoa(i), "acme", "m", at, 100, 10, 50, 12345, queue.OutcomeStop)); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkQuery7DaysHourly reads a week of hourly buckets.
func BenchmarkQuery7DaysHourly(b *testing.B) {
	l, err := New(newRedis(b, 7), Config{})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	now := time.Now().UTC()
	for i := range 168 {
		if _, err := l.Record(ctx, event("r"+strconv.Itoa(i), "acme", "m", now.Add(-time.Duration(i)*time.Hour), 100, 0, 50, 1, queue.OutcomeStop)); err != nil {
			b.Fatal(err)
		}
	}
	for b.Loop() {
		if _, err := l.Query(ctx, Query{Tenant: "acme", From: now.Add(-7 * 24 * time.Hour), To: now, Granularity: Hour}); err != nil {
			b.Fatal(err)
		}
	}
}

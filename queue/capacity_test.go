package queue

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/bulkhead-ai/bulkhead/models/testkit"
)

func TestPublishCapacityAndCapacities(t *testing.T) {
	const model = "@cf/test/model"
	tests := []struct {
		name    string
		publish []Capacity
		want    []int // sorted windows Capacities(model) returns
		wantErr error // from the last publish
	}{
		{"none", nil, nil, nil},
		{"one worker", []Capacity{{model, 256, "w1", false}}, []int{256}, nil},
		{"two workers", []Capacity{{model, 2048, "w1", false}, {model, 256, "w2", false}}, []int{256, 2048}, nil},
		{"a worker republishes a new window", []Capacity{{model, 2048, "w1", false}, {model, 512, "w1", false}}, []int{512}, nil},
		{"other models do not count", []Capacity{{model, 1024, "w1", false}, {"@cf/test/other", 16, "w1", false}}, []int{1024}, nil},
		{"a model whose name extends another's", []Capacity{{model, 1024, "w1", false}, {model + "x", 16, "w1", false}}, []int{1024}, nil},
		{"zero window refused", []Capacity{{model, 0, "w1", false}}, nil, ErrBadMessage},
		{"no worker refused", []Capacity{{model, 64, "", false}}, nil, ErrBadMessage},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			env := startEnv(t, StreamConfig{})
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			var err error
			for _, c := range tc.publish {
				err = PublishCapacity(ctx, env.js, c.Model, c.Context, c.Worker)
			}
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("publish: %v, want %v", err, tc.wantErr)
			}
			got, err := Capacities(ctx, env.js, model)
			if err != nil {
				t.Fatal(err)
			}
			slices.Sort(got)
			if !slices.Equal(got, tc.want) {
				t.Fatalf("Capacities = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestSetupCapacityRefusesShortTTL(t *testing.T) {
	env := startEnv(t, StreamConfig{})
	if _, err := SetupCapacity(context.Background(), env.js, 10*time.Millisecond); !errors.Is(err, ErrConfig) {
		t.Fatalf("SetupCapacity(10ms) = %v, want ErrConfig", err)
	}
}

// watchLog collects what WatchCapacity applies.
type watchLog struct {
	mu   sync.Mutex
	last Fleet
	n    int
}

func (l *watchLog) apply(f Fleet) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.last, l.n = f, l.n+1
}

// is compares the windows last applied with want, and the loading models
// with loading (none when not given).
func (l *watchLog) is(want map[string]int, loading ...string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if fmt.Sprint(l.last.Windows) != fmt.Sprint(want) {
		return fmt.Errorf("watch applied %v, want %v", l.last.Windows, want)
	}
	wantLoading := map[string]bool{}
	for _, m := range loading {
		wantLoading[m] = true
	}
	if fmt.Sprint(l.last.Loading) != fmt.Sprint(wantLoading) {
		return fmt.Errorf("watch applied loading %v, want %v", l.last.Loading, wantLoading)
	}
	return nil
}

func TestWatchCapacity(t *testing.T) {
	const a, b = "@cf/test/a", "@cf/test/b"
	// A short TTL so a dead worker ages out within the test.
	env := startEnv(t, StreamConfig{CapacityTTL: time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := PublishCapacity(ctx, env.js, a, 2048, "before"); err != nil {
		t.Fatal(err)
	}
	var log watchLog
	wctx, stop := context.WithCancel(ctx)
	w, err := WatchCapacity(wctx, env.js, log.apply)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { stop(); w.Wait() }()
	if err := log.is(map[string]int{a: 2048}); err != nil {
		t.Fatalf("before WatchCapacity returned: %v", err)
	}

	// A worker that keeps its records alive while the other ages out.
	kctx, stopKeep := context.WithCancel(ctx)
	kept := make(chan error, 1)
	go func() { kept <- KeepCapacity(kctx, env.js, "alive", map[string]int{a: 1024, b: 256}, nil) }()
	steps := []struct {
		name    string
		do      func() error
		want    map[string]int
		loading []string
	}{
		{"the live worker's windows lower the minimum", func() error { return nil }, map[string]int{a: 1024, b: 256}, nil},
		{"a smaller window from a new worker", func() error { return PublishCapacity(ctx, env.js, b, 128, "small") }, map[string]int{a: 1024, b: 128}, nil},
		{"withdrawn workers stop counting", func() error {
			return errors.Join(WithdrawCapacity(ctx, env.js, b, "small"), WithdrawCapacity(ctx, env.js, a, "before"))
		}, map[string]int{a: 1024, b: 256}, nil},
		{"a stopped keeper withdraws its records", func() error { stopKeep(); return <-kept }, map[string]int{}, nil},
		{"a worker loading a model adds no window", func() error { return loadThenStop(ctx, env.js, "loader", b) }, map[string]int{}, []string{b}},
		{"then serves it", func() error { return PublishCapacity(ctx, env.js, b, 32, "loader") }, map[string]int{b: 32}, nil},
		{"a worker that will die publishes", func() error { return PublishCapacity(ctx, env.js, b, 64, "dies") }, map[string]int{b: 32}, nil},
		{"the dead workers age out", func() error { return nil }, map[string]int{}, nil},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			if err := s.do(); err != nil {
				t.Fatal(err)
			}
			testkit.Poll(t, 10*time.Second, func() error { return log.is(s.want, s.loading...) })
		})
	}
}

// loadThenStop publishes, through KeepLoading, that worker loads model, and
// stops the keeper once it has: the record stays until replaced or aged out.
func loadThenStop(ctx context.Context, js jetstream.JetStream, worker, model string) error {
	kctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- KeepLoading(kctx, js, worker, []string{model}, nil) }()
	kv, err := SetupCapacity(ctx, js, 0)
	if err == nil {
		deadline := time.Now().Add(10 * time.Second)
		for _, err = kv.Get(ctx, CapacityKey(model, worker)); err != nil && time.Now().Before(deadline); _, err = kv.Get(ctx, CapacityKey(model, worker)) {
			time.Sleep(5 * time.Millisecond)
		}
	}
	stop()
	return errors.Join(err, <-done)
}

// TestKeepCapacityOutlivesTTL shows a kept record is still there after several
// TTLs: the keeper republishes before it ages out.
func TestKeepCapacityOutlivesTTL(t *testing.T) {
	env := startEnv(t, StreamConfig{CapacityTTL: time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	kctx, stop := context.WithCancel(ctx)
	kept := make(chan error, 1)
	go func() { kept <- KeepCapacity(kctx, env.js, "w", map[string]int{"m": 300}, nil) }()
	testkit.Poll(t, 10*time.Second, func() error {
		if got, err := Capacities(ctx, env.js, "m"); err != nil || !slices.Equal(got, []int{300}) {
			return fmt.Errorf("Capacities = %v, %v; want [300] once the keeper has published", got, err)
		}
		return nil
	})
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		got, err := Capacities(ctx, env.js, "m")
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, []int{300}) {
			t.Fatalf("Capacities = %v while the keeper runs, want [300]", got)
		}
		time.Sleep(100 * time.Millisecond)
	}
	stop()
	if err := <-kept; err != nil {
		t.Fatal(err)
	}
	got, err := Capacities(ctx, env.js, "m")
	if err != nil || len(got) != 0 {
		t.Fatalf("after the keeper stopped: %v, %v; want none", got, err)
	}
}

// FuzzDecodeCapacity: any bucket value either decodes to a record that
// validates (a model, a worker, a positive window) or is refused.
func FuzzDecodeCapacity(f *testing.F) {
	for _, s := range []string{
		`{"model":"@cf/a/b","context":256,"worker":"w1"}`,
		`{"model":"m","context":0,"worker":"w"}`,
		`{"model":"m","context":0,"worker":"w","loading":true}`,
		`{"model":"m","context":5,"worker":"w","loading":true}`,
		`{"model":"m","context":-5,"worker":"w"}`,
		`{"model":"","context":5,"worker":"w"}`,
		`{"context":"256"}`,
		`null`, ``, `[]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := decodeCapacity(b)
		if err != nil {
			if !errors.Is(err, ErrBadMessage) {
				t.Fatalf("error %v does not wrap ErrBadMessage", err)
			}
			return
		}
		if c.Model == "" || c.Worker == "" || (c.Context <= 0) != c.Loading || c.Context < 0 {
			t.Fatalf("accepted an invalid record %+v", c)
		}
	})
}

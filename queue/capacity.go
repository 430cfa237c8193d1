package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// CapacityBucket is the JetStream KV bucket where workers publish, per model,
// the context window their KV pool can hold. Every record ages out after the
// bucket's TTL unless its worker publishes it again, so a dead worker's
// window stops counting without anyone cleaning up after it.
const CapacityBucket = "bulkhead_capacity"

// DefaultCapacityTTL is the capacity bucket's TTL when no node has created the
// bucket with another. A live worker republishes every third of it.
const DefaultCapacityTTL = 30 * time.Second

// Capacity is one worker's record for one model: the window it serves the
// model at, or, while it is still loading the model, that it will serve it
// (Loading, no window yet).
type Capacity struct {
	Model   string `json:"model"`             // catalog name
	Context int    `json:"context"`           // the window, in tokens, the worker serves the model at; 0 while loading
	Worker  string `json:"worker"`            // the worker's id
	Loading bool   `json:"loading,omitempty"` // the worker is loading the model and serves nothing yet
}

func (c Capacity) validate() error {
	switch {
	case c.Model == "":
		return fmt.Errorf("%w: capacity record without a model", ErrBadMessage)
	case c.Worker == "":
		return fmt.Errorf("%w: capacity record of %s without a worker", ErrBadMessage, c.Model)
	case c.Loading:
		if c.Context != 0 {
			return fmt.Errorf("%w: loading record of %s from %s has context %d", ErrBadMessage, c.Model, c.Worker, c.Context)
		}
	case c.Context <= 0:
		return fmt.Errorf("%w: capacity record of %s from %s has context %d", ErrBadMessage, c.Model, c.Worker, c.Context)
	}
	return nil
}

// CapacityKey is the bucket key of worker's record for model: one KV token for
// the model (ModelToken) and one for the worker, so a model's records can be
// listed with the filter ModelToken(model)+".*".
func CapacityKey(model, worker string) string {
	return ModelToken(model) + "." + ModelToken(worker)
}

// SetupCapacity creates the capacity bucket with the given TTL (0: the
// default) if it does not exist, and returns it. An existing bucket is used as
// it is: the first node to create it fixes its TTL. The bucket writes a marker
// when a record ages out, so watchers see dead workers leave.
func SetupCapacity(ctx context.Context, js jetstream.JetStream, ttl time.Duration) (jetstream.KeyValue, error) {
	return setupCapacity(ctx, js, ttl, 0)
}

// setupCapacity is SetupCapacity that also gives the bucket replicas
// replicas (0: create with one, leave an existing bucket's as they are):
// Setup's way of replicating a bucket that a worker created first.
func setupCapacity(ctx context.Context, js jetstream.JetStream, ttl time.Duration, replicas int) (jetstream.KeyValue, error) {
	if ttl == 0 {
		ttl = DefaultCapacityTTL
	}
	if ttl < time.Second {
		return nil, fmt.Errorf("%w: capacity TTL %v is under one second", ErrConfig, ttl)
	}
	kv, err := js.KeyValue(ctx, CapacityBucket)
	if err == nil {
		return kv, replicate(ctx, js, "KV_"+CapacityBucket, replicas)
	}
	if !errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, fmt.Errorf("queue: bucket %s: %w", CapacityBucket, err)
	}
	kv, err = js.CreateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:         CapacityBucket,
		Description:    "Bulkhead worker context windows per model; records age out",
		History:        1,
		TTL:            ttl,
		LimitMarkerTTL: ttl,
		Storage:        jetstream.MemoryStorage,
		Replicas:       max(replicas, 1),
	})
	if errors.Is(err, jetstream.ErrBucketExists) {
		// Another node created it between our look-up and our create.
		kv, err = js.KeyValue(ctx, CapacityBucket)
	}
	if err != nil {
		return nil, fmt.Errorf("queue: bucket %s: %w", CapacityBucket, err)
	}
	return kv, nil
}

// replicate gives stream replicas replicas if it has fewer or more (0: leave
// it as it is).
func replicate(ctx context.Context, js jetstream.JetStream, stream string, replicas int) error {
	if replicas == 0 {
		return nil
	}
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return fmt.Errorf("queue: stream %s: %w", stream, err)
	}
	cfg := s.CachedInfo().Config
	if cfg.Replicas == replicas {
		return nil
	}
	cfg.Replicas = replicas
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		return fmt.Errorf("queue: stream %s to %d replicas: %w", stream, replicas, err)
	}
	return nil
}

// PublishCapacity records that worker serves model at a context window of
// context tokens. The record lives for the bucket's TTL; KeepCapacity
// republishes it while the worker runs.
func PublishCapacity(ctx context.Context, js jetstream.JetStream, model string, context int, worker string) error {
	kv, err := SetupCapacity(ctx, js, 0)
	if err != nil {
		return err
	}
	return putCapacity(ctx, kv, Capacity{Model: model, Context: context, Worker: worker})
}

func putCapacity(ctx context.Context, kv jetstream.KeyValue, c Capacity) error {
	if err := c.validate(); err != nil {
		return err
	}
	b, err := json.Marshal(c)
	if err != nil {
		return err
	}
	if _, err := kv.Put(ctx, CapacityKey(c.Model, c.Worker), b); err != nil {
		return fmt.Errorf("queue: publishing capacity of %s from %s: %w", c.Model, c.Worker, err)
	}
	return nil
}

// PublishLoading records that worker is loading model (KeepLoading keeps it
// published).
func PublishLoading(ctx context.Context, js jetstream.JetStream, model, worker string) error {
	kv, err := SetupCapacity(ctx, js, 0)
	if err != nil {
		return err
	}
	return putCapacity(ctx, kv, Capacity{Model: model, Worker: worker, Loading: true})
}

// WithdrawCapacity deletes worker's record for model, for a worker that stops
// cleanly: watchers see it leave at once instead of after the TTL.
func WithdrawCapacity(ctx context.Context, js jetstream.JetStream, model, worker string) error {
	kv, err := SetupCapacity(ctx, js, 0)
	if err != nil {
		return err
	}
	if err := kv.Delete(ctx, CapacityKey(model, worker)); err != nil {
		return fmt.Errorf("queue: withdrawing capacity of %s from %s: %w", model, worker, err)
	}
	return nil
}

// KeepCapacity publishes worker's window for each model (name → tokens), then
// republishes every third of the bucket's TTL until ctx ends, when it
// withdraws the records (within a few seconds) and returns nil. A failed
// republish is reported to onError (if not nil) and retried at the next tick;
// only the first publish's failure is returned. The records replace any
// loading records of KeepLoading under the same worker id.
func KeepCapacity(ctx context.Context, js jetstream.JetStream, worker string, windows map[string]int, onError func(error)) error {
	records := make([]Capacity, 0, len(windows))
	for model, window := range windows {
		records = append(records, Capacity{Model: model, Context: window, Worker: worker})
	}
	return keepRecords(ctx, js, records, true, onError)
}

// KeepLoading publishes, for each of models, that worker is loading it, and
// republishes it like KeepCapacity until ctx ends. It leaves the records
// when ctx ends: KeepCapacity replaces them once the worker serves, and a
// worker that fails to load withdraws them (WithdrawCapacity) or lets them
// age out. Edges queue jobs for a model being loaded instead of refusing
// them (LiveModels).
func KeepLoading(ctx context.Context, js jetstream.JetStream, worker string, models []string, onError func(error)) error {
	records := make([]Capacity, 0, len(models))
	for _, model := range models {
		records = append(records, Capacity{Model: model, Worker: worker, Loading: true})
	}
	return keepRecords(ctx, js, records, false, onError)
}

// keepRecords publishes records, then again every third of the bucket's TTL
// until ctx ends; with withdraw, it deletes them then.
func keepRecords(ctx context.Context, js jetstream.JetStream, records []Capacity, withdraw bool, onError func(error)) error {
	kv, err := SetupCapacity(ctx, js, 0)
	if err != nil {
		return err
	}
	st, err := kv.Status(ctx)
	if err != nil {
		return fmt.Errorf("queue: bucket %s: %w", CapacityBucket, err)
	}
	publish := func() error {
		var errs []error
		for _, c := range records {
			errs = append(errs, putCapacity(ctx, kv, c))
		}
		return errors.Join(errs...)
	}
	withdrawAll := func() {
		if !withdraw {
			return
		}
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		for _, c := range records {
			if err := kv.Delete(wctx, CapacityKey(c.Model, c.Worker)); err != nil && onError != nil {
				onError(fmt.Errorf("queue: withdrawing capacity of %s from %s: %w", c.Model, c.Worker, err))
			}
		}
	}
	if err := publish(); err != nil {
		// Some records may have landed, or all of them with the context
		// ending before their acks: take them back.
		withdrawAll()
		return err
	}
	tick := time.NewTicker(max(st.TTL()/3, 100*time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			if err := publish(); err != nil && ctx.Err() == nil && onError != nil {
				onError(err)
			}
		case <-ctx.Done():
			withdrawAll()
			return nil
		}
	}
}

// Capacities returns the windows the live workers serving model have
// published, one per worker, in no particular order; none when no worker
// serves it.
func Capacities(ctx context.Context, js jetstream.JetStream, model string) ([]int, error) {
	kv, err := SetupCapacity(ctx, js, 0)
	if err != nil {
		return nil, err
	}
	w, err := kv.Watch(ctx, ModelToken(model)+".*", jetstream.IgnoreDeletes())
	if err != nil {
		return nil, fmt.Errorf("queue: reading capacity of %s: %w", model, err)
	}
	defer stopWatch(w)
	var out []int
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case e, ok := <-w.Updates():
			if !ok {
				return nil, fmt.Errorf("queue: reading capacity of %s: watcher closed", model)
			}
			if e == nil { // every current record has been delivered
				return out, nil
			}
			c, err := decodeCapacity(e.Value())
			if err != nil || c.Model != model || c.Loading {
				continue // a record we cannot trust, or a worker still loading, does not count
			}
			out = append(out, c.Context)
		}
	}
}

func decodeCapacity(b []byte) (Capacity, error) {
	var c Capacity
	if err := json.Unmarshal(b, &c); err != nil {
		return Capacity{}, fmt.Errorf("%w: capacity record: %v", ErrBadMessage, err)
	}
	return c, c.validate()
}

// CapacityWatch follows the capacity bucket. WatchCapacity starts one.
type CapacityWatch struct {
	done chan struct{} // closed when the watching goroutine returns
}

// Fleet is what the capacity bucket says of the models at one moment.
type Fleet struct {
	Windows map[string]int  // the smallest window each model's live workers serve; absent: none serves it
	Loading map[string]bool // models some worker is loading (and none may serve yet)
}

// WatchCapacity calls apply with the fleet the bucket's records describe:
// first once every current record has been read, before it returns, and then
// after every change (a worker's record arriving, changing, being withdrawn
// or ageing out) until ctx ends. apply runs on one goroutine at a time and
// owns the maps it is given. Records that do not decode are ignored.
func WatchCapacity(ctx context.Context, js jetstream.JetStream, apply func(Fleet)) (*CapacityWatch, error) {
	kv, err := SetupCapacity(ctx, js, 0)
	if err != nil {
		return nil, err
	}
	w, err := kv.WatchAll(ctx)
	if err != nil {
		return nil, fmt.Errorf("queue: watching %s: %w", CapacityBucket, err)
	}
	records := map[string]Capacity{} // by key; only the watching goroutine touches it after start-up
	update := func(e jetstream.KeyValueEntry) {
		if e.Operation() != jetstream.KeyValuePut {
			delete(records, e.Key())
			return
		}
		c, err := decodeCapacity(e.Value())
		if err != nil || CapacityKey(c.Model, c.Worker) != e.Key() {
			delete(records, e.Key())
			return
		}
		records[e.Key()] = c
	}
	minimums := func() Fleet {
		f := Fleet{Windows: map[string]int{}, Loading: map[string]bool{}}
		for _, c := range records {
			if c.Loading {
				f.Loading[c.Model] = true
				continue
			}
			if cur, ok := f.Windows[c.Model]; !ok || c.Context < cur {
				f.Windows[c.Model] = c.Context
			}
		}
		return f
	}
	// Read the current records first, so the caller starts from them.
	for initial := true; initial; {
		select {
		case <-ctx.Done():
			stopWatch(w)
			return nil, ctx.Err()
		case e, ok := <-w.Updates():
			if !ok {
				return nil, fmt.Errorf("queue: watching %s: watcher closed", CapacityBucket)
			}
			if e == nil {
				initial = false
				continue
			}
			update(e)
		}
	}
	apply(minimums())
	cw := &CapacityWatch{done: make(chan struct{})}
	go func() {
		defer close(cw.done)
		defer stopWatch(w)
		for {
			select {
			case <-ctx.Done():
				return
			case e, ok := <-w.Updates():
				if !ok {
					return
				}
				if e == nil {
					continue
				}
				update(e)
				apply(minimums())
			}
		}
	}()
	return cw, nil
}

// Wait blocks until the watch has stopped: its context ended or its NATS
// connection closed.
func (w *CapacityWatch) Wait() { <-w.done }

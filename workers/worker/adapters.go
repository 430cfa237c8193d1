package worker

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/bulkhead-ai/bulkhead/queue"
	"github.com/bulkhead-ai/bulkhead/workers/engine"
)

// DefaultLoRAMemory is a worker's default budget for loaded LoRA adapters
// (Config.LoRAMemory).
const DefaultLoRAMemory = 1 << 30

// adapterLoadTimeout bounds fetching and loading one adapter.
const adapterLoadTimeout = time.Minute

// Adapter failures. Each ends the job that needed the adapter with an
// error frame, never the worker.
var (
	// errAdapterBudget: one adapter needs more than Config.LoRAMemory.
	errAdapterBudget = errors.New("worker: LoRA adapter exceeds the worker's adapter memory")
)

// adapters holds the LoRA adapters a worker loaded, by model, tenant and
// adapter digest, in an LRU bounded by a memory budget. An adapter is
// fetched from the job's tenant's objects only (queue.ReadAdapterFile:
// the tenant is part of the object name), its files checked against the
// sha256s the job carries, written under dir, loaded by the engine, and
// the files removed. Evicting an adapter only drops the cache's reference:
// requests running with it keep it until they end.
type adapters struct {
	log    *slog.Logger
	js     jetstream.JetStream
	dir    string
	budget int64
	m      *Metrics
	worker string

	objMu sync.Mutex            // guards obj (apart from mu: opening it waits on the bus)
	obj   jetstream.ObjectStore // opened at the first fetch

	mu      sync.Mutex                 // guards the fields below
	lru     *list.List                 // of *loadedAdapter, most recently used first
	byKey   map[string]*list.Element   // by adapterKey
	loading map[string]*adapterLoading // loads in progress, by adapterKey
	used    int64                      // bytes of the adapters in lru
}

type loadedAdapter struct {
	key string
	a   *engine.Adapter
}

// adapterLoading is one load in progress; done closes when a and err are
// set.
type adapterLoading struct {
	done chan struct{}
	a    *engine.Adapter
	err  error
}

func newAdapters(log *slog.Logger, js jetstream.JetStream, cfg *Config) *adapters {
	return &adapters{log: log, js: js, dir: cfg.LoRADir, budget: cfg.LoRAMemory, m: cfg.Metrics, worker: cfg.Name,
		lru: list.New(), byKey: map[string]*list.Element{}, loading: map[string]*adapterLoading{}}
}

func adapterKey(model, tenant string, ref *queue.LoRARef) string {
	return model + "\x00" + tenant + "\x00" + ref.ID + "\x00" + ref.Digest()
}

// get returns job's adapter bound to eng's model: from the cache, or
// fetched and loaded now (one load per adapter at a time; others wait
// for it within ctx).
func (c *adapters) get(ctx context.Context, job *queue.Job, eng *engine.Engine) (*engine.Adapter, error) {
	key := adapterKey(job.Model, job.Tenant, job.LoRA)
	c.mu.Lock()
	if el, ok := c.byKey[key]; ok {
		c.lru.MoveToFront(el)
		c.mu.Unlock()
		return el.Value.(*loadedAdapter).a, nil
	}
	l, waiting := c.loading[key]
	if !waiting {
		l = &adapterLoading{done: make(chan struct{})}
		c.loading[key] = l
	}
	c.mu.Unlock()
	if waiting {
		select {
		case <-l.done:
			return l.a, l.err
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
	}
	// The load outlives the job that started it (others may wait for
	// it), within adapterLoadTimeout.
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), adapterLoadTimeout)
	l.a, l.err = c.load(lctx, job, eng)
	cancel()
	c.mu.Lock()
	delete(c.loading, key)
	if l.err == nil {
		c.add(key, l.a)
	}
	c.mu.Unlock()
	c.m.adapterLoad(c.worker, l.err)
	close(l.done)
	return l.a, l.err
}

// add puts a in the cache and evicts the least recently used adapters
// until the cache fits its budget again. c.mu is held.
func (c *adapters) add(key string, a *engine.Adapter) {
	c.byKey[key] = c.lru.PushFront(&loadedAdapter{key: key, a: a})
	c.used += a.Bytes()
	for c.used > c.budget && c.lru.Len() > 1 {
		el := c.lru.Back()
		old := el.Value.(*loadedAdapter)
		c.lru.Remove(el)
		delete(c.byKey, old.key)
		c.used -= old.a.Bytes()
		c.m.adapterEvicted(c.worker)
	}
	c.m.adaptersResident(c.worker, c.lru.Len(), c.used)
}

// load fetches job's adapter files, writes them into a directory of their
// own under c.dir, loads them on eng's model and removes the files.
func (c *adapters) load(ctx context.Context, job *queue.Job, eng *engine.Engine) (*engine.Adapter, error) {
	obj, err := c.store(ctx)
	if err != nil {
		return nil, err
	}
	ref := job.LoRA
	digest := ref.Digest()
	dir, err := os.MkdirTemp(c.dir, "lora-")
	if err != nil {
		return nil, fmt.Errorf("worker: adapter directory: %w", err)
	}
	defer os.RemoveAll(dir)
	path := dir // a PEFT directory, or the GGUF file
	for _, f := range ref.Files {
		b, err := queue.ReadAdapterFile(ctx, obj, job.Tenant, ref.ID, f)
		if err != nil {
			return nil, err
		}
		name := filepath.Join(dir, filepath.Base(f.Name))
		if err := os.WriteFile(name, b, 0o600); err != nil {
			return nil, fmt.Errorf("worker: writing adapter file: %w", err)
		}
		if queue.IsGGUFFile(f.Name) {
			path = name
		}
	}
	a, err := engine.LoadAdapter(eng.Model(), path, 1, digest)
	if err != nil {
		return nil, err
	}
	if a.Bytes() > c.budget {
		return nil, fmt.Errorf("%w: %d bytes, the budget is %d", errAdapterBudget, a.Bytes(), c.budget)
	}
	c.log.Info("LoRA adapter loaded", "model", job.Model, "lora", ref.ID, "bytes", a.Bytes())
	return a, nil
}

// store opens the adapters object store once.
func (c *adapters) store(ctx context.Context) (jetstream.ObjectStore, error) {
	c.objMu.Lock()
	defer c.objMu.Unlock()
	if c.obj != nil {
		return c.obj, nil
	}
	obj, err := queue.OpenAdapters(ctx, c.js)
	if err != nil {
		return nil, err
	}
	c.obj = obj
	return obj, nil
}

// adapterRefusal is how a job whose adapter failed ends: a store that is
// down or full is unavailable (worth a retry); anything else (missing
// file, wrong sha256, an adapter that does not fit the model or the
// budget) is the adapter's failure.
func adapterRefusal(err error) *refusal {
	if errors.Is(err, queue.ErrUnavailable) {
		return &refusal{queue.ErrKindUnavailable, "the LoRA adapter could not be fetched; retry"}
	}
	msg := "the LoRA adapter could not be loaded"
	switch {
	case errors.Is(err, queue.ErrFinetuneNotFound):
		msg = "the LoRA adapter's files are gone (deleted meanwhile?)"
	case errors.Is(err, queue.ErrAdapterDigest):
		msg = "the LoRA adapter's files do not match their sha256"
	case errors.Is(err, engine.ErrAdapterMismatch):
		msg = "the LoRA adapter does not fit the model"
	case errors.Is(err, errAdapterBudget):
		msg = "the LoRA adapter is larger than a worker's adapter memory"
	}
	return &refusal{queue.ErrKindAdapter, msg}
}

// adapterKeyOf is a's key for hand-over manifests; "" for none.
func adapterKeyOf(a *engine.Adapter) string {
	if a == nil {
		return ""
	}
	return a.Key
}

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/bulkhead-ai/bulkhead/models/catalog"
	"github.com/bulkhead-ai/bulkhead/models/store"
	"github.com/bulkhead-ai/bulkhead/queue"
	"github.com/bulkhead-ai/bulkhead/workers/engine"
	"github.com/bulkhead-ai/bulkhead/workers/kvcache"
	"github.com/bulkhead-ai/bulkhead/workers/worker"
)

// listFlag collects a repeatable flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

// nodeFlags are the flags every model-serving node joining NATS has (edge,
// worker): where NATS is and how to authenticate to it, the models, and the
// logs and metrics (obsFlags.register's listen and content).
type nodeFlags struct {
	natsURL string
	nats    natsFlags
	catalog catalogFlags
	obs     obsFlags
}

func (n *nodeFlags) register(fs *flag.FlagSet, listen, content bool) {
	fs.StringVar(&n.natsURL, "nats", "nats://127.0.0.1:4222", "NATS server URL")
	n.nats.register(fs)
	n.catalog.register(fs)
	n.obs.register(fs, listen, content)
}

// catalogFlags choose the models a node serves.
type catalogFlags struct {
	models   listFlag
	catalog  string
	modelDir string
}

func (c *catalogFlags) register(fs *flag.FlagSet) {
	fs.Var(&c.models, "model", "serve a model: NAME=PATH.gguf, or the NAME of a model pulled with `bulkhead models pull` (repeatable)")
	fs.StringVar(&c.catalog, "catalog", "", "model catalog file (YAML; see models/catalog.yaml)")
	fs.StringVar(&c.modelDir, "model-dir", "", "where --model NAME finds pulled models (default $XDG_DATA_HOME/bulkhead/models, else ~/.local/share/bulkhead/models)")
}

// load builds the catalog; with neither flag it returns nil, nil. A --model
// without "=PATH" is looked up in the model directory.
func (c *catalogFlags) load() (*catalog.Catalog, error) {
	switch {
	case c.catalog != "" && len(c.models) > 0:
		return nil, fmt.Errorf("%w: give --catalog or --model, not both", errUsage)
	case c.catalog != "":
		return catalog.Load(c.catalog)
	case len(c.models) > 0:
		specs, err := c.resolveNames()
		if err != nil {
			return nil, err
		}
		return catalog.FromFlags(specs)
	}
	return nil, nil
}

// loadRequired is load for a node that serves models: one of the flags is
// required.
func (c *catalogFlags) loadRequired() (*catalog.Catalog, error) {
	cat, err := c.load()
	if err == nil && cat == nil {
		err = fmt.Errorf("%w: give --model NAME=PATH.gguf or --catalog FILE", errUsage)
	}
	return cat, err
}

// pageSize is the KV page size, in tokens, of every engine the nodes build.
const pageSize = kvcache.DefaultPageSize

// resolveNames rewrites each bare NAME in --model to NAME=PATH from the model
// directory, which is opened only when one is given.
func (c *catalogFlags) resolveNames() ([]string, error) {
	specs := append([]string(nil), c.models...)
	var st *store.Store
	for i, spec := range specs {
		if strings.Contains(spec, "=") || spec == "" {
			continue
		}
		if st == nil {
			var err error
			if st, err = openStore(c.modelDir); err != nil {
				return nil, err
			}
		}
		_, path, err := st.Lookup(spec)
		if err != nil {
			if errors.Is(err, store.ErrNotFound) {
				return nil, fmt.Errorf("%w: --model %s: %v (pull it with `bulkhead models pull`, or give --model %s=PATH.gguf)", errUsage, spec, err, spec)
			}
			return nil, fmt.Errorf("--model %s: %w", spec, err)
		}
		specs[i] = spec + "=" + path
	}
	return specs, nil
}

// engineFlags size each model's engine on a worker.
type engineFlags struct {
	threads     int
	kvTokens    int
	memShare    float64
	context     int
	clamp       bool
	maxBatch    int
	queueSize   int
	concurrency int
	poison      bool
	scrub       string
	draft       int
	kvType      string // --kv-type
	loraMemory  int64  // --lora-memory, bytes
	loraDir     string // --lora-dir

	// onStep, when set, gives each model's engine its OnStep hook (metrics).
	onStep func(model string) func(int)
	// holdAt is the engines' HoldAt: set only by a -tags faults build's
	// --fault-engine-hold-at.
	holdAt int
}

// share makes n engines of one process (dev's workers and models) share
// its cores with the edge and NATS beside them: with --threads unset each
// engine gets an equal share of the cores, and the process runs Go code on
// one more thread per engine thread (GOMAXPROCS), so the operating system,
// not Go's scheduler, shares the cores among the engines and the edge.
// With GOMAXPROCS at the cores, four engines held every P and the edge's
// goroutines waited in line behind them: a tenant's 8-token request waited
// 400 ms behind another tenant's flood (cmd/bulkhead TestFloodFairness);
// limiting the engines computing at once instead cost a third of the
// aggregate tokens/s. One engine alone is left as it was. restore sets
// GOMAXPROCS back.
func (e *engineFlags) share(log *slog.Logger, n int) (restore func()) {
	if n < 2 {
		return func() {}
	}
	cores := runtime.GOMAXPROCS(0)
	if e.threads == 0 {
		e.threads = max(1, cores/n)
	}
	runtime.GOMAXPROCS(cores + n*e.threads)
	log.Info("engines share the process's cores", "engines", n, "cores", cores, "threads", e.threads, "gomaxprocs", cores+n*e.threads)
	return func() { runtime.GOMAXPROCS(cores) }
}

func (e *engineFlags) register(fs *flag.FlagSet) {
	fs.IntVar(&e.threads, "threads", 0, "kernel threads per model (0: all cores)")
	fs.IntVar(&e.kvTokens, "kv-pool-tokens", 0, "KV pool size in tokens per model (0: the catalog's, else a share of memory (--kv-memory-share), at least one context window)")
	fs.Float64Var(&e.memShare, "kv-memory-share", defaultKVMemoryShare, "share of the machine's available memory (MemAvailable, or the cgroup's memory.max if lower) split among the KV pools of the models (and workers) not sized otherwise; each pool at most 2 × --max-batch context windows")
	fs.IntVar(&e.context, "context", 0, "context window to advertise for every model (0: the catalog's)")
	fs.BoolVar(&e.clamp, "clamp-context", false, "when a model's KV pool cannot hold one request at its context window, advertise the pool's size instead of refusing to start")
	fs.IntVar(&e.maxBatch, "max-batch", 16, "sequences decoded together per model")
	fs.IntVar(&e.queueSize, "engine-queue", 64, "requests waiting for a batch slot per model")
	fs.IntVar(&e.concurrency, "concurrency", 32, "jobs a worker runs at once, all models")
	fs.BoolVar(&e.poison, "kv-poison", false, "debug: fill free KV pages with NaN so stale reads show")
	fs.StringVar(&e.scrub, "kv-scrub", "on-free", "zero KV pages when freed: on-free or never")
	fs.IntVar(&e.draft, "draft-tokens", 0, "most tokens a sequence drafts per step (speculative decoding from the prompt, its output and a request's prediction; outputs unchanged) for models whose catalog entry names none (0: 8; -1: off)")
	fs.StringVar(&e.kvType, "kv-type", "f16", "KV cache element type for models whose catalog entry names none (kv_type): f16, q8_0 (1.88x the tokens per byte) or q4_0 (3.56x), as llama.cpp's -ctk/-ctv; a quantized type needs a head size that is a multiple of 32")
	e.loraMemory = worker.DefaultLoRAMemory
	fs.Func("lora-memory", "memory for the LoRA adapters a worker keeps loaded, least recently used evicted first: bytes, or with KiB, MiB or GiB (default 1GiB)", func(s string) error {
		n, err := parseByteSize(s)
		if err != nil {
			return err
		}
		e.loraMemory = n
		return nil
	})
	fs.StringVar(&e.loraDir, "lora-dir", "", "directory adapter files are written to while they load (default: the system's temporary directory)")
}

// parseByteSize reads a size in bytes: a positive integer, optionally with
// the suffix KiB, MiB or GiB.
func parseByteSize(s string) (int64, error) {
	unit := int64(1)
	for _, u := range []struct {
		suffix string
		n      int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}} {
		if rest, ok := strings.CutSuffix(s, u.suffix); ok {
			s, unit = rest, u.n
			break
		}
	}
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil || n <= 0 || n > math.MaxInt64/unit {
		return 0, fmt.Errorf("%q is not a positive size (bytes, KiB, MiB or GiB)", s)
	}
	return n * unit, nil
}

// applyContext sets the advertised context window on every catalog model.
func (e *engineFlags) applyContext(cat *catalog.Catalog) error {
	if e.context <= 0 {
		return nil
	}
	for _, m := range cat.Models() {
		if catalog.Encoder(m.Task) {
			continue // an encoder's window is its position embeddings
		}
		if e.context > m.TrainedContext {
			return fmt.Errorf("%w: --context %d is larger than %s's trained context of %d", errUsage, e.context, m.Name, m.TrainedContext)
		}
		if err := cat.Clamp(m.Name, e.context); err != nil {
			return err
		}
	}
	return nil
}

// engines loads every catalog model that generates (encoders: e.encoders)
// and runs an engine for each until stop,
// which closes them and waits. Each pool is sized by e.pool, from b for a
// model sized from memory. Each engine applies the pool-fit rule
// (engine.New): a model whose KV pool cannot hold one request at its
// advertised context window is refused, naming the numbers, or with
// --clamp-context served at the pool's size, and then its window is clamped
// in cat too, so that everything built on cat advertises the window served.
func (e *engineFlags) engines(log *slog.Logger, cat *catalog.Catalog, b kvBudget) (map[string]*engine.Engine, func(), error) {
	scrub, err := e.scrubMode()
	if err != nil {
		return nil, nil, err
	}
	out := map[string]*engine.Engine{}
	var stops []func()
	stop := func() {
		for _, s := range slices.Backward(stops) {
			s()
		}
	}
	for _, cm := range cat.Models() {
		if catalog.Encoder(cm.Task) {
			continue // e.encoders runs it
		}
		m, err := engine.Load(cm.Path)
		if err != nil {
			stop()
			return nil, nil, fmt.Errorf("model %s: %w", cm.Name, err)
		}
		stops = append(stops, func() { m.Close() })
		en, pool, err := e.engine(log, cm, m, scrub, b)
		if err != nil {
			stop()
			return nil, nil, err
		}
		out[cm.Name] = en
		stops = append(stops, runEngine(log.With("model", cm.Name), en))
		if err := clampCatalog(log, cat, cm, en); err != nil {
			stop()
			return nil, nil, err
		}
		kv := en.KV()
		log.Info("model ready", append([]any{"model", cm.Name, "path", cm.Path, "context", en.Context(),
			"kv_type", kv.Config().DType, "kv_pool_tokens", kv.MaxTokens(), "kv_pool_bytes", int64(kv.TotalPages()) * kv.BytesPerPage()}, pool.attrs(b)...)...)
	}
	return out, stop, nil
}

// scrubMode is --kv-scrub.
func (e *engineFlags) scrubMode() (kvcache.ScrubMode, error) {
	switch e.scrub {
	case "on-free":
		return kvcache.ScrubOnFree, nil
	case "never":
		return kvcache.ScrubNever, nil
	}
	return 0, fmt.Errorf("%w: --kv-scrub %q (want on-free or never)", errUsage, e.scrub)
}

// engine builds catalog model cm's engine on m, its pool sized by e.pool
// (from b for a pool sized from memory). A pool refused names the flags that
// would fit it.
func (e *engineFlags) engine(log *slog.Logger, cm *catalog.Model, m *engine.Model, scrub kvcache.ScrubMode, b kvBudget) (*engine.Engine, poolSpec, error) {
	h := m.Hyper
	kvType := kvcache.DType(e.kvType)
	if cm.KVType != "" {
		kvType = kvcache.DType(cm.KVType)
	}
	pageBytes, err := kvcache.Config{Layers: h.Layers, KVHeads: h.KVHeads, HeadDim: h.HeadDim, PageSize: pageSize, DType: kvType}.BytesPerPage()
	if err != nil {
		return nil, poolSpec{}, fmt.Errorf("model %s: %w", cm.Name, err)
	}
	pool := e.pool(cm, pageBytes, b)
	cfg := engine.Config{
		Threads: e.threads, Context: cm.ContextWindow, PageSize: pageSize, MaxBatch: e.maxBatch, QueueSize: e.queueSize,
		Poison: e.poison, Scrub: scrub, KVTokens: pool.tokens, KVBytes: pool.bytes, ClampContext: e.clamp,
		HoldAt: e.holdAt, Draft: e.draft, KVType: kvType,
	}
	if cm.DraftTokens != 0 {
		cfg.Draft = cm.DraftTokens
	}
	if e.onStep != nil {
		cfg.OnStep = e.onStep(cm.Name)
	}
	en, err := engine.New(log.With("model", cm.Name), m, cfg)
	if pe := (*engine.PoolError)(nil); errors.As(err, &pe) {
		return nil, pool, fmt.Errorf("model %s: %w; enlarge --kv-pool-tokens, lower --context, or pass --clamp-context to advertise %d", cm.Name, err, pe.Tokens())
	}
	if err != nil {
		return nil, pool, fmt.Errorf("model %s: %w", cm.Name, err)
	}
	return en, pool, nil
}

// clampCatalog lowers cm's window in cat to the one en serves, when the
// engine clamped it to its pool (--clamp-context), and says so at WARN.
func clampCatalog(log *slog.Logger, cat *catalog.Catalog, cm *catalog.Model, en *engine.Engine) error {
	window := en.Context()
	if window >= cm.ContextWindow {
		return nil
	}
	if err := cat.Clamp(cm.Name, window); err != nil {
		return err
	}
	log.Warn("KV pool smaller than the context window: advertising the pool's size (--clamp-context)",
		"model", cm.Name, "kv_pool_tokens", window, "pages", en.KV().TotalPages(), "page_size", en.KV().PageSize(),
		"context_was", cm.ContextWindow, "context", window)
	return nil
}

// connect opens a NATS connection (with opts: credentials, TLS) and
// JetStream context and makes sure the streams exist and are as set up
// (queue.Ensure: a role that may not create them finds them set up by the
// NATS node; one that may creates them with streams), then checks them again
// every streamCheckInterval until ctx ends.
func connect(ctx context.Context, log *slog.Logger, url, name string, streams queue.StreamConfig, opts ...nats.Option) (*nats.Conn, jetstream.JetStream, error) {
	nc, err := nats.Connect(url, append(opts, permissionLogger(log), nats.Name(name), nats.MaxReconnects(-1), nats.ReconnectWait(250*time.Millisecond),
		nats.RetryOnFailedConnect(true),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("NATS disconnected", "err", err)
			}
		}))...)
	if err != nil {
		return nil, nil, fmt.Errorf("connecting to NATS at %s: %w", url, err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	setupCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := queue.Ensure(setupCtx, js, streams); err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("setting up JetStream at %s: %w", url, err)
	}
	go queue.WatchStreams(ctx, log, js, streamCheckInterval) // ends with ctx
	return nc, js, nil
}

// streamCheckInterval is how often every node checks the streams'
// configurations (queue.WatchStreams) after the check at its start.
const streamCheckInterval = time.Minute

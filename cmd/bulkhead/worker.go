package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"

	"github.com/bulkhead-ai/bulkhead/edge"
	"github.com/bulkhead-ai/bulkhead/queue"
	"github.com/bulkhead-ai/bulkhead/workers/encoder"
	"github.com/bulkhead-ai/bulkhead/workers/engine"
	"github.com/bulkhead-ai/bulkhead/workers/worker"
)

func runWorkerCmd(ctx context.Context, args []string, _, stderr io.Writer) error {
	var f workerCmdFlags
	fs := newFlags("worker", stderr)
	fs.StringVar(&f.role, "role", "unified", "worker role: unified (whole requests), prefill (runs prompts, hands their KV to decode workers) or decode (verifies handed-over KV and generates)")
	fs.DurationVar(&f.grace, "drain-grace", defaultDrainGrace, "on SIGTERM, how long jobs in flight may run on; those not done are handed back (requeued) or, once streamed, end with an error")
	f.nodeFlags.register(fs, true, false)
	f.engine.register(fs)
	f.faults.registerWorker(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := f.engine.validatePool(); err != nil {
		return err
	}
	role, err := worker.ParseRole(f.role)
	if err != nil {
		return fmt.Errorf("%w: --role: %v", errUsage, err)
	}
	return f.run(ctx, stderr, role)
}

// workerCmdFlags are `bulkhead worker`'s flags.
type workerCmdFlags struct {
	nodeFlags
	role   string
	grace  time.Duration // --drain-grace
	engine engineFlags
	faults faultFlags // empty unless built with -tags faults
}

// run starts the worker node and serves until ctx ends.
func (f *workerCmdFlags) run(ctx context.Context, stderr io.Writer, role worker.Role) error {
	log, tel, err := f.obs.startNode(ctx, stderr, "bulkhead-worker-"+string(role), "worker")
	if err != nil {
		return err
	}
	defer tel.shutdown(log)
	wm, err := worker.NewMetrics(tel.reg)
	if err != nil {
		return err
	}
	f.engine.onStep = wm.OnStep
	f.engine.holdAt = f.faults.engineHoldAt()
	// Health answers from the start: not ready until the models are loaded
	// and NATS is connected, nor once shutdown begins.
	h := edge.NewHealth()
	var loaded atomic.Bool
	h.Add("models", flagCheck(&loaded, "models not loaded yet"))
	stopHealth, err := f.obs.serveHealth(ctx, log, h, tel)
	if err != nil {
		return err
	}
	defer stopHealth()
	cat, err := f.catalog.loadRequired()
	if err != nil {
		return err
	}
	if err := f.engine.applyContext(cat); err != nil {
		return err
	}
	// NATS meanwhile: edges queue jobs for a model a worker is loading, and
	// refuse at once one that no worker serves or loads.
	id := workerID()
	ann := announceLoading(ctx, log, id, catalogNames(cat), func(ctx context.Context) (*nats.Conn, jetstream.JetStream, error) {
		return f.nats.connect(ctx, log, f.natsURL, "bulkhead-worker")
	})
	// A KV pool too small for the context refuses start-up whether NATS
	// answers or not.
	engines, stop, err := f.engine.engines(log, cat, f.engine.budget(log, cat, 1))
	if err != nil {
		ann.abandon()
		return err
	}
	defer stop()
	var encoders map[string]*encoder.Server
	if role == worker.RoleUnified {
		var stopEnc func()
		if encoders, stopEnc, err = f.engine.encoders(log, cat); err != nil {
			ann.abandon()
			return err
		}
		defer stopEnc()
	} else if generators(cat) < len(cat.Models()) {
		ann.abandon()
		return fmt.Errorf("%w: encoder models (text-embeddings, text-classification) run on unified workers, not --role %s", errUsage, role)
	}
	loaded.Store(true)
	h.Add("engines", func(context.Context) error { return worker.EnginesReady(engines) })
	nc, js, err := ann.connected()
	if err != nil {
		return err
	}
	defer nc.Close()
	h.Add("nats", natsCheck(nc))
	n := workerNode{log: log, nc: nc, js: js, engines: engines, encoders: encoders, role: role, concurrency: f.engine.concurrency,
		loraMemory: f.engine.loraMemory, loraDir: f.engine.loraDir,
		grace: f.grace, id: id, obs: workerObs{tp: tel.tp, metrics: wm, name: "worker"}, afterToken: f.faults.workerHook(stderr)}
	return n.run(ctx)
}

// workerObs is what a worker reports through: its tracer provider (nil:
// tracing off), the process's worker metrics, and its name among them.
type workerObs struct {
	tp      trace.TracerProvider
	metrics *worker.Metrics
	name    string
}

// workerNode is one worker: its connection, its engines (each with its own
// KV pool) and its role.
type workerNode struct {
	log         *slog.Logger
	nc          *nats.Conn
	js          jetstream.JetStream
	engines     map[string]*engine.Engine
	encoders    map[string]*encoder.Server // unified workers only
	role        worker.Role
	concurrency int
	grace       time.Duration // the drain's bound; 0: the worker's default
	id          string        // its name in the capacity bucket; "": a new workerID
	obs         workerObs
	afterToken  func(context.Context, *queue.Job, int) // worker.Config.AfterToken (fault builds only)
	loraMemory  int64                                  // worker.Config.LoRAMemory; 0: its default
	loraDir     string                                 // worker.Config.LoRADir
}

// run serves jobs for the node's engines until ctx ends, then drains. It
// registers the worker with the fleet meanwhile and keeps each engine's
// context window published in the capacity bucket, for the edges to follow.
// The records go as the drain starts, since a draining worker takes no new
// job: edges then refuse a model nobody else serves (no_worker) at once,
// and end the jobs of it still waiting, instead of queueing them behind a
// worker that will not take them.
func (n workerNode) run(ctx context.Context) error {
	if n.id == "" {
		n.id = workerID()
	}
	stopCap := sync.OnceValue(background(n.keepCapacity(n.id)))
	defer stopCap()
	withdraw := context.AfterFunc(ctx, func() { _ = stopCap() })
	defer withdraw()
	w, err := worker.New(n.log.With("node", "worker"), n.nc, n.js, worker.Config{Role: n.role, Name: n.obs.name, Models: n.engines, Encoders: n.encoders, Concurrency: n.concurrency,
		Grace: n.grace, TracerProvider: n.obs.tp, Metrics: n.obs.metrics, AfterToken: n.afterToken,
		LoRAMemory: n.loraMemory, LoRADir: n.loraDir})
	if err != nil {
		return err
	}
	n.obs.metrics.AddEngines(n.obs.name, n.role, n.engines)
	n.obs.metrics.AddEncoders(n.obs.name, n.encoders)
	unregister := registerWorker(n.log, n.nc, n.js, string(n.role), n.engines, w.JobsDone)
	defer unregister()
	return w.Run(ctx)
}

// keepCapacity returns the loop that keeps each engine's context window
// published under id in the capacity bucket until its context ends, then
// withdraws it.
func (n workerNode) keepCapacity(id string) func(ctx context.Context) error {
	windows := make(map[string]int, len(n.engines)+len(n.encoders))
	for name, en := range n.engines {
		windows[name] = en.Context()
	}
	for name, srv := range n.encoders {
		windows[name] = srv.Info().Window
	}
	n.log.Info("publishing context windows", "worker", id, "windows", windows)
	return func(ctx context.Context) error {
		err := queue.KeepCapacity(ctx, n.js, id, windows, func(err error) { n.log.Warn("capacity record", "err", err) })
		if err != nil {
			n.log.Error("publishing context windows failed; edges will not see this worker's windows", "err", err)
		}
		return err
	}
}

// loadingAnnouncer connects a worker to NATS while it loads its engines
// and, once connected, publishes that it is loading its models
// (queue.KeepLoading).
type loadingAnnouncer struct {
	log    *slog.Logger
	id     string
	models []string
	cancel context.CancelFunc // ends the connection's context: abandon only
	done   chan struct{}      // closed once connecting has returned
	nc     *nats.Conn         // the fields below are set before done closes
	js     jetstream.JetStream
	err    error
	stop   func() error // stops KeepLoading; set when connected
}

// announceLoading starts connecting (connect) and announcing in the
// background; call connected or abandon.
func announceLoading(ctx context.Context, log *slog.Logger, id string, models []string,
	connect func(context.Context) (*nats.Conn, jetstream.JetStream, error)) *loadingAnnouncer {
	cctx, cancel := context.WithCancel(ctx)
	a := &loadingAnnouncer{log: log, id: id, models: models, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(a.done)
		if a.nc, a.js, a.err = connect(cctx); a.err != nil {
			return
		}
		// The records are out before the worker can serve: they come
		// before its capacity records.
		for _, m := range models {
			if err := queue.PublishLoading(cctx, a.js, m, id); err != nil {
				log.Warn("loading record", "err", err)
			}
		}
		a.stop = background(func(ctx context.Context) error {
			err := queue.KeepLoading(ctx, a.js, id, models, func(err error) { log.Warn("loading record", "err", err) })
			if err != nil && ctx.Err() == nil {
				log.Warn("announcing the models being loaded failed; edges may refuse their jobs until they are served", "err", err)
			}
			return err
		})
	}()
	return a
}

// connected waits for the connection and stops announcing: the loading
// records stay until the worker's capacity records replace them.
func (a *loadingAnnouncer) connected() (*nats.Conn, jetstream.JetStream, error) {
	<-a.done
	if a.err != nil {
		a.cancel()
		return nil, nil, a.err
	}
	_ = a.stop()
	return a.nc, a.js, nil
}

// abandon is for a worker that failed to load: it stops connecting,
// withdraws the loading records and closes the connection.
func (a *loadingAnnouncer) abandon() {
	a.cancel()
	<-a.done
	if a.err != nil {
		return
	}
	_ = a.stop()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, m := range a.models {
		if err := queue.WithdrawCapacity(ctx, a.js, m, a.id); err != nil {
			a.log.Warn("withdrawing a loading record", "model", m, "err", err)
		}
	}
	a.nc.Close()
}

// workerID names this worker process in the capacity bucket: host, process
// and a random suffix, so restarts and neighbours never share a record.
func workerID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "worker"
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}

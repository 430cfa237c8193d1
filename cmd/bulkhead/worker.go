package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"

	"github.com/bulkhead-ai/bulkhead/queue"
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
	// Health answers from the start: not ready until the models are loaded
	// and NATS is connected, nor once shutdown begins.
	h := newHealth()
	var loaded atomic.Bool
	h.add("models", flagCheck(&loaded, "models not loaded yet"))
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
	// Engines first: a KV pool too small for the context refuses start-up
	// before the worker touches NATS.
	engines, stop, err := f.engine.engines(log, cat, f.engine.budget(log, cat, 1))
	if err != nil {
		return err
	}
	defer stop()
	loaded.Store(true)
	h.add("engines", func(context.Context) error { return worker.EnginesReady(engines) })
	nc, js, err := f.nats.connect(ctx, log, f.natsURL, "bulkhead-worker")
	if err != nil {
		return err
	}
	defer nc.Close()
	h.add("nats", natsCheck(nc))
	n := workerNode{log: log, nc: nc, js: js, engines: engines, role: role, concurrency: f.engine.concurrency,
		grace: f.grace, obs: workerObs{tp: tel.tp, metrics: wm, name: "worker"}}
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
	role        worker.Role
	concurrency int
	grace       time.Duration // the drain's bound; 0: the worker's default
	obs         workerObs
}

// run serves jobs for the node's engines until ctx ends, then drains. It
// registers the worker with the fleet meanwhile and keeps each engine's
// context window published in the capacity bucket, for the edges to follow;
// the records go when the worker stops, before its connection closes.
func (n workerNode) run(ctx context.Context) error {
	stopCap := background(n.keepCapacity(workerID()))
	defer stopCap()
	w, err := worker.New(n.log.With("node", "worker"), n.nc, n.js, worker.Config{Role: n.role, Name: n.obs.name, Models: n.engines, Concurrency: n.concurrency,
		Grace: n.grace, TracerProvider: n.obs.tp, Metrics: n.obs.metrics})
	if err != nil {
		return err
	}
	n.obs.metrics.AddEngines(n.obs.name, n.role, n.engines)
	unregister := registerWorker(n.log, n.nc, n.js, string(n.role), n.engines, w.JobsDone)
	defer unregister()
	return w.Run(ctx)
}

// keepCapacity returns the loop that keeps each engine's context window
// published under id in the capacity bucket until its context ends, then
// withdraws it.
func (n workerNode) keepCapacity(id string) func(ctx context.Context) error {
	windows := make(map[string]int, len(n.engines))
	for name, en := range n.engines {
		windows[name] = en.Context()
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

package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/bulkhead-ai/bulkhead/queue"
	"github.com/bulkhead-ai/bulkhead/workers/encoder"
	"github.com/bulkhead-ai/bulkhead/workers/engine"
)

// ErrRunning reports a second call to Run.
var ErrRunning = errors.New("worker: already running")

// Worker pulls jobs for its models and runs them on their engines.
type Worker struct {
	log     *slog.Logger
	nc      *nats.Conn
	js      jetstream.JetStream
	cfg     Config
	started atomic.Bool

	tracer   trace.Tracer // from cfg.TracerProvider; used only when tracing
	tracing  bool
	jobsDone atomic.Uint64 // deliveries that completed or handed over
	// pulls counts, per model, the jobs pulled and not yet in the engine's
	// queue; set by Run before its fetch loops start, read-only after.
	pulls map[string]*pulled
	// adapters are the LoRA adapters loaded for jobs (Job.LoRA).
	adapters *adapters
}

// New validates cfg and returns a worker. It does not touch the network until
// Run.
func New(log *slog.Logger, nc *nats.Conn, js jetstream.JetStream, cfg Config) (*Worker, error) {
	if nc == nil || js == nil {
		return nil, fmt.Errorf("%w: nil NATS connection or JetStream context", ErrConfig)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	w := &Worker{log: log, nc: nc, js: js, cfg: cfg}
	w.adapters = newAdapters(log, js, &w.cfg)
	if tp := cfg.TracerProvider; tp != nil {
		if _, off := tp.(noop.TracerProvider); !off {
			w.tracer, w.tracing = tp.Tracer(tracerName), true
		}
	}
	return w, nil
}

// JobsDone is how many job deliveries this worker completed (a final frame)
// or handed over to a decode worker.
func (w *Worker) JobsDone() uint64 { return w.jobsDone.Load() }

// Ready reports whether every engine of the worker is sound: nil, or the
// error of one that found a broken invariant (engine.Broken). The worker
// takes no more jobs for that model; it should be replaced.
func (w *Worker) Ready() error { return EnginesReady(w.cfg.Models) }

// EnginesReady is Ready for a set of engines by model: the first broken
// one's error, naming its model.
func EnginesReady(models map[string]*engine.Engine) error {
	for _, name := range slices.Sorted(maps.Keys(models)) {
		if err := models[name].Broken(); err != nil {
			return fmt.Errorf("worker: model %s: %w", name, err)
		}
	}
	return nil
}

// Role is the part of each request this worker runs.
func (w *Worker) Role() Role { return w.cfg.Role }

// Run joins each model's per-tenant job queues (queue.TenantQueues; for
// RoleDecode, its per-tenant hand-over queues on the decode stream) and runs
// jobs until ctx ends. It then stops fetching, waits up to Config.Grace for
// in-flight jobs, cancels the rest, waits for them to end and returns nil.
// Errors setting up consumers are returned at once (nil if ctx ended
// meanwhile).
func (w *Worker) Run(ctx context.Context) error {
	if !w.started.CompareAndSwap(false, true) {
		return ErrRunning
	}
	res, err := queue.OpenResults(ctx, w.js)
	if err != nil {
		return stopped(ctx, err)
	}
	all, err := w.openQueues(ctx)
	defer func() {
		for _, m := range all {
			m.q.Close()
		}
	}()
	if err != nil {
		return stopped(ctx, err)
	}
	w.log.Info("worker running", "role", w.cfg.Role, "models", len(w.cfg.Models), "encoders", len(w.cfg.Encoders), "concurrency", w.cfg.Concurrency)
	routed := map[string]*engine.Engine{} // the models whose jobs edges may route here
	if w.cfg.Role != RoleDecode {
		for _, m := range all {
			if m.eng != nil {
				routed[m.name] = m.eng
			}
		}
	}
	var announcing sync.WaitGroup
	defer announcing.Wait()
	announcing.Go(func() { w.announce(ctx, routed) })

	// Jobs outlive ctx by the grace period, so they run under their own context.
	jobCtx, stopJobs := context.WithCancelCause(context.WithoutCancel(ctx))
	defer stopJobs(nil)
	jobs := w.pullJobs(ctx, jobCtx, res, all)
	w.drain(jobs, stopJobs)
	return nil
}

// served is one model whose jobs this worker pulls: a generation engine
// (eng) or an encoder (srv), with its per-tenant job queues, or its
// hand-over queues under RoleDecode.
type served struct {
	name string
	eng  *engine.Engine
	srv  *encoder.Server
	q    *queue.TenantQueues
}

// openQueues opens the queues of every model and encoder the worker serves
// and adds them to the metrics. It returns what it opened with any error,
// for the caller to close.
func (w *Worker) openQueues(ctx context.Context) ([]served, error) {
	var all []served
	w.pulls = map[string]*pulled{}
	add := func(m served, consumer string, err error) error {
		if err != nil {
			return err
		}
		w.pulls[m.name] = &pulled{entered: make(chan struct{}, 1)}
		w.cfg.Metrics.addConsumer(consumer, m.q.Legacy())
		w.cfg.Metrics.addQueues(m.name, m.q)
		all = append(all, m)
		return nil
	}
	for name, eng := range w.cfg.Models {
		var q *queue.TenantQueues
		var err error
		consumer := queue.ConsumerName(name)
		if w.cfg.Role == RoleDecode {
			q, err = queue.OpenDecodeQueues(ctx, w.nc, w.js, name, w.cfg.Consumer)
			consumer = queue.DecodeConsumerName(name)
		} else {
			q, err = queue.OpenTenantQueues(ctx, w.nc, w.js, name, w.cfg.ID, w.cfg.Consumer)
		}
		if err := add(served{name: name, eng: eng, q: q}, consumer, err); err != nil {
			return all, err
		}
	}
	for name, srv := range w.cfg.Encoders {
		q, err := queue.OpenTenantQueues(ctx, w.nc, w.js, name, w.cfg.ID, w.cfg.Consumer)
		if err := add(served{name: name, srv: srv, q: q}, queue.ConsumerName(name), err); err != nil {
			return all, err
		}
	}
	return all, nil
}

// pullJobs runs a fair pull loop for each served model until ctx ends,
// sharing Config.Concurrency slots among them, and starts each job pulled
// under jobCtx. It returns once every loop has stopped, with the jobs still
// running in the wait group it returns.
func (w *Worker) pullJobs(ctx, jobCtx context.Context, res *queue.Results, all []served) *sync.WaitGroup {
	slots := make(chan struct{}, w.cfg.Concurrency)
	jobs := new(sync.WaitGroup)
	var loops sync.WaitGroup
	for _, m := range all {
		loops.Go(func() {
			p := w.pulls[m.name]
			start := func(msg jetstream.Msg, done func()) {
				p.before.Add(1)
				jobs.Go(func() {
					defer func() { <-slots }()
					defer done()
					switch {
					case m.srv != nil:
						w.handleEmbed(jobCtx, res, m.name, m.srv, msg)
					case w.cfg.Role == RoleDecode:
						w.handleDecode(jobCtx, res, m.name, m.eng, msg)
					default:
						w.handle(jobCtx, res, m.name, m.eng, msg)
					}
				})
			}
			newFairPull(w, m.q, m.eng).run(ctx, slots, w.pullGate(m), start)
		})
	}
	loops.Wait()
	return jobs
}

// pullGate says when the pull loop of m may pull: a generation model while
// its engine has room for what was pulled ahead (canPull), an encoder while
// fewer than its lookahead of jobs are pulled or waiting in its server.
func (w *Worker) pullGate(m served) gate {
	p := w.pulls[m.name]
	if m.srv == nil {
		return gate{entered: p.entered, ready: func() bool { return w.canPull(m.eng, p.before.Load()) }, broken: m.eng.Broken}
	}
	look := int64(w.cfg.Lookahead)
	if look == 0 {
		look = encoderLookahead
	}
	return gate{entered: p.entered, ready: func() bool { return p.before.Load()+int64(m.srv.Stats().Waiting) < look },
		broken: func() error { return nil }}
}

// drain waits up to Config.Grace for the jobs still running, then cancels
// them through stopJobs and waits for them to end.
func (w *Worker) drain(jobs *sync.WaitGroup, stopJobs context.CancelCauseFunc) {
	w.log.Info(msgDraining, "grace", w.cfg.Grace)
	drained := make(chan struct{})
	go func() { jobs.Wait(); close(drained) }()
	grace := time.NewTimer(w.cfg.Grace)
	defer grace.Stop()
	select {
	case <-drained:
	case <-grace.C:
		w.log.Warn("grace period over, cancelling jobs still running", "grace", w.cfg.Grace)
		stopJobs(errShutdown)
		<-drained
	}
	w.log.Info("worker stopped")
}

// msgDraining is logged when Run has stopped pulling and waits (within
// Config.Grace) for the jobs it holds.
const msgDraining = "worker draining"

// encoderLookahead bounds an encoder model's jobs pulled or in its server
// (Config.Lookahead's default for encoders): enough to fill a shared pass,
// few enough that another worker takes the rest.
const encoderLookahead = 32

// stopped is a set-up error, or nil when ctx ended (Run was stopped while
// it set up, which is not a failure).
func stopped(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// pullPoll is how often a fetch loop held back by Lookahead looks again at
// its engine (it also looks each time one of its jobs reaches the engine).
const pullPoll = time.Millisecond

// gate holds a fetch loop back until its engine can start another job soon.
type gate struct {
	ready   func() bool
	entered <-chan struct{} // a job of the model reached the engine or ended
	broken  func() error    // the engine's Broken
}

// pulled counts one model's jobs pulled that have not reached its engine's
// queue yet.
type pulled struct {
	before  atomic.Int64
	entered chan struct{} // capacity 1: one of them reached the engine or ended
}

// canPull reports whether the worker may pull another job for eng: fewer
// than Lookahead of the model's jobs are between the pull and the engine's
// batch (before its queue, or waiting in it). The engine, not the order of
// the stream, then decides which tenant's job runs next.
func (w *Worker) canPull(eng *engine.Engine, before int64) bool {
	look := w.cfg.Lookahead
	if look == 0 {
		look = 2 * eng.MaxBatch()
	}
	return before+int64(eng.Stats().Waiting) < int64(look)
}

// enterEngine records that the delivery's job reached its engine's queue, or
// ended without; the first call counts, later ones do nothing.
func (d *delivery) enterEngine() {
	if d.entered {
		return
	}
	d.entered = true
	p := d.w.pulls[d.model]
	p.before.Add(-1)
	select {
	case p.entered <- struct{}{}:
	default:
	}
}

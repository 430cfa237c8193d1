package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/bulkhead-ai/bulkhead/queue"
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

// Role is the part of each request this worker runs.
func (w *Worker) Role() Role { return w.cfg.Role }

// Run creates (or joins) one durable consumer per model (on the jobs stream,
// or on the decode stream for RoleDecode) and runs jobs until
// ctx ends. It then stops fetching, waits up to Config.Grace for in-flight
// jobs, cancels the rest, waits for them to end and returns nil. Errors
// setting up consumers are returned at once.
func (w *Worker) Run(ctx context.Context) error {
	if !w.started.CompareAndSwap(false, true) {
		return ErrRunning
	}
	res, err := queue.OpenResults(ctx, w.js)
	if err != nil {
		return err
	}
	type served struct {
		name string
		eng  *engine.Engine
		cons jetstream.Consumer
	}
	var models []served
	ensure, handle := queue.EnsureConsumer, w.handle
	if w.cfg.Role == RoleDecode {
		ensure, handle = queue.EnsureDecodeConsumer, w.handleDecode
	}
	for name, eng := range w.cfg.Models {
		c, err := ensure(ctx, w.js, name, w.cfg.Consumer)
		if err != nil {
			return err
		}
		consumer := queue.ConsumerName(name)
		if w.cfg.Role == RoleDecode {
			consumer = queue.DecodeConsumerName(name)
		}
		w.cfg.Metrics.addConsumer(consumer, c)
		models = append(models, served{name, eng, c})
	}
	w.log.Info("worker running", "role", w.cfg.Role, "models", len(models), "concurrency", w.cfg.Concurrency)

	// Jobs outlive ctx by the grace period, so they run under their own context.
	jobCtx, stopJobs := context.WithCancelCause(context.WithoutCancel(ctx))
	defer stopJobs(nil)
	slots := make(chan struct{}, w.cfg.Concurrency)
	var jobs, loops sync.WaitGroup
	for _, m := range models {
		loops.Go(func() {
			var inFlight atomic.Int64 // this model's jobs pulled and not ended
			ended := make(chan struct{}, 1)
			g := gate{ended: ended, ready: func() bool { return w.canPull(m.eng, inFlight.Load()) }}
			w.fetch(ctx, m.cons, slots, g, func(msg jetstream.Msg) {
				inFlight.Add(1)
				jobs.Go(func() {
					defer func() { <-slots }()
					defer func() {
						inFlight.Add(-1)
						select {
						case ended <- struct{}{}:
						default:
						}
					}()
					handle(jobCtx, res, m.name, m.eng, msg)
				})
			})
		})
	}
	loops.Wait()

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
	return nil
}

// pullPoll is how often a fetch loop held back by Lookahead looks again at
// its engine (it also looks each time one of its jobs ends).
const pullPoll = time.Millisecond

// gate holds a fetch loop back until its engine can start another job soon.
type gate struct {
	ready func() bool
	ended <-chan struct{} // a job of the model ended
}

// wait returns once ready reports true, or false when ctx ends first.
func (g gate) wait(ctx context.Context, poll *time.Ticker) bool {
	for !g.ready() {
		select {
		case <-g.ended:
		case <-poll.C:
		case <-ctx.Done():
			return false
		}
	}
	return true
}

// canPull reports whether the worker may pull another job for eng: fewer
// than Lookahead of the model's inFlight jobs are not running in its batch
// yet. The engine, not the order of the stream, then decides which tenant's
// job runs next.
func (w *Worker) canPull(eng *engine.Engine, inFlight int64) bool {
	look := w.cfg.Lookahead
	if look == 0 {
		look = eng.MaxBatch()
	}
	return inFlight-int64(eng.Stats().Running) < int64(look)
}

// fetch pulls one job at a time while a slot is free and the gate says the
// engine can start another soon, until ctx ends; start runs each job, which
// frees its slot when done.
func (w *Worker) fetch(ctx context.Context, cons jetstream.Consumer, slots chan struct{}, g gate, start func(jetstream.Msg)) {
	poll := time.NewTicker(pullPoll)
	defer poll.Stop()
	for {
		if !g.wait(ctx, poll) {
			return
		}
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return
		}
		fctx, cancel := context.WithTimeout(ctx, w.cfg.FetchWait)
		batch, err := cons.Fetch(1, jetstream.FetchContext(fctx))
		got := false
		if err == nil {
			for msg := range batch.Messages() {
				got = true
				start(msg)
			}
			err = batch.Error()
		}
		cancel()
		if !got {
			<-slots
		}
		if err != nil && ctx.Err() == nil && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, jetstream.ErrNoMessages) {
			w.log.Warn("fetching jobs", "err", err)
			select { // do not spin on a broken connection
			case <-time.After(w.cfg.FetchWait):
			case <-ctx.Done():
				return
			}
		}
	}
}

package worker

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/bulkhead-ai/bulkhead/models/refdatatest"
	"github.com/bulkhead-ai/bulkhead/models/testkit"
	"github.com/bulkhead-ai/bulkhead/queue"
	"github.com/bulkhead-ai/bulkhead/queue/queuetest"
	"github.com/bulkhead-ai/bulkhead/workers/engine"
)

// TestMain fails the run if goroutines outlive the tests: workers, engines,
// servers and subscriptions must all have stopped.
func TestMain(m *testing.M) { testkit.Main(m) }

const model = "@cf/test/stories260k"

type env struct {
	url    string
	nc     *nats.Conn
	js     jetstream.JetStream
	client *queue.Client
}

func startNATS(t *testing.T) *env {
	t.Helper()
	srv := queuetest.Server(t)
	nc, js := queuetest.JetStream(t, srv.ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := queue.Setup(ctx, js, queue.StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	c, err := queue.NewClient(nc, js).WithIdleTimeout(20 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return &env{url: srv.ClientURL(), nc: nc, js: js, client: c}
}

// conn returns an env on a connection of its own to ev's server, closed at
// the end of the test (or earlier by the test, to make a worker "die").
func (ev *env) conn(t *testing.T) *env {
	t.Helper()
	nc, js := queuetest.JetStream(t, ev.url)
	return &env{url: ev.url, nc: nc, js: js, client: queue.NewClient(nc, js)}
}

// startEngine runs an engine on stories260K (one thread unless cfg says
// otherwise) until the test ends, then checks every KV page is back in the pool.
func startEngine(t *testing.T, cfg engine.Config) *engine.Engine {
	t.Helper()
	if cfg.Threads == 0 {
		cfg.Threads = 1
	}
	return startEngineFile(t, "models/stories260K.gguf", cfg)
}

// startEngineFile runs an engine on a model file of ../shared until the test
// ends, then checks every KV page is back in the pool.
func startEngineFile(t *testing.T, path string, cfg engine.Config) *engine.Engine {
	t.Helper()
	m, err := engine.Load(refdatatest.Path(t, path))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	e, err := engine.New(nil, m, cfg)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- e.Run(context.Background()) }()
	t.Cleanup(func() {
		e.Close()
		<-done
		if free, total := e.KV().FreePages(), e.KV().TotalPages(); free != total {
			t.Errorf("KV pages leaked: %d of %d free", free, total)
		}
	})
	return e
}

// startWorker runs a worker until stop is called (or the test ends); stop
// returns Run's error.
func startWorker(t *testing.T, ev *env, cfg Config) (stop func() error) {
	t.Helper()
	return runWorker(t, ev, cfg).stop
}

// testWorker is a worker running in the test: cancel ends its Run's
// context, draining closes when Run has stopped pulling and waits for its
// jobs, done when Run returned (with err); stop cancels and waits.
type testWorker struct {
	cancel   context.CancelFunc
	draining chan struct{}
	done     chan struct{}
	err      error
}

// drainSignal is the test workers' log handler: it closes draining when the
// worker logs that it drains, and drops every record.
type drainSignal struct {
	once     sync.Once
	draining chan struct{}
}

func (h *drainSignal) Enabled(context.Context, slog.Level) bool { return true }
func (h *drainSignal) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *drainSignal) WithGroup(string) slog.Handler            { return h }
func (h *drainSignal) Handle(_ context.Context, r slog.Record) error {
	if r.Message == msgDraining {
		h.once.Do(func() { close(h.draining) })
	}
	return nil
}

// runWorker starts a worker with cfg (short pull waits unless set); the
// test's cleanup stops it.
func runWorker(t *testing.T, ev *env, cfg Config) *testWorker {
	t.Helper()
	if cfg.FetchWait == 0 {
		cfg.FetchWait = 100 * time.Millisecond
	}
	if cfg.BusyDelay == 0 {
		cfg.BusyDelay = 50 * time.Millisecond
	}
	sig := &drainSignal{draining: make(chan struct{})}
	w, err := New(slog.New(sig), ev.nc, ev.js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	tw := &testWorker{cancel: cancel, draining: sig.draining, done: make(chan struct{})}
	go func() {
		tw.err = w.Run(ctx)
		close(tw.done)
	}()
	t.Cleanup(func() { tw.stop() })
	return tw
}

// stop ends the worker's context and returns Run's error once it returned.
func (w *testWorker) stop() error {
	w.cancel()
	<-w.done
	return w.err
}

// holdFirstToken is an AfterToken hook that holds each job's stream after
// its first token until release is closed (or the job ends), first sending
// the job's id on held.
func holdFirstToken(held chan<- string, release <-chan struct{}) func(context.Context, *queue.Job, int) {
	return func(ctx context.Context, job *queue.Job, n int) {
		if n != 1 {
			return
		}
		held <- job.ID
		select {
		case <-release:
		case <-ctx.Done():
		}
	}
}

// waitHeld waits until a worker's AfterToken hook holds job's stream (the
// hook sends the id of the job it holds on held, as holdFirstToken does).
func waitHeld(t *testing.T, job *queue.Job, held <-chan string) {
	t.Helper()
	select {
	case id := <-held:
		if id != job.ID {
			t.Fatalf("held %s, want %s", id, job.ID)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the stream was not held")
	}
}

// stopHeld stops the worker w while it holds a stream mid-way (waitHeld),
// waits until Run drains (it stopped pulling and waits for its jobs),
// releases the stream and returns Run's error.
func stopHeld(t *testing.T, w *testWorker, release chan<- struct{}) error {
	t.Helper()
	w.cancel()
	select {
	case <-w.draining:
	case <-w.done:
		t.Fatalf("Run returned (%v) without draining while its job was mid-stream", w.err)
	}
	close(release)
	return w.stop()
}

var jobSeq int

func newJob(t *testing.T, prompt string, maxTokens int) *queue.Job {
	jobSeq++
	id := fmt.Sprintf("%s-%d", queue.ModelToken(t.Name()), jobSeq)
	return &queue.Job{
		ID: id, Tenant: "tenant-a", Model: model, Prompt: prompt, AddBOS: true,
		MaxTokens: maxTokens, Reply: queue.ReplySubject(id), Deadline: time.Now().Add(time.Minute),
	}
}

// collect reads a reply stream to its end and returns the frames and the
// error that ended it (io.EOF after a final or error frame).
func collect(t *testing.T, r *queue.Replies) ([]*queue.Frame, error) {
	t.Helper()
	var out []*queue.Frame
	for {
		f, err := r.Next(context.Background())
		if err != nil {
			return out, err
		}
		out = append(out, f)
	}
}

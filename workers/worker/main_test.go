package worker

import (
	"context"
	"fmt"
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
	if cfg.FetchWait == 0 {
		cfg.FetchWait = 100 * time.Millisecond
	}
	if cfg.BusyDelay == 0 {
		cfg.BusyDelay = 50 * time.Millisecond
	}
	w, err := New(nil, ev.nc, ev.js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	var stopped bool
	var runErr error
	stop = func() error {
		if !stopped {
			stopped = true
			cancel()
			runErr = <-done
		}
		return runErr
	}
	t.Cleanup(func() { stop() })
	return stop
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

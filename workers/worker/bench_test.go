package worker

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/bulkhead-ai/bulkhead/models/refdatatest"
	"github.com/bulkhead-ai/bulkhead/queue"
	"github.com/bulkhead-ai/bulkhead/queue/queuetest"
	"github.com/bulkhead-ai/bulkhead/workers/engine"
)

// BenchmarkTTFT measures the time from submitting a greedy job to its first
// token frame, through a unified worker and through a prefill worker and a
// decode worker (KV pages exported, shipped over NATS, verified, imported),
// for a short and a long prompt. The difference is what disaggregation adds.
func BenchmarkTTFT(b *testing.B) {
	for _, tokens := range []int{16, 256, 1000} {
		for _, mode := range []string{"unified", "disaggregated"} {
			b.Run(fmt.Sprintf("%s/prompt=%d", mode, tokens), func(b *testing.B) {
				ev := benchNATS(b)
				var e *engine.Engine
				if mode == "unified" {
					e = benchEngine(b)
					benchWorker(b, ev, Config{Models: map[string]*engine.Engine{model: e}})
				} else {
					e = benchEngine(b)
					d := benchEngine(b)
					benchWorker(b, ev, Config{Role: RolePrefill, Models: map[string]*engine.Engine{model: e}})
					benchWorker(b, ev, Config{Role: RoleDecode, Models: map[string]*engine.Engine{model: d}})
				}
				prompt := benchPrompt(e, tokens)
				n := 0
				for b.Loop() {
					n++
					id := fmt.Sprintf("ttft-%s-%d-%d", mode, tokens, n)
					job := &queue.Job{ID: id, Tenant: "bench", Model: model, Prompt: prompt, AddBOS: true,
						MaxTokens: 1, Reply: queue.ReplySubject(id), Deadline: time.Now().Add(time.Minute)}
					r, err := ev.client.Submit(context.Background(), job)
					if err != nil {
						b.Fatal(err)
					}
					f, err := r.Next(context.Background())
					if err != nil || f.Kind != queue.KindToken {
						b.Fatalf("first frame %+v, %v", f, err)
					}
					for f.Kind == queue.KindToken {
						if f, err = r.Next(context.Background()); err != nil {
							b.Fatal(err)
						}
					}
					r.Close()
				}
			})
		}
	}
}

func benchPrompt(e *engine.Engine, n int) string {
	p := ""
	for len(e.Model().Tokenizer.Encode(p, true, false)) < n {
		p += "Once upon a time there was a little dog. "
	}
	return p
}

func benchNATS(b *testing.B) *env {
	srv := queuetest.Server(b)
	nc, js := queuetest.JetStream(b, srv.ClientURL())
	if err := queue.Setup(context.Background(), js, queue.StreamConfig{}); err != nil {
		b.Fatal(err)
	}
	return &env{url: srv.ClientURL(), nc: nc, js: js, client: queue.NewClient(nc, js)}
}

func benchEngine(b *testing.B) *engine.Engine {
	m, err := engine.Load(refdatatest.Path(b, "models/stories260K.gguf"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { m.Close() })
	e, err := engine.New(nil, m, engine.Config{Threads: 1})
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- e.Run(context.Background()) }()
	b.Cleanup(func() { e.Close(); <-done })
	return e
}

func benchWorker(b *testing.B, ev *env, cfg Config) {
	nc, err := nats.Connect(ev.url)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		b.Fatal(err)
	}
	cfg.FetchWait = 100 * time.Millisecond
	w, err := New(nil, nc, js, cfg)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	b.Cleanup(func() { cancel(); <-done })
}

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/bulkhead-ai/bulkhead/edge"
	"github.com/bulkhead-ai/bulkhead/models/refdatatest"
	"github.com/bulkhead-ai/bulkhead/models/testkit"
	"github.com/bulkhead-ai/bulkhead/queue"
)

// capacityRecords returns the records the capacity bucket holds for model.
func capacityRecords(ctx context.Context, t *testing.T, js jetstream.JetStream, model string) []queue.Capacity {
	t.Helper()
	kv, err := queue.SetupCapacity(ctx, js, 0)
	if err != nil {
		t.Fatal(err)
	}
	w, err := kv.Watch(ctx, queue.ModelToken(model)+".*", jetstream.IgnoreDeletes())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = w.Stop() }()
	var out []queue.Capacity
	for e := range w.Updates() {
		if e == nil {
			return out
		}
		var c queue.Capacity
		if err := json.Unmarshal(e.Value(), &c); err != nil {
			t.Fatal(err)
		}
		out = append(out, c)
	}
	t.Fatal("watcher closed")
	return nil
}

// TestWorkerAnnouncesLoading: a worker publishes that it is loading its
// model as soon as it reaches NATS, before the window it serves the model
// at; a worker that fails to load (a KV pool too small) leaves no record.
func TestWorkerAnnouncesLoading(t *testing.T) {
	url, js := testNATS(t)
	model := refdatatest.Path(t, "models/stories260K.gguf")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	kv, err := queue.SetupCapacity(ctx, js, 0)
	if err != nil {
		t.Fatal(err)
	}
	w, err := kv.Watch(ctx, queue.ModelToken(clampModel)+".*", jetstream.UpdatesOnly())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = w.Stop() }()
	worker := startNode(t, "worker", "--nats", url, "--model", clampModel+"="+model, "--context", "1024", "--threads", "1")
	var seen []string
	for !slices.Contains(seen, "serving 1024") {
		select {
		case e := <-w.Updates():
			var c queue.Capacity
			if err := json.Unmarshal(e.Value(), &c); err != nil {
				t.Fatal(err)
			}
			if c.Loading {
				seen = append(seen, "loading")
			} else {
				seen = append(seen, fmt.Sprintf("serving %d", c.Context))
			}
		case <-ctx.Done():
			t.Fatalf("records seen: %v; no window in time\n%s", seen, worker.stderr.String())
		}
	}
	if seen[0] != "loading" {
		t.Fatalf("records in order: %v, want a loading record first", seen)
	}
	worker.stop(t)
	if got := capacityRecords(ctx, t, js, clampModel); len(got) != 0 {
		t.Fatalf("records after the worker stopped: %+v", got)
	}

	// A worker that cannot hold its window refuses to start, and withdraws
	// what it announced.
	var out, errb syncBuffer
	code := run(ctx, []string{"worker", "--nats", url, "--model", clampModel + "=" + model,
		"--kv-pool-tokens", "256", "--context", "2048", "--threads", "1"}, &out, &errb)
	if code != 1 {
		t.Fatalf("worker with a pool too small: exit %d, want 1\n%s", code, errb.String())
	}
	if got := capacityRecords(ctx, t, js, clampModel); len(got) != 0 {
		t.Fatalf("records after the worker refused to start: %+v", got)
	}
}

// TestEdgeRefusesModelsNoWorkerServes: an edge queues a job for a model a
// worker is loading, and refuses one for a model no worker serves or loads
// with 503 no_worker (3047) at once: async from the start, sync once the
// start-up grace (edge.LiveGrace) is over. Before, a sync request for such a
// model waited out a 30 s grace.
func TestEdgeRefusesModelsNoWorkerServes(t *testing.T) {
	url, js := testNATS(t)
	model := refdatatest.Path(t, "models/stories260K.gguf")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const orphan = "@cf/test/orphan"
	started := time.Now()
	base, tok := startTestEdge(t, url, "--model", clampModel+"="+model, "--model", orphan+"="+model)
	const async = `{"requests":[{"prompt":"Once upon a time","raw":true,"max_tokens":4}]}`
	for _, m := range []string{orphan, clampModel} {
		if status, code := runStatus(t, base, tok, m+"?queueRequest=true", async); status != 503 || code != 3047 {
			t.Fatalf("async for %s that no worker serves: %d code %d, want 503 3047", m, status, code)
		}
	}
	// A worker loading the model: its jobs are queued.
	if err := queue.PublishLoading(ctx, js, clampModel, "loader"); err != nil {
		t.Fatal(err)
	}
	testkit.Poll(t, 10*time.Second, func() error {
		if status, code := runStatus(t, base, tok, clampModel+"?queueRequest=true", async); status != 200 {
			return fmt.Errorf("async for a model being loaded: %d code %d, want it queued", status, code)
		}
		return nil
	})
	if err := queue.WithdrawCapacity(ctx, js, clampModel, "loader"); err != nil {
		t.Fatal(err)
	}
	// Past the grace, a sync request for a model nobody serves is refused
	// without waiting.
	time.Sleep(time.Until(started.Add(edge.LiveGrace)))
	for _, m := range []string{orphan, clampModel} {
		begin := time.Now()
		status, code := runStatus(t, base, tok, m, `{"prompt":"Once upon a time","raw":true,"max_tokens":4}`)
		if status != 503 || code != 3047 {
			t.Fatalf("sync for %s that no worker serves: %d code %d, want 503 3047", m, status, code)
		}
		if waited := time.Since(begin); waited > edge.LiveGrace/2 {
			t.Errorf("sync for %s was refused after %v: it waited", m, waited)
		}
	}
}

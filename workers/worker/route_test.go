package worker

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/bulkhead-ai/bulkhead/models/testkit"
	"github.com/bulkhead-ai/bulkhead/queue"
	"github.com/bulkhead-ai/bulkhead/workers/engine"
)

// announcements records the workers' routing announcements of model.
type announcements struct {
	mu       sync.Mutex
	status   map[string]queue.WorkerStatus // by worker id, the latest
	prefixes map[string][]queue.PrefixNotice
}

func listen(t *testing.T, nc *nats.Conn) *announcements {
	a := &announcements{status: map[string]queue.WorkerStatus{}, prefixes: map[string][]queue.PrefixNotice{}}
	for subj, h := range map[string]nats.MsgHandler{
		queue.StatusSubject(model): func(m *nats.Msg) {
			st, err := queue.DecodeStatus(m.Data)
			if err != nil {
				t.Errorf("bad status %s: %v", m.Data, err)
				return
			}
			a.mu.Lock()
			a.status[st.Worker] = *st
			a.mu.Unlock()
		},
		queue.PrefixSubject(model): func(m *nats.Msg) {
			n, err := queue.DecodePrefixNotice(m.Data)
			if err != nil {
				t.Errorf("bad prefix notice %s: %v", m.Data, err)
				return
			}
			a.mu.Lock()
			a.prefixes[n.Worker] = append(a.prefixes[n.Worker], *n)
			a.mu.Unlock()
		},
	} {
		sub, err := nc.Subscribe(subj, h)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { sub.Unsubscribe() })
	}
	return a
}

func (a *announcements) get(worker string) (queue.WorkerStatus, []queue.PrefixNotice) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.status[worker], append([]queue.PrefixNotice(nil), a.prefixes[worker]...)
}

// TestRoutedJobs: workers announce their status and the prefixes of the
// jobs they take; a job routed to a worker runs there; a worker that stops
// says it drains, and one that dies goes silent: either way the jobs routed
// to it run on another worker, the silent one's within about
// queue.PeerTimeout.
func TestRoutedJobs(t *testing.T) {
	ev := startNATS(t)
	ann := listen(t, ev.nc)
	usage := countUsage(t, ev.nc)
	engines := map[string]*engine.Engine{}
	stops := map[string]func() error{}
	conns := map[string]*env{}
	for _, id := range []string{"w1", "w2", "w3"} {
		engines[id] = startEngine(t, engine.Config{Context: 512})
	}
	flushPrefixesAtEnd(t, engines["w1"], engines["w2"], engines["w3"])
	for _, id := range []string{"w1", "w2", "w3"} {
		conns[id] = ev.conn(t)
		stops[id] = startWorker(t, conns[id], Config{ID: id, Models: map[string]*engine.Engine{model: engines[id]}})
	}
	testkit.Poll(t, 10*time.Second, testkit.Cond("three workers announced", func() bool {
		for _, id := range []string{"w1", "w2", "w3"} {
			if st, _ := ann.get(id); st.MaxBatch == 0 {
				return false
			}
		}
		return true
	}))
	prompt := strings.Repeat("Once upon a time there was a little dog. ", 8)
	run := func(route string) (worker string, took time.Duration) {
		t.Helper()
		job := newJob(t, prompt, 4)
		job.Route, job.CachePrefix = route, true
		start := time.Now()
		r, err := ev.client.Submit(context.Background(), job)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		if _, err := collect(t, r); !errors.Is(err, io.EOF) {
			t.Fatalf("job routed to %s ended with %v", route, err)
		}
		took = time.Since(start)
		testkit.Poll(t, 10*time.Second, testkit.Cond("the job's usage event", func() bool { return len(usage.get(job.ID)) > 0 }))
		if evs := usage.get(job.ID); len(evs) != 1 {
			t.Errorf("job routed to %s billed %d times: %+v", route, len(evs), evs)
		}
		return usage.get(job.ID)[0].WorkerID, took
	}
	for range 3 {
		for _, id := range []string{"w1", "w2", "w3"} {
			if got, _ := run(id); got != id {
				t.Fatalf("a job routed to %s ran on %s", id, got)
			}
		}
	}
	if st, notes := ann.get("w2"); len(notes) != 3 || notes[0].Tenant != queue.TenantToken("tenant-a") ||
		len(notes[0].Keys) != len(prompt)/queue.PrefixBlock || st.Pages != engines["w2"].KV().TotalPages() {
		t.Errorf("w2 announced %+v and %d prefix notices (%+v), want its pool and 3 notices of tenant-a's %d keys",
			st, len(notes), notes, len(prompt)/queue.PrefixBlock)
	}

	if err := stops["w1"](); err != nil { // stops: says it drains
		t.Fatal(err)
	}
	testkit.Poll(t, 5*time.Second, testkit.Cond("w1 said it drains", func() bool { st, _ := ann.get("w1"); return st.Draining }))
	got, took := run("w1")
	t.Logf("a job routed to w1 after it stopped ran on %s in %v", got, took)
	if got == "w1" || got == "" {
		t.Errorf("a job routed to stopped w1 ran on %q", got)
	}

	conns["w3"].nc.Close() // dies: nothing more from it
	got, took = run("w3")
	t.Logf("a job routed to w3 after it died ran on %s in %v (queue.PeerTimeout %v)", got, took, queue.PeerTimeout)
	if got != "w2" {
		t.Errorf("a job routed to dead w3 ran on %q, want w2", got)
	}
	if took < queue.PeerTimeout-queue.StatusEvery {
		t.Errorf("w2 took w3's job after %v, before w3 could count as gone", took)
	}
}

// TestStatusReportsLoad: a worker's announcement carries its engine's
// running and waiting sequences and its pool.
func TestStatusReportsLoad(t *testing.T) {
	e := startEngine(t, engine.Config{Context: 512, MaxBatch: 1, QueueSize: 1, HoldAt: holdAt})
	release := saturate(t, e)
	defer release()
	w := &Worker{cfg: Config{ID: "w1"}}
	st := w.status(e, true)
	b, _ := json.Marshal(st)
	if st.Worker != "w1" || !st.Draining || st.Running != 1 || st.Waiting != 1 || st.MaxBatch != 1 ||
		st.Pages != e.KV().TotalPages() || st.PageSize != e.KV().PageSize() || st.FreePages >= st.Pages {
		t.Errorf("status %s, want w1 draining, 1 running of 1, 1 waiting and a pool partly taken", b)
	}
	if _, err := queue.DecodeStatus(b); err != nil {
		t.Error(err)
	}
}

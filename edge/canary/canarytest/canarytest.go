package canarytest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/bulkhead-ai/bulkhead/edge"
	"github.com/bulkhead-ai/bulkhead/edge/auth"
	"github.com/bulkhead-ai/bulkhead/edge/quota"
	"github.com/bulkhead-ai/bulkhead/models/catalog"
	"github.com/bulkhead-ai/bulkhead/models/refdatatest"
	"github.com/bulkhead-ai/bulkhead/queue"
	"github.com/bulkhead-ai/bulkhead/queue/queuetest"
)

// Model is the model the planted edge serves (stories260K's tokenizer and
// trained context).
const Model = "@cf/test/canary"

// Fault is the leak a planted edge shows.
type Fault int

const (
	// None: the worker answers every prompt with text that depends on that
	// prompt alone, and the listing tells the truth. A canary run passes.
	None Fault = iota
	// ForeignMarker: the worker's answer carries the first word (the
	// marker) of the previous job it ran when that job was another
	// tenant's, as stale KV would. It answers a prompt seen before as it
	// did the first time, so the leak shows only as foreign text.
	ForeignMarker
	// DiffersUnderLoad: the worker answers a prompt it has seen before
	// differently, so a response under load differs from its reference.
	DiffersUnderLoad
	// OverlongServed: the models listing advertises half the window the
	// edge admits by, so prompts over the advertised window are served.
	OverlongServed
)

func (f Fault) String() string {
	return [...]string{"none", "foreign marker", "differs under load", "over-long served"}[f]
}

// Edge is a planted edge: URL is its base URL, KeyDir holds the dev signing
// key its tokens are verified against (auth.LoadOrCreateDevKey).
type Edge struct {
	URL    string
	KeyDir string
}

// Start runs a planted edge with fault f until the test ends.
func Start(t testing.TB, f Fault) *Edge {
	t.Helper()
	cat, err := catalog.FromFlags([]string{Model + "=" + refdatatest.Path(t, "models/stories260K.gguf")})
	if err != nil {
		t.Fatal(err)
	}
	nc, js := queuetest.JetStream(t, queuetest.Server(t).ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := queue.Setup(ctx, js, queue.StreamConfig{Memory: true}); err != nil {
		t.Fatal(err)
	}
	keyDir := t.TempDir()
	dev, err := auth.LoadOrCreateDevKey(keyDir)
	if err != nil {
		t.Fatal(err)
	}
	vcfg := dev.VerifierConfig()
	vcfg.Algorithms = []string{auth.AlgEdDSA}
	verifier, err := auth.NewVerifier(nil, vcfg)
	if err != nil {
		t.Fatal(err)
	}
	q, err := quota.New(nil, nil, quota.Config{})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := edge.New(nil, edge.Config{Catalog: cat, Auth: verifier, Quota: q, Queue: queue.NewClient(nc, js), RequestTimeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	w := &worker{fault: f, seen: map[string]int{}, answers: map[string]string{}}
	w.start(t, nc, js)
	var h http.Handler = srv.Handler()
	if f == OverlongServed {
		h = halveWindows(t, h)
	}
	hs := httptest.NewServer(h)
	t.Cleanup(hs.Close)
	return &Edge{URL: hs.URL, KeyDir: keyDir}
}

// worker answers the planted edge's jobs, with its fault.
type worker struct {
	fault Fault

	mu      sync.Mutex        // guards last, seen and answers
	last    *queue.Job        // the job run before this one
	seen    map[string]int    // prompt → times run
	answers map[string]string // prompt → first answer (ForeignMarker)
}

// start consumes Model's jobs until the test ends, one goroutine per job.
func (w *worker) start(t testing.TB, nc *nats.Conn, js jetstream.JetStream) {
	ctx := context.Background()
	cons, err := queue.EnsureConsumer(ctx, js, Model, queue.ConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	res, err := queue.OpenResults(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	wctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	cc, err := cons.Consume(func(msg jetstream.Msg) {
		_ = msg.DoubleAck(wctx)
		job, err := queue.DecodeJob(msg.Data())
		if err != nil {
			t.Errorf("planted worker: %v", err)
			return
		}
		text := w.answer(job)
		wg.Go(func() {
			rp, claim, err := res.Claim(wctx, nc, job)
			if err != nil || claim != queue.ClaimRun {
				return
			}
			if err := rp.Token(wctx, text, []int32{1}); err != nil {
				return
			}
			_ = rp.Final(wctx, "", "length", queue.Usage{PromptTokens: job.PromptTokens, CompletionTokens: 1})
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cc.Stop()
		stop()
		wg.Wait()
	})
}

// answer is the worker's text for job: a digest of its prompt, plus the
// fault's doing.
func (w *worker) answer(job *queue.Job) string {
	h := fnv.New64a()
	_, _ = io.WriteString(h, job.Prompt)
	text := fmt.Sprintf(" once %x", h.Sum64())
	w.mu.Lock()
	defer w.mu.Unlock()
	prev := w.last
	w.last = job
	w.seen[job.Prompt]++
	switch {
	case w.fault == ForeignMarker:
		if first, ok := w.answers[job.Prompt]; ok {
			return first
		}
		if prev != nil && prev.Tenant != job.Tenant {
			text += " " + strings.Fields(prev.Prompt)[0]
		}
		w.answers[job.Prompt] = text
	case w.fault == DiffersUnderLoad && w.seen[job.Prompt] > 1:
		text += " again"
	}
	return text
}

// halveWindows fronts h with a proxy whose model listings advertise half
// the context window h admits by.
func halveWindows(t testing.TB, h http.Handler) http.Handler {
	backend := httptest.NewServer(h)
	t.Cleanup(backend.Close)
	u, err := url.Parse(backend.URL)
	if err != nil {
		t.Fatal(err)
	}
	p := httputil.NewSingleHostReverseProxy(u)
	p.ModifyResponse = func(resp *http.Response) error {
		if resp.Request.URL.Path != "/v1/models" || resp.StatusCode != http.StatusOK {
			return nil
		}
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			return err
		}
		var list struct {
			Object string           `json:"object"`
			Data   []map[string]any `json:"data"`
		}
		if err := json.Unmarshal(b, &list); err != nil {
			return err
		}
		for _, m := range list.Data {
			if w, ok := m["context_window"].(float64); ok {
				m["context_window"] = int(w) / 2
			}
		}
		if b, err = json.Marshal(list); err != nil {
			return err
		}
		resp.Body = io.NopCloser(bytes.NewReader(b))
		resp.ContentLength = int64(len(b))
		resp.Header.Set("Content-Length", strconv.Itoa(len(b)))
		return nil
	}
	return p
}

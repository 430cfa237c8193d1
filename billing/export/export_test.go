package export

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/bulkhead-ai/bulkhead/models/testkit"
	"github.com/bulkhead-ai/bulkhead/queue"
	"github.com/bulkhead-ai/bulkhead/queue/queuetest"
)

func usage(i int) *queue.UsageEvent {
	return &queue.UsageEvent{RequestID: fmt.Sprintf("req-%d", i), Tenant: "acme", Model: "@cf/meta/llama-3.2-1b-instruct",
		PromptTokens: 12, CachedTokens: 4, CompletionTokens: 30, Finish: queue.OutcomeStop,
		Time: time.Date(2026, 12, 3, 10, 0, i%60, 0, time.UTC), MicroNeurons: 1500, Neurons: 0.0015,
		WorkerID: "w1", Metadata: map[string]string{"app": "search"}, User: "u-7"}
}

// TestEncodeIsACloudEvent: the JSON has CloudEvents 1.0's required and
// optional attributes as the docs map them, data is the usage event, and
// Decode gives it back; an event that is not valid is not encoded.
func TestEncodeIsACloudEvent(t *testing.T) {
	ev := usage(1)
	b, err := Encode(ev, "bulkhead/eu-1")
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]any{
		"specversion": "1.0", "id": "req-1", "source": "bulkhead/eu-1", "type": EventType,
		"subject": "acme", "time": "2026-12-03T10:00:01Z", "datacontenttype": "application/json",
	} {
		if m[k] != want {
			t.Errorf("%s = %v, want %v", k, m[k], want)
		}
	}
	data, _ := m["data"].(map[string]any)
	if data["model"] != ev.Model || data["prompt_tokens"] != 12.0 || data["micro_neurons"] != 1500.0 || data["user"] != "u-7" {
		t.Errorf("data %v", data)
	}
	ce, back, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if ce.ID() != "req-1" || back.Metadata["app"] != "search" || !back.Time.Equal(ev.Time) || back.CachedTokens != 4 {
		t.Errorf("decoded %+v %+v", ce, back)
	}
	bad := usage(2)
	bad.Tenant = "a.b"
	if _, err := Encode(bad, DefaultSource); err == nil {
		t.Error("an event with an invalid tenant was encoded")
	}
	if _, err := Encode(usage(3), ""); err == nil {
		t.Error("an event without a source was encoded")
	}
	if _, _, err := Decode([]byte(`{"specversion":"1.0","id":"x","source":"s","type":"other"}`)); err == nil {
		t.Error("a CloudEvent of another type decoded")
	}
}

// publish puts n counted events on the export stream, as billing does.
func publish(t *testing.T, n int) (context.Context, jetstream.JetStream) {
	t.Helper()
	srv := queuetest.Server(t)
	_, js := queuetest.JetStream(t, srv.ClientURL())
	ctx := context.Background()
	if err := queue.Setup(ctx, js, queue.StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		b, err := Encode(usage(i), DefaultSource)
		if err != nil {
			t.Fatal(err)
		}
		if err := queue.PublishExport(ctx, js, "acme", usage(i).RequestID, b); err != nil {
			t.Fatal(err)
		}
	}
	return ctx, js
}

// TestReaderPostsEachEventOnce: an endpoint that fails three times gets
// every event in one accepted batch or another, once, with the operator's
// header and CloudEvents' batch content type; the reader acknowledges only
// then, so nothing is left pending and a restarted reader sends nothing
// more.
func TestReaderPostsEachEventOnce(t *testing.T) {
	const n = 250
	ctx, js := publish(t, n)
	var mu sync.Mutex
	got := map[string]int{}
	calls := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		calls++
		if calls <= 3 {
			http.Error(w, "busy", http.StatusInternalServerError)
			return
		}
		if r.Header.Get("Content-Type") != BatchContentType || r.Header.Get("Authorization") != "Bearer k" {
			http.Error(w, "bad headers", http.StatusBadRequest)
			return
		}
		var batch []json.RawMessage
		if err := json.NewDecoder(r.Body).Decode(&batch); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		for _, e := range batch {
			_, u, err := Decode(e)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			got[u.RequestID]++
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	run := func() {
		cons, err := queue.ExportConsumer(ctx, js, "openmeter", "", false, 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		rctx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		r := &Reader{Consumer: cons, Sink: Post{URL: srv.URL, Header: http.Header{"Authorization": {"Bearer k"}}},
			Wait: 100 * time.Millisecond, Retry: 10 * time.Millisecond}
		go func() { done <- r.Run(rctx) }()
		testkit.Poll(t, 20*time.Second, func() error {
			info, err := cons.Info(ctx)
			if err != nil {
				return err
			}
			mu.Lock()
			defer mu.Unlock()
			if len(got) != n || info.NumPending != 0 || info.NumAckPending != 0 {
				return fmt.Errorf("%d of %d events posted; %d pending, %d unacknowledged", len(got), n, info.NumPending, info.NumAckPending)
			}
			return nil
		})
		stop()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	run()
	run() // a second reader on the same consumer starts past what was taken
	mu.Lock()
	defer mu.Unlock()
	for id, c := range got {
		if c != 1 {
			t.Errorf("%s posted %d times", id, c)
		}
	}
	if calls < 4 {
		t.Errorf("%d calls: the failures were not retried", calls)
	}
}

// TestReaderWritesLines: JSON Lines, one CloudEvent each, in stream order,
// for one tenant's consumer.
func TestReaderWritesLines(t *testing.T) {
	const n = 30
	ctx, js := publish(t, n)
	cons, err := queue.ExportConsumer(ctx, js, "lines", "acme", false, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var buf bytes.Buffer
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- (&Reader{Consumer: cons, Sink: Lines{W: lockedWriter{&mu, &buf}}, Batch: 7, Wait: 100 * time.Millisecond}).Run(rctx)
	}()
	testkit.Poll(t, 10*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		if c := strings.Count(buf.String(), "\n"); c != n {
			return fmt.Errorf("%d lines of %d", c, n)
		}
		return nil
	})
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for i, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		_, u, err := Decode([]byte(line))
		if err != nil || u.RequestID != fmt.Sprintf("req-%d", i) {
			t.Fatalf("line %d: %v %v", i, u, err)
		}
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

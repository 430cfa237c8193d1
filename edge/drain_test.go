package edge

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/bulkhead-ai/bulkhead/models/testkit"
	"github.com/bulkhead-ai/bulkhead/queue"
)

// held answers with one token, then waits for release (or the worker's
// end) before its final frame: a stream in flight for as long as the test
// wants.
func held(release <-chan struct{}) behaviour {
	return func(ctx context.Context, h *harness, job *queue.Job, rp *queue.Replier) {
		if err := rp.Token(ctx, "Hello", []int32{1}); err != nil {
			return
		}
		select {
		case <-release:
		case <-ctx.Done():
			return
		}
		_ = rp.Final(ctx, " world", "stop", queue.Usage{PromptTokens: job.PromptTokens, CompletionTokens: 2})
	}
}

const streamBody = `{"prompt":"Once upon a time","raw":true,"stream":true}`

// startStream sends a streaming request in the background; the returned
// channel yields its status and body once the stream ends.
func startStream(h *harness) <-chan []byte {
	out := make(chan []byte, 1)
	go func() {
		_, _, b := h.do("POST", "/ai/run/"+modelStories, "alice", streamBody)
		out <- b
	}()
	return out
}

// TestDrainLetsStreamsFinish: once Drain starts, new requests on either API
// get 503 draining (3050) with a Retry-After and Connection: close, while
// the stream in flight runs to its final frame; Drain returns when it has.
func TestDrainLetsStreamsFinish(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	release := make(chan struct{})
	h.setBehaviour(held(release))
	done := startStream(h)
	testkit.Poll(t, 5*time.Second, testkit.Cond("the stream in flight", func() bool { return h.jobCount() == 1 && h.srv.InFlight() == 1 }))

	drained := make(chan error, 1)
	go func() { drained <- h.srv.Drain(context.Background()) }()
	testkit.Poll(t, 5*time.Second, testkit.Cond("draining", h.srv.Draining))

	status, hdr, body := h.do("POST", "/ai/run/"+modelStories, "alice", streamBody)
	if code, _ := nativeErr(t, body); status != 503 || code != 3050 || hdr.Get("Retry-After") != "1" {
		t.Fatalf("native request while draining: %d %v %s", status, hdr, body)
	}
	status, hdr, body = h.do("POST", "/v1/completions", "alice", `{"model":"`+modelStories+`","prompt":"Hi"}`)
	if typ, _, _ := openAIErr(t, body); status != 503 || typ != "server_error" || hdr.Get("Retry-After") != "1" {
		t.Fatalf("OpenAI request while draining: %d %v %s", status, hdr, body)
	}
	if h.jobCount() != 1 {
		t.Fatalf("%d jobs reached the worker, want only the one in flight", h.jobCount())
	}
	select {
	case err := <-drained:
		t.Fatalf("Drain returned %v with a stream in flight", err)
	default:
	}

	close(release)
	evs := parseSSE(t, <-done)
	if len(evs) < 2 || evs[len(evs)-1].data != "[DONE]" {
		t.Fatalf("stream in flight ended with %+v, want its answer then [DONE]", evs)
	}
	var text strings.Builder
	for _, e := range evs[:len(evs)-1] {
		text.WriteString(mustJSON(t, []byte(e.data))["response"].(string))
	}
	if text.String() != "Hello world" {
		t.Fatalf("stream text %q", text.String())
	}
	if err := <-drained; err != nil {
		t.Fatalf("Drain: %v", err)
	}
}

// TestDrainGraceRunsOut: a stream still running when Drain's context ends
// is cancelled; its client gets an error event, not a truncated success,
// and Drain reports the deadline.
// (The error is draining, 3050: the client may retry on another edge.)
func TestDrainGraceRunsOut(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	release := make(chan struct{})
	defer close(release)
	h.setBehaviour(held(release))
	done := startStream(h)
	testkit.Poll(t, 5*time.Second, testkit.Cond("the stream in flight", func() bool { return h.jobCount() == 1 && h.srv.InFlight() == 1 }))
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := h.srv.Drain(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Drain = %v, want the deadline", err)
	}
	if n := h.srv.InFlight(); n != 0 {
		t.Fatalf("%d requests still in flight after Drain", n)
	}
	evs := parseSSE(t, <-done)
	if len(evs) == 0 || evs[len(evs)-1].name != "error" || !strings.Contains(evs[len(evs)-1].data, "3050") {
		t.Fatalf("cut stream ended with %+v, want an error event with code 3050", evs)
	}
}

// TestDrainIdle: an edge with nothing in flight drains at once.
func TestDrainIdle(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	if err := h.srv.Drain(context.Background()); err != nil {
		t.Fatal(err)
	}
	if status, _, _ := h.do("GET", "/ai/models/search", "alice", ""); status != 503 {
		t.Fatalf("after Drain: %d, want 503", status)
	}
}

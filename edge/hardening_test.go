package edge

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/bulkhead-ai/bulkhead/models/testkit"
	"github.com/bulkhead-ai/bulkhead/queue"
)

// listen serves h's edge with limits l on a loopback port and returns its
// address; it is shut down when the test ends.
func listen(t *testing.T, h *harness, l HTTPLimits) string {
	t.Helper()
	hs, err := NewHTTPServer(h.srv.Handler(), l)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = hs.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = hs.Shutdown(ctx)
		<-done
	})
	return ln.Addr().String()
}

// openFDs counts this process's open file descriptors (Linux).
func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd: %v", err)
	}
	return len(ents)
}

// readResponse reads one response from c and reports it and how long after
// start the connection was closed by the server (0 if it stayed open for
// wait).
func readResponse(c net.Conn) (*http.Response, []byte, error) {
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp, b, err
}

// closedWithin reports whether the server closes c within d.
func closedWithin(c net.Conn, d time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(d))
	var b [1]byte
	for {
		_, err := c.Read(b[:])
		if err == nil {
			continue
		}
		var ne net.Error
		return !(errors.As(err, &ne) && ne.Timeout())
	}
}

// TestSlowloris: bodies that trickle in are cut with 408 at the body
// deadline (with and without a token, twenty at once), an unauthenticated
// request is answered 401 before its body and its connection closed at once,
// idle keep-alive connections and slow headers are closed at their
// deadlines, and the edge's file descriptors return to their baseline.
func TestSlowloris(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	lim := HTTPLimits{ReadHeaderTimeout: 500 * time.Millisecond, BodyReadTimeout: time.Second, IdleTimeout: 700 * time.Millisecond}
	addr := listen(t, h, lim)
	base := openFDs(t)
	var peak atomic.Int64

	dial := func(t *testing.T) net.Conn {
		t.Helper()
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	// trickle sends the headers of a body of n bytes, then one byte every
	// 200 ms until the connection breaks or stop closes.
	trickle := func(c net.Conn, path, token string, n int, stop <-chan struct{}) {
		hdr := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n", path, n)
		if token != "" {
			hdr += "Authorization: Bearer " + token + "\r\n"
		}
		if _, err := io.WriteString(c, hdr+"\r\n{"); err != nil {
			return
		}
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for range n - 1 {
			select {
			case <-stop:
				return
			case <-t.C:
				if _, err := io.WriteString(c, " "); err != nil {
					return
				}
			}
		}
	}

	t.Run("body with a token: 408 at the deadline", func(t *testing.T) {
		c := dial(t)
		stop := make(chan struct{})
		defer close(stop)
		start := time.Now()
		go trickle(c, "/ai/run/"+modelStories, "alice", 1000, stop)
		resp, body, err := readResponse(c)
		d := time.Since(start)
		if err != nil {
			t.Fatal(err)
		}
		var env struct {
			Errors []struct{ Code int } `json:"errors"`
		}
		if resp.StatusCode != 408 || json.Unmarshal(body, &env) != nil || len(env.Errors) != 1 || env.Errors[0].Code != 3046 {
			t.Fatalf("status %d body %s, want 408 with code 3046", resp.StatusCode, body)
		}
		if d < lim.BodyReadTimeout-100*time.Millisecond || d > lim.BodyReadTimeout+time.Second {
			t.Fatalf("cut after %v, want about %v", d, lim.BodyReadTimeout)
		}
		if !closedWithin(c, time.Second) {
			t.Fatal("the connection stayed open after the 408")
		}
		t.Logf("trickled body cut after %v", d.Round(time.Millisecond))
	})
	t.Run("OpenAI body: 408 in OpenAI's shape", func(t *testing.T) {
		c := dial(t)
		stop := make(chan struct{})
		defer close(stop)
		go trickle(c, "/v1/chat/completions", "alice", 1000, stop)
		resp, body, err := readResponse(c)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != 408 || !strings.Contains(string(body), `"request_timeout"`) {
			t.Fatalf("status %d body %s", resp.StatusCode, body)
		}
	})
	t.Run("no token: 401 at once, connection closed", func(t *testing.T) {
		c := dial(t)
		stop := make(chan struct{})
		defer close(stop)
		start := time.Now()
		go trickle(c, "/ai/run/"+modelStories, "", 1000, stop)
		resp, _, err := readResponse(c)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != 401 {
			t.Fatalf("status %d, want 401", resp.StatusCode)
		}
		if !closedWithin(c, 500*time.Millisecond) {
			t.Fatal("the connection of an unauthenticated request stayed open")
		}
		if d := time.Since(start); d > 700*time.Millisecond {
			t.Fatalf("answered and closed after %v", d)
		}
	})
	t.Run("twenty trickling bodies", func(t *testing.T) {
		stop := make(chan struct{})
		defer close(stop)
		var wg sync.WaitGroup
		errs := make(chan error, 20)
		start := time.Now()
		for i := range 20 {
			c := dial(t)
			token := "alice"
			if i%2 == 1 {
				token = ""
			}
			go trickle(c, "/ai/run/"+modelStories, token, 1000, stop)
			wg.Go(func() {
				resp, _, err := readResponse(c)
				switch {
				case err != nil:
					errs <- err
				case resp.StatusCode != 408 && resp.StatusCode != 401:
					errs <- fmt.Errorf("status %d", resp.StatusCode)
				case !closedWithin(c, 2*time.Second):
					errs <- errors.New("connection left open")
				}
			})
		}
		peak.Store(int64(openFDs(t)))
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		if d := time.Since(start); d > lim.BodyReadTimeout+2*time.Second {
			t.Fatalf("all cut after %v", d)
		}
	})
	t.Run("idle keep-alive closed", func(t *testing.T) {
		c := dial(t)
		if _, err := io.WriteString(c, "GET /ai/models/search HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer alice\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		resp, _, err := readResponse(c)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("%v %v", resp, err)
		}
		start := time.Now()
		if !closedWithin(c, 3*time.Second) {
			t.Fatal("an idle keep-alive connection stayed open")
		}
		if d := time.Since(start); d < lim.IdleTimeout-100*time.Millisecond || d > lim.IdleTimeout+time.Second {
			t.Fatalf("closed after %v, want about %v", d, lim.IdleTimeout)
		}
	})
	t.Run("slow headers closed", func(t *testing.T) {
		c := dial(t)
		start := time.Now()
		if _, err := io.WriteString(c, "POST /ai/run/x HTTP/1.1\r\nHost: x\r\n"); err != nil {
			t.Fatal(err)
		}
		if !closedWithin(c, 3*time.Second) {
			t.Fatal("a connection with unfinished headers stayed open")
		}
		if d := time.Since(start); d > lim.ReadHeaderTimeout+time.Second {
			t.Fatalf("closed after %v", d)
		}
	})
	t.Run("a body that arrives in time is served", func(t *testing.T) {
		status, _, body := h.do("POST", "/ai/run/"+modelStories, "alice", `{"prompt":"hi"}`)
		if status != 200 {
			t.Fatalf("status %d: %s", status, body)
		}
	})
	// Every connection is gone: the descriptors come back.
	h.http.CloseClientConnections()
	var n int
	testkit.Poll(t, 10*time.Second, func() error {
		if n = openFDs(t); n > base {
			return fmt.Errorf("%d file descriptors open, baseline %d", n, base)
		}
		return nil
	})
	t.Logf("file descriptors: baseline %d, peak %d with 20 trickling clients, back to %d", base, peak.Load(), n)
}

// TestHTTPLimitsValidate: negative limits name their field.
func TestHTTPLimitsValidate(t *testing.T) {
	for _, l := range []HTTPLimits{{ReadHeaderTimeout: -1}, {BodyReadTimeout: -1}, {IdleTimeout: -1}, {MaxHeaderBytes: -1}} {
		if _, err := NewHTTPServer(http.NotFoundHandler(), l); !errors.Is(err, ErrConfig) {
			t.Fatalf("%+v: %v", l, err)
		}
	}
	hs, err := NewHTTPServer(http.NotFoundHandler(), HTTPLimits{})
	if err != nil || hs.ReadHeaderTimeout != DefaultReadHeaderTimeout || hs.IdleTimeout != DefaultIdleTimeout ||
		hs.MaxHeaderBytes != DefaultMaxHeaderBytes {
		t.Fatalf("defaults: %+v %v", hs, err)
	}
}

// TestFastFailures: a model with no live worker is 503 at once with
// Retry-After; a worker that stops heartbeating mid-stream gives the client
// an error event within a few seconds and the job is cancelled; ai:read may
// poll but not run.
func TestFastFailures(t *testing.T) {
	live := queue.NewLiveModels(0)
	live.Set(queue.Fleet{Windows: map[string]int{modelStories: 512}})
	h := newHarness(t, harnessOpts{live: live})

	t.Run("no live worker", func(t *testing.T) {
		status, hdr, body := h.do("POST", "/ai/run/"+modelIdle, "alice", `{"prompt":"hi"}`)
		if status != 503 || !strings.Contains(string(body), "3047") || hdr.Get("Retry-After") == "" {
			t.Fatalf("status %d, Retry-After %q: %s", status, hdr.Get("Retry-After"), body)
		}
		// Refused, not queued: what happened, not how fast. A job for the
		// model no worker consumes would stay in the stream.
		st, err := h.js.Stream(context.Background(), queue.JobsStream)
		if err != nil {
			t.Fatal(err)
		}
		info, err := st.Info(context.Background(), jetstream.WithSubjectFilter(queue.JobsPrefix+">"))
		if err != nil {
			t.Fatal(err)
		}
		for subj := range info.State.Subjects {
			if strings.HasPrefix(subj, queue.JobSubject(modelIdle)) {
				t.Fatalf("a job queued for a model no worker serves, on %s", subj)
			}
		}
	})
	t.Run("worker dies mid-stream", func(t *testing.T) {
		h.setBehaviour(func(ctx context.Context, h *harness, job *queue.Job, rp *queue.Replier) {
			_ = rp.Heartbeat()
			_ = rp.Token(ctx, "Once", []int32{1})
			// and then nothing: the worker is gone
		})
		start := time.Now()
		status, _, body := h.do("POST", "/ai/run/"+modelStories, "alice", `{"prompt":"hi","stream":true}`)
		d := time.Since(start)
		if status != 200 {
			t.Fatalf("status %d: %s", status, body)
		}
		evs := parseSSE(t, body)
		last := evs[len(evs)-1]
		if last.name != "error" || !strings.Contains(last.data, "3049") {
			t.Fatalf("stream ended with %+v, want an error event with code 3049", last)
		}
		if d > 5*time.Second {
			t.Fatalf("the client waited %v", d)
		}
		t.Logf("error event after %v", d.Round(time.Millisecond))
		res, err := queue.OpenResults(context.Background(), h.js)
		if err != nil {
			t.Fatal(err)
		}
		checkCancelled(t, res, h.lastJob().ID)
	})
	t.Run("ai:read polls, cannot run", func(t *testing.T) {
		status, _, body := h.do("POST", "/ai/run/"+modelStories, "reader", `{"request_id":"0123456789abcdef0123456789abcdef-1"}`)
		if status != 404 {
			t.Fatalf("ai:read poll: status %d: %s, want 404 (its own unknown request), not 403", status, body)
		}
		status, _, _ = h.do("POST", "/ai/run/"+modelStories, "reader", `{"prompt":"hi"}`)
		if status != 403 {
			t.Fatalf("ai:read run: status %d, want 403", status)
		}
	})
}

func checkCancelled(t *testing.T, res *queue.Results, id string) {
	t.Helper()
	testkit.Poll(t, 5*time.Second, func() error {
		ok, err := res.Cancelled(context.Background(), id)
		if err == nil && !ok {
			err = errors.New("not marked")
		}
		if err != nil {
			return fmt.Errorf("job %s was not cancelled: %w", id, err)
		}
		return nil
	})
}

// TestClassifyHardening: the refusals added for the bus and the listener
// have stable rows, the 503s say when to retry, and a worker's internal
// error text never reaches the client.
func TestClassifyHardening(t *testing.T) {
	tests := []struct {
		name   string
		err    error
		status int
		code   int
		retry  bool
		hidden string // text that must not be in the message
	}{
		{"body timeout", ErrBodyTimeout, 408, 3046, false, ""},
		{"no worker", fmt.Errorf("x: %w", queue.ErrNoWorker), 503, 3047, true, ""},
		{"store full", fmt.Errorf("x: %w", queue.ErrStoreFull), 503, 3048, true, ""},
		{"NATS down", fmt.Errorf("x: %w", queue.ErrUnavailable), 503, 3043, true, ""},
		{"worker lost", fmt.Errorf("x: %w", queue.ErrWorkerLost), 503, 3049, true, ""},
		{"unavailable frame", &queue.FrameError{Kind: queue.ErrKindUnavailable, Message: "the results store is full"}, 503, 3043, true, ""},
		{"internal frame", &queue.FrameError{Kind: queue.ErrKindInternal, Message: "KV handoff failed: nats: timeout on 10.0.0.7"}, 500, 3045, false, "10.0.0.7"},
		{"unknown frame kind", &queue.FrameError{Kind: "weird", Message: "panic: runtime error"}, 500, 3045, false, "panic"},
		{"capacity frame, multi-line", &queue.FrameError{Kind: queue.ErrKindCapacity, Message: "engine: pool\ngoroutine 1 [running]"}, 429, 3040, false, "goroutine"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := Classify(tc.err)
			if e.Row.Status != tc.status || e.Row.Code != tc.code || (e.RetryAfter > 0) != tc.retry {
				t.Fatalf("%+v, want %d/%d retry %v", e, tc.status, tc.code, tc.retry)
			}
			if tc.hidden != "" && strings.Contains(e.Message, tc.hidden) {
				t.Fatalf("message %q shows %q", e.Message, tc.hidden)
			}
		})
	}
}

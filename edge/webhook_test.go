package edge

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bulkhead-ai/bulkhead/models/testkit"
	"github.com/bulkhead-ai/bulkhead/queue"
)

const hookSecret = "a-secret-of-sixteen-bytes-at-least"

// receiver is a local HTTPS webhook receiver that verifies each
// notification's signature, answers 500 to its first failFirst posts, and
// records each job's verified, accepted notifications.
type receiver struct {
	srv *httptest.Server

	mu        sync.Mutex
	failFirst int
	posts     int
	accepted  map[string]int // webhook-id -> accepted deliveries
	bodies    map[string]webhookBody
	bad       []string
}

func newReceiver(t *testing.T, failFirst int) *receiver {
	rc := &receiver{failFirst: failFirst, accepted: map[string]int{}, bodies: map[string]webhookBody{}}
	rc.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		id, ts := r.Header.Get("webhook-id"), r.Header.Get("webhook-timestamp")
		n, _ := strconv.ParseInt(ts, 10, 64)
		rc.mu.Lock()
		defer rc.mu.Unlock()
		rc.posts++
		if want := signWebhook(hookSecret, id, n, body); r.Header.Get("webhook-signature") != want || time.Since(time.Unix(n, 0)) > time.Minute {
			rc.bad = append(rc.bad, id)
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		}
		if rc.posts <= rc.failFirst {
			http.Error(w, "busy", http.StatusInternalServerError)
			return
		}
		var b webhookBody
		if err := json.Unmarshal(body, &b); err != nil {
			rc.bad = append(rc.bad, id)
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		rc.accepted[id]++
		rc.bodies[id] = b
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(rc.srv.Close)
	return rc
}

func (rc *receiver) config() *WebhookConfig {
	pool := x509.NewCertPool()
	pool.AddCert(rc.srv.Certificate())
	return &WebhookConfig{Hosts: []string{"127.0.0.1"}, AllowPrivate: true, RootCAs: pool, Retry: 20 * time.Millisecond}
}

func (rc *receiver) webhook() string {
	return `"webhook":{"url":"` + rc.srv.URL + `/hook","secret":"` + hookSecret + `"}`
}

// runWebhooks runs srv's deliverer until the returned stop.
func runWebhooks(srv *Server) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); srv.RunWebhooks(ctx) }()
	return func() { cancel(); <-done }
}

// TestWebhookDelivered: a batch of three with a webhook; its jobs end while
// no edge delivers; an edge starts, meets a receiver that answers 500 three
// times, and stops; another edge (the restart) takes over. The receiver
// gets exactly one verified, accepted notification per job, each the
// job's response as a poll shows it.
func TestWebhookDelivered(t *testing.T) {
	rc := newReceiver(t, 3)
	h := newHarness(t, harnessOpts{webhooks: rc.config()})
	status, _, b := h.do("POST", "/ai/run/"+modelStories+"?queueRequest=true", "alice",
		`{"requests":[{"prompt":"a"},{"prompt":"b"},{"prompt":"c"}],`+rc.webhook()+`}`)
	if status != 200 {
		t.Fatalf("status %d: %s", status, b)
	}
	var sub struct {
		Result asyncResult `json:"result"`
	}
	if err := json.Unmarshal(b, &sub); err != nil {
		t.Fatal(err)
	}
	id := sub.Result.RequestID
	testkit.Poll(t, 10*time.Second, func() error {
		_, _, b := h.do("POST", "/ai/run/"+modelStories, "alice", `{"request_id":"`+id+`"}`)
		if !strings.Contains(string(b), `"status":"done"`) {
			return fmt.Errorf("batch not done: %s", b)
		}
		return nil
	})
	first := runWebhooks(h.srv)
	testkit.Poll(t, 10*time.Second, func() error {
		rc.mu.Lock()
		defer rc.mu.Unlock()
		if rc.posts < 3 {
			return fmt.Errorf("%d posts", rc.posts)
		}
		return nil
	})
	first()
	restarted, err := New(nil, h.srv.cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer runWebhooks(restarted)()
	testkit.Poll(t, 20*time.Second, func() error {
		rc.mu.Lock()
		defer rc.mu.Unlock()
		if len(rc.accepted) < 3 {
			return fmt.Errorf("%d of 3 jobs announced, %d posts", len(rc.accepted), rc.posts)
		}
		return nil
	})
	time.Sleep(200 * time.Millisecond) // a duplicate would arrive by now
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if len(rc.bad) > 0 {
		t.Errorf("unverified notifications: %v", rc.bad)
	}
	for i := range 3 {
		job := jobID(id, i)
		b := rc.bodies[job]
		if rc.accepted[job] != 1 || b.RequestID != id || b.Response.ID != i || !b.Response.Success ||
			b.Response.Result.Response != "Hello world" || b.Type != "ai.async.done" || b.Model != modelStories {
			t.Errorf("job %s: accepted %d times, body %+v", job, rc.accepted[job], b)
		}
	}
}

// TestWebhookInFlightAtStop: an edge stopped while its receiver is still
// answering a notification finishes that delivery and acknowledges it: no
// other edge delivers it again.
func TestWebhookInFlightAtStop(t *testing.T) {
	rc := newReceiver(t, 0)
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	accept := rc.srv.Config.Handler
	rc.srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		once.Do(func() { close(entered) })
		<-release
		accept.ServeHTTP(w, r)
	})
	h := newHarness(t, harnessOpts{webhooks: rc.config()})
	status, _, b := h.do("POST", "/ai/run/"+modelStories+"?queueRequest=true", "alice",
		`{"requests":[{"prompt":"a"}],`+rc.webhook()+`}`)
	if status != 200 {
		t.Fatalf("status %d: %s", status, b)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); h.srv.RunWebhooks(ctx) }()
	select {
	case <-entered:
	case <-time.After(20 * time.Second):
		close(release)
		stop()
		t.Fatal("no notification reached the receiver")
	}
	stop() // the edge stops while the receiver has the notification
	close(release)
	<-done
	cons, err := h.js.Consumer(context.Background(), queue.NotifyStream, queue.NotifyConsumer)
	if err != nil {
		t.Fatal(err)
	}
	info, err := cons.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if info.NumPending != 0 || info.NumAckPending != 0 || info.NumRedelivered != 0 {
		t.Errorf("after the stop: %d notices pending, %d unacknowledged, %d redelivered; want the delivered one acknowledged",
			info.NumPending, info.NumAckPending, info.NumRedelivered)
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if len(rc.accepted) != 1 || len(rc.bad) != 0 {
		t.Errorf("receiver accepted %v, refused %v; want one notification", rc.accepted, rc.bad)
	}
}

// TestWebhookRefused: what a batch's webhook may not be.
func TestWebhookRefused(t *testing.T) {
	rc := newReceiver(t, 0)
	private := rc.config()
	private.AllowPrivate = false
	private.Hosts = []string{"127.0.0.1", "localhost", "*.example.com"}
	off := newHarness(t, harnessOpts{})
	h := newHarness(t, harnessOpts{webhooks: private})
	batch := func(webhook string) string {
		return `{"requests":[{"prompt":"a"}],"webhook":` + webhook + `}`
	}
	for _, tc := range []struct {
		name  string
		h     *harness
		path  string
		body  string
		field string
		want  string
	}{
		{"webhooks off", off, "?queueRequest=true", batch(`{"url":"https://hooks.example.com/x","secret":"` + hookSecret + `"}`), "webhook", "not enabled"},
		{"http", h, "?queueRequest=true", batch(`{"url":"http://hooks.example.com/x","secret":"` + hookSecret + `"}`), "webhook.url", "https"},
		{"host not allowed", h, "?queueRequest=true", batch(`{"url":"https://evil.test/x","secret":"` + hookSecret + `"}`), "webhook.url", "allowlist"},
		{"loopback", h, "?queueRequest=true", batch(`{"url":"` + rc.srv.URL + `/x","secret":"` + hookSecret + `"}`), "webhook.url", "not a public address"},
		{"a name for loopback", h, "?queueRequest=true", batch(`{"url":"https://localhost/x","secret":"` + hookSecret + `"}`), "webhook.url", "not a public address"},
		{"short secret", h, "?queueRequest=true", batch(`{"url":"https://hooks.example.com/x","secret":"short"}`), "webhook.secret", "secret"},
		{"credentials in the url", h, "?queueRequest=true", batch(`{"url":"https://u:p@hooks.example.com/x","secret":"` + hookSecret + `"}`), "webhook.url", "credentials"},
		{"on a request that is not queued", h, "", `{"prompt":"a","webhook":{"url":"https://hooks.example.com/x","secret":"` + hookSecret + `"}}`, "webhook", "queued"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := tc.h.jobCount()
			status, _, b := tc.h.do("POST", "/ai/run/"+modelStories+tc.path, "alice", tc.body)
			if status != 400 || !strings.Contains(string(b), `"`+tc.field+`: `) || !strings.Contains(string(b), tc.want) {
				t.Fatalf("status %d: %s, want 400 naming %s (%s)", status, b, tc.field, tc.want)
			}
			time.Sleep(50 * time.Millisecond)
			if n := tc.h.jobCount(); n != before {
				t.Fatalf("%d jobs queued", n-before)
			}
		})
	}
}

// TestWebhookDialRefusesPrivate: however a name resolved when the batch was
// admitted, the deliverer's connections reach only public addresses.
func TestWebhookDialRefusesPrivate(t *testing.T) {
	rc := newReceiver(t, 0)
	cfg := rc.config()
	cfg.AllowPrivate = false
	_, err := webhookClient(cfg).Post(rc.srv.URL, "application/json", strings.NewReader("{}"))
	if !errors.Is(err, errPrivateTarget) {
		t.Fatalf("a post to %s: %v, want errPrivateTarget", rc.srv.URL, err)
	}
	if _, err := webhookClient(rc.config()).Post(rc.srv.URL, "application/json", strings.NewReader("{}")); err != nil {
		t.Fatalf("with AllowPrivate: %v", err)
	}
	for addr, public := range map[string]bool{
		"8.8.8.8": true, "2606:4700::1111": true, "127.0.0.1": false, "10.1.2.3": false, "172.16.0.1": false,
		"192.168.1.1": false, "169.254.169.254": false, "100.64.0.1": false, "0.0.0.0": false, "::1": false,
		"fe80::1": false, "fd00::1": false, "::ffff:127.0.0.1": false, "::ffff:10.0.0.1": false, "224.0.0.1": false,
		"198.18.0.1": false, "2001:db8::1": false,
	} {
		if got := publicAddr(netip.MustParseAddr(addr)); got != public {
			t.Errorf("publicAddr(%s) = %v, want %v", addr, got, public)
		}
	}
}

// TestSignWebhook: Standard Webhooks' own example signs the same.
func TestSignWebhook(t *testing.T) {
	got := signWebhook("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, []byte(`{"test": 2432232314}`))
	if want := "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="; got != want {
		t.Fatalf("signature %s, want %s", got, want)
	}
}

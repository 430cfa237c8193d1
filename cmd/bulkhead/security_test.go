package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/bulkhead-ai/bulkhead/billing/export"
	"github.com/bulkhead-ai/bulkhead/models/testkit"
	"github.com/bulkhead-ai/bulkhead/queue"
	"github.com/bulkhead-ai/bulkhead/workers/handoff"
)

// natsAs connects to the cluster's NATS with role's credentials file (no
// reconnects) and reports the server's refusals on errs.
func (c *cluster) natsAs(t *testing.T, role string) (*nats.Conn, jetstream.JetStream, chan error) {
	t.Helper()
	creds, err := queue.LoadCredentials(filepath.Join(c.creds, queue.CredsFile(role)))
	if err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 16)
	nc, err := nats.Connect(c.natsURL, append(creds.Options(), nats.MaxReconnects(0),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			select {
			case errs <- err:
			default:
			}
		}))...)
	if err != nil {
		t.Fatalf("connecting as %s: %v", role, err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js, errs
}

// TestClusterSecurity runs NATS (with role credentials), a prefill and a
// decode worker, a unified worker for a second model and an edge as
// separate processes, and shows: the bus refuses connections without
// credentials and each role beyond its permissions, and a job forged with a
// worker's credentials never runs; a model whose worker stopped is refused
// at once; a decode worker killed mid-stream gives its client an error event
// within 5 s; with NATS stopped a request is refused within 2 s.
func TestClusterSecurity(t *testing.T) {
	// Held at token 200: the stream whose decode worker is killed is still
	// running when the kill lands, however fast the engine is.
	c := startHeldCluster(t, true, "prefill", "decode")
	const solo = "@cf/tinyllamas/solo"
	// Held too, with a drain that outlasts the edge's notice: its records
	// must go when its drain starts, not when it ends.
	soloWorker := c.start(t, "worker-solo", c.workerBin, append(append([]string{"worker", "--nats", c.natsURL, "--model", solo + "=" + c.model,
		"--threads", "1", "--drain-grace", "15s"}, c.workerArgs...), c.natsCreds(queue.RoleWorker)...)...)
	billing := c.start(t, "billing", c.bin, append([]string{"billing", "--nats", c.natsURL, "--redis", c.redisURL},
		c.natsCreds(queue.RoleBilling)...)...)
	edgeURL, edgeProc := c.edgeProcess(t, "--model", solo+"="+c.model)
	tok := c.token(t, "acme")
	run := edgeURL + "/ai/run/" + clusterModel
	if status, body := post(t, tok, run, `{"prompt":"Once upon a time","raw":true,"max_tokens":8,"temperature":0}`); status != 200 {
		t.Fatalf("a request through the authenticated cluster: %d %s", status, body)
	}
	if !strings.HasPrefix(handoff.Subject("x"), queue.HandoffPrefix) {
		t.Fatalf("hand-over subjects %q are outside the workers' permission %q", handoff.Subject("x"), queue.HandoffPrefix)
	}

	t.Run("the nodes need nothing their roles may not do", func(t *testing.T) {
		// Billing counts the request's usage event; no node was refused
		// anything by the server.
		testkit.Poll(t, 20*time.Second, testkit.Cond("billing to count the usage event", func() bool {
			return strings.Contains(billing.output(), "counting usage events")
		}))
		for _, p := range append(c.workers, soloWorker, billing, edgeProc) {
			if out := p.output(); strings.Contains(out, "NATS refused") || strings.Contains(out, "ermissions") {
				t.Errorf("%s was refused by NATS:\n%s", p.proc.Name, out)
			}
		}
	})
	t.Run("status with the operator's credentials", func(t *testing.T) {
		if _, stderr, code := bulkhead(t, "status", "--nats", c.natsURL); code == 0 {
			t.Errorf("status without credentials succeeded on an authenticated bus: %s", stderr)
		}
		out, stderr, code := bulkhead(t, append([]string{"status", "--nats", c.natsURL, "--json"}, c.natsCreds(queue.RoleOperator)...)...)
		if code != 0 {
			t.Fatalf("status --nats-creds operator.nk: exit %d: %s", code, stderr)
		}
		var nodes []queue.Node
		if err := json.Unmarshal([]byte(out), &nodes); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		roles := map[string]int{}
		for _, n := range nodes {
			roles[n.Role]++
		}
		if roles["prefill"] < 1 || roles["decode"] < 1 {
			t.Errorf("status lists workers by role %v, want the prefill and decode workers", roles)
		}
	})
	t.Run("usage export with the export role's credentials", func(t *testing.T) {
		// The counted usage event reaches a meter's ingest endpoint as a
		// CloudEvent, read with the export role's credentials alone.
		got := make(chan []byte, 8)
		meterSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			if r.Header.Get("Content-Type") != export.BatchContentType || r.Header.Get("Authorization") != "Bearer om" {
				http.Error(w, "bad headers", http.StatusBadRequest)
				return
			}
			got <- b
			w.WriteHeader(http.StatusNoContent)
		}))
		defer meterSrv.Close()
		c.start(t, "usage-export", c.bin, append([]string{"usage-export", "--nats", c.natsURL, "--post", meterSrv.URL,
			"--post-header", "Authorization: Bearer om"}, c.natsCreds(queue.RoleExport)...)...)
		var batch []json.RawMessage
		select {
		case b := <-got:
			if err := json.Unmarshal(b, &batch); err != nil || len(batch) == 0 {
				t.Fatalf("the meter got %s (%v)", b, err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("no usage event reached the meter")
		}
		ce, ev, err := export.Decode(batch[0])
		if err != nil || ce.Subject() != "acme" || ev.Model != clusterModel || ev.CompletionTokens == 0 {
			t.Fatalf("exported %s: %+v %v", batch[0], ev, err)
		}
		if _, stderr, code := bulkhead(t, append([]string{"usage-export", "--nats", c.natsURL}, c.natsCreds(queue.RoleBilling)...)...); code == 0 {
			t.Errorf("usage-export with billing's credentials ran: %s", stderr)
		}
	})
	t.Run("no credentials", func(t *testing.T) {
		nc, err := nats.Connect(c.natsURL, nats.MaxReconnects(0))
		if err == nil {
			nc.Close()
			t.Fatal("connected without credentials")
		}
		if !errors.Is(err, nats.ErrAuthorization) && !strings.Contains(strings.ToLower(err.Error()), "authorization") {
			t.Logf("refused with %v", err)
		}
	})
	refusedSub := func(t *testing.T, role, subject string) {
		t.Helper()
		nc, _, errs := c.natsAs(t, role)
		if _, err := nc.SubscribeSync(subject); err != nil {
			return
		}
		select {
		case err := <-errs:
			if !errors.Is(err, nats.ErrPermissionViolation) {
				t.Fatalf("%s on %s: %v", role, subject, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s may subscribe to %s", role, subject)
		}
	}
	t.Run("a worker cannot read replies", func(t *testing.T) { refusedSub(t, queue.RoleWorker, queue.ReplyPrefix+">") })
	t.Run("billing cannot read jobs", func(t *testing.T) { refusedSub(t, queue.RoleBilling, queue.JobsPrefix+">") })
	t.Run("an edge cannot read jobs", func(t *testing.T) { refusedSub(t, queue.RoleEdge, queue.JobsPrefix+">") })
	t.Run("an edge cannot consume jobs", func(t *testing.T) {
		_, js, _ := c.natsAs(t, queue.RoleEdge)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if _, err := queue.EnsureConsumer(ctx, js, clusterModel, queue.ConsumerConfig{}); err == nil {
			t.Fatal("an edge created a job consumer")
		}
	})
	t.Run("a job forged with a worker's credentials never runs", func(t *testing.T) {
		// The edge's credentials listen where the forged job would answer.
		enc, _, _ := c.natsAs(t, queue.RoleEdge)
		forged := &queue.Job{ID: "forged-by-a-worker", Tenant: "victim", Model: clusterModel, Prompt: "Once upon a time",
			MaxTokens: 8, Reply: queue.ReplySubject("forged-by-a-worker"), Deadline: time.Now().Add(time.Minute)}
		sub, err := enc.SubscribeSync(forged.Reply)
		if err != nil {
			t.Fatal(err)
		}
		_, wjs, errs := c.natsAs(t, queue.RoleWorker)
		b, err := queue.EncodeJob(forged)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if _, err := wjs.Publish(ctx, queue.JobSubject(clusterModel), b); err == nil {
			t.Fatal("the jobs stream took a job published with a worker's credentials")
		}
		select {
		case err := <-errs:
			if !errors.Is(err, nats.ErrPermissionViolation) {
				t.Fatalf("publishing a job as a worker: %v", err)
			}
		case <-time.After(2 * time.Second):
			t.Fatal("no permissions violation for a worker publishing a job")
		}
		if m, err := sub.NextMsg(3 * time.Second); err == nil {
			t.Fatalf("the forged job ran: %s", m.Data)
		}
		for _, w := range append(c.workers, soloWorker) {
			if strings.Contains(w.output(), forged.ID) {
				t.Fatalf("%s saw the forged job:\n%s", w.proc.Name, w.output())
			}
		}
	})

	t.Run("a model whose worker stopped is refused at once", func(t *testing.T) {
		srun := edgeURL + "/ai/run/" + solo
		if status, body := post(t, tok, srun, `{"prompt":"Once","max_tokens":4}`); status != 200 {
			t.Fatalf("solo before: %d %s", status, body)
		}
		// A stream the worker holds (--fault-hold-at) keeps its drain going
		// until the drain grace is over.
		resp := openStream(t, tok, srun, `{"prompt":"Once","raw":true,"max_tokens":1000,"stream":true}`)
		ended := make(chan struct{})
		go func() {
			_, _ = io.Copy(io.Discard, resp.Body)
			close(ended)
		}()
		soloWorker.proc.Signal(syscall.SIGTERM)
		testkit.Poll(t, 10*time.Second, testkit.Cond("the edge to see the worker gone", func() bool {
			status, body := post(t, tok, srun, `{"prompt":"Once","max_tokens":4}`)
			return status == 503 && strings.Contains(string(body), "3047")
		}))
		select {
		case <-ended:
			t.Fatal("the model was refused only once the worker's drain was over: its records stayed while it drained")
		default:
		}
		// The client going ends the held job (cancelled), and so the drain.
		resp.Body.Close()
		<-ended
		<-soloWorker.exited()
		// Refused, not queued: what happened, not how fast. A job queued for
		// a model nobody serves would stay in the work-queue stream.
		_, js, _ := c.natsAs(t, queue.RoleOperator)
		before := modelQueue(t, js, solo)
		for range 3 {
			if status, body := post(t, tok, srun, `{"prompt":"Once","max_tokens":4}`); status != 503 || !strings.Contains(string(body), "3047") {
				t.Fatalf("solo after its worker stopped: %d %s", status, body)
			}
		}
		if queued := modelQueue(t, js, solo); !maps.Equal(queued, before) {
			t.Fatalf("jobs queued for the model nobody serves: %v, before the refusals %v", queued, before)
		}
	})

	t.Run("a decode worker killed mid-stream", func(t *testing.T) {
		resp := openStream(t, tok, run, `{"prompt":"Once upon a time","raw":true,"max_tokens":2000,"stream":true}`)
		sc := bufio.NewScanner(resp.Body)
		var killed time.Time
		var errEvent string
		for sc.Scan() {
			line := sc.Text()
			if killed.IsZero() && strings.HasPrefix(line, "data: ") {
				c.workers[1].proc.Signal(syscall.SIGKILL) // the decode worker
				killed = time.Now()
			}
			if line == "event: error" {
				sc.Scan()
				errEvent = sc.Text()
				break
			}
			if line == "data: [DONE]" {
				t.Fatal("the stream finished before the decode worker died")
			}
		}
		d := time.Since(killed)
		if errEvent == "" || !strings.Contains(errEvent, "3049") {
			t.Fatalf("stream ended without the worker-lost error event (%q)", errEvent)
		}
		if d > 5*time.Second {
			t.Fatalf("error event %v after the kill", d)
		}
		t.Logf("decode worker killed: error event after %v", d.Round(time.Millisecond))
	})

	t.Run("NATS stopped", func(t *testing.T) {
		c.nats.stop(syscall.SIGTERM)
		start := time.Now()
		status, body := post(t, tok, run, `{"prompt":"Once upon a time","max_tokens":4}`)
		d := time.Since(start)
		if status != 503 {
			t.Fatalf("status %d: %s", status, body)
		}
		if d > 2*time.Second {
			t.Fatalf("503 after %v", d)
		}
		t.Logf("NATS stopped: %d after %v", status, d.Round(time.Millisecond))
	})
}

// TestNATSRefusesOpenListener: `bulkhead nats` off loopback refuses to start
// without role credentials (--no-auth) and TLS, and with credentials but no
// TLS.
func TestNATSRefusesOpenListener(t *testing.T) {
	for _, args := range [][]string{
		{"nats", "--listen", "0.0.0.0:0", "--store-dir", t.TempDir(), "--no-auth"},
		{"nats", "--listen", "0.0.0.0:0", "--store-dir", t.TempDir(), "--auth-dir", t.TempDir()},
	} {
		var out, errb strings.Builder
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		code := run(ctx, args, &out, &errb)
		cancel()
		if code == 0 || !strings.Contains(errb.String(), "without authentication and TLS") {
			t.Fatalf("%v: exit %d, stderr %q", args, code, errb.String())
		}
	}
}

// TestNATSCredentialsByDefault: `bulkhead nats` with no flag but its
// address requires role credentials: it writes them into the default
// directory (<config>/bulkhead/nats-creds), an anonymous client is refused,
// and the worker's credential connects.
func TestNATSCredentialsByDefault(t *testing.T) {
	bin := buildBinary(t, t.TempDir())
	addr := freeAddr(t)
	ns := start(t, "nats", bin, "nats", "--listen", addr, "--store-dir", filepath.Join(t.TempDir(), "js"))
	testkit.Poll(t, 30*time.Second, testkit.Cond("NATS to listen", func() bool { return strings.Contains(ns.output(), "listening") }))
	url := "nats://" + addr
	if nc, err := nats.Connect(url, nats.MaxReconnects(0)); err == nil {
		nc.Close()
		t.Fatal("an anonymous client connected")
	}
	creds := filepath.Join(os.Getenv("XDG_CONFIG_HOME"), "bulkhead", "nats-creds", "worker.nk")
	opt, err := nats.NkeyOptionFromSeed(creds)
	if err != nil {
		t.Fatalf("the worker's credential: %v", err)
	}
	nc, err := nats.Connect(url, opt, nats.MaxReconnects(0))
	if err != nil {
		t.Fatalf("the worker's credential does not connect: %v", err)
	}
	nc.Close()
}

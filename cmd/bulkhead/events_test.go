package main

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/bulkhead-ai/bulkhead/models/testkit"
	"github.com/bulkhead-ai/bulkhead/queue"
)

// tenantConn connects to the cluster's NATS as tenant, with the credential
// `bulkhead nats --tenant-creds` wrote; errs receives its async errors.
func tenantConn(t *testing.T, c *cluster, tenant string, errs chan<- error) *nats.Conn {
	t.Helper()
	creds, err := queue.LoadCredentials(filepath.Join(c.creds, queue.TenantCredsDir, tenant+".nk"))
	if err != nil {
		t.Fatal(err)
	}
	opts := append(creds.Options(), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		select {
		case errs <- err:
		default:
		}
	}))
	nc, err := nats.Connect(c.natsURL, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// TestTenantEvents: an async batch names an event subject; the tenant's
// own NATS credential receives each job's end below its prefix and
// acknowledges it by replying. A notice nobody answered is sent again; each
// answered one is not. Another tenant's credential may not subscribe to
// those subjects nor publish jobs, and a subject with a wildcard is refused.
// The edge runs without --webhook-hosts.
func TestTenantEvents(t *testing.T) {
	c := startClusterNATS(t, true, 0, []string{"--tenant-creds", "acme,beta"}, "unified")
	edgeURL := c.edge(t)
	tok := c.token(t, "acme")

	var mu sync.Mutex
	got, answered := map[string]int{}, map[string]int{}
	acmeErrs := make(chan error, 4)
	acme := tenantConn(t, c, "acme", acmeErrs)
	if _, err := acme.Subscribe("bulkhead.events.acme.>", func(m *nats.Msg) {
		id := m.Header.Get(queue.EventIDHeader)
		var body struct {
			Type      string `json:"type"`
			RequestID string `json:"request_id"`
		}
		mu.Lock()
		defer mu.Unlock()
		got[id]++
		if m.Subject != "bulkhead.events.acme.batches.done" || json.Unmarshal(m.Data, &body) != nil || body.Type != "ai.async.done" {
			t.Errorf("event on %s: %s", m.Subject, m.Data)
			return
		}
		if len(got) == 1 && got[id] == 1 {
			return // the first delivery goes unanswered: it must come again
		}
		answered[id]++
		_ = m.Respond([]byte("ok"))
	}); err != nil {
		t.Fatal(err)
	}
	if err := acme.Flush(); err != nil {
		t.Fatal(err)
	}

	betaErrs := make(chan error, 4)
	beta := tenantConn(t, c, "beta", betaErrs)
	stolen := 0
	if _, err := beta.Subscribe("bulkhead.events.acme.>", func(*nats.Msg) { stolen++ }); err != nil {
		t.Fatal(err)
	}
	_ = beta.Publish("bulkhead.jobs.x.acme", []byte("{}"))
	_ = beta.Flush()
	for i := range 2 {
		select {
		case err := <-betaErrs:
			if !strings.Contains(strings.ToLower(err.Error()), "permissions violation") {
				t.Errorf("beta's error %d: %v", i, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("beta's subscription to acme's events or its publish was not refused")
		}
	}

	if status, b := post(t, tok, edgeURL+"/ai/run/"+clusterModel, `{"prompt":"Once","max_tokens":2}`); status != 200 {
		t.Fatalf("warm-up: %d %s", status, b)
	}
	if status, b := post(t, tok, edgeURL+"/ai/run/"+clusterModel+"?queueRequest=true",
		`{"requests":[{"prompt":"Once","max_tokens":4}],"event_subject":"batches.>"}`); status != 400 || !strings.Contains(string(b), "event_subject") {
		t.Fatalf("a wildcard subject: %d %s", status, b)
	}
	status, b := post(t, tok, edgeURL+"/ai/run/"+clusterModel+"?queueRequest=true",
		`{"requests":[{"prompt":"Once upon a time","max_tokens":8},{"prompt":"The dog","max_tokens":8}],"event_subject":"batches.done"}`)
	if status != 200 {
		t.Fatalf("batch: %d %s", status, b)
	}
	var sub struct {
		Result struct {
			RequestID string `json:"request_id"`
		} `json:"result"`
	}
	if err := json.Unmarshal(b, &sub); err != nil {
		t.Fatal(err)
	}
	testkit.Poll(t, 60*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		if len(answered) < 2 {
			return fmt.Errorf("%d of 2 events answered (%v received)", len(answered), got)
		}
		return nil
	})
	time.Sleep(time.Second) // a duplicate would arrive by now
	mu.Lock()
	defer mu.Unlock()
	redelivered := 0
	for i := range 2 {
		id := sub.Result.RequestID + "-" + strconv.Itoa(i)
		if answered[id] != 1 {
			t.Errorf("job %s answered %d times", id, answered[id])
		}
		redelivered += got[id] - 1
	}
	if redelivered != 1 || stolen != 0 {
		t.Errorf("%d redeliveries (want the unanswered one), %d events seen by beta; received %v", redelivered, stolen, got)
	}
	select {
	case err := <-acmeErrs:
		t.Errorf("acme's connection: %v", err)
	default:
	}
}

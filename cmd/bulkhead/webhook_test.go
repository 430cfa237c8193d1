package main

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/bulkhead-ai/bulkhead/models/testkit"
)

// TestClusterWebhooks: an async batch names a webhook (a local HTTPS
// receiver that answers 500 three times); the edge that took the batch is
// killed at once; the worker process publishes each job's end; a new edge
// process delivers them. The receiver verifies each signature (HMAC-SHA256,
// Standard Webhooks) and gets exactly one accepted notification per job.
// An edge that does not allow private addresses refuses the same webhook.
// Role credentials throughout: the worker may publish notices and the
// edges consume them, nothing more.
func TestClusterWebhooks(t *testing.T) {
	const secret = "the-receivers-shared-secret"
	var mu sync.Mutex
	posts, accepted, bad := 0, map[string]int{}, 0
	recv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		id, ts := r.Header.Get("webhook-id"), r.Header.Get("webhook-timestamp")
		mac := hmac.New(sha256.New, []byte(secret))
		fmt.Fprintf(mac, "%s.%s.%s", id, ts, body)
		want := "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
		mu.Lock()
		defer mu.Unlock()
		posts++
		var b struct {
			Response struct {
				Success bool `json:"success"`
				Result  struct {
					Response string `json:"response"`
				} `json:"result"`
			} `json:"response"`
		}
		if r.Header.Get("webhook-signature") != want || json.Unmarshal(body, &b) != nil || !b.Response.Success || b.Response.Result.Response == "" {
			bad++
			http.Error(w, "bad notification", http.StatusBadRequest)
			return
		}
		if posts <= 3 {
			http.Error(w, "busy", http.StatusInternalServerError)
			return
		}
		accepted[id]++
		w.WriteHeader(http.StatusNoContent)
	}))
	defer recv.Close()
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: recv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}

	c := startSecureCluster(t, "unified")
	hooks := []string{"--webhook-hosts", "127.0.0.1", "--webhook-allow-private", "--webhook-ca", ca}
	first, firstProc := c.edgeProcess(t, hooks...)
	tok := c.token(t, "acme")
	batch := `{"requests":[{"prompt":"Once upon a time","max_tokens":8},{"prompt":"The dog","max_tokens":8},{"prompt":"A cat","max_tokens":8}],` +
		`"webhook":{"url":"` + recv.URL + `/hooks/bulkhead","secret":"` + secret + `"}}`
	// A synchronous request first: it waits for the worker to announce
	// itself, which an async batch does not.
	if status, b := post(t, tok, first+"/ai/run/"+clusterModel, `{"prompt":"Once","max_tokens":2}`); status != 200 {
		t.Fatalf("warm-up: %d %s", status, b)
	}
	status, b := post(t, tok, first+"/ai/run/"+clusterModel+"?queueRequest=true", batch)
	if status != 200 {
		t.Fatalf("batch: %d %s", status, b)
	}
	firstProc.stop(syscall.SIGKILL)
	var sub struct {
		Result struct {
			RequestID string `json:"request_id"`
		} `json:"result"`
	}
	if err := json.Unmarshal(b, &sub); err != nil {
		t.Fatal(err)
	}

	c.edgeProcess(t, hooks...)
	testkit.Poll(t, 60*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		if len(accepted) < 3 {
			return fmt.Errorf("%d of 3 jobs announced after %d posts", len(accepted), posts)
		}
		return nil
	})
	time.Sleep(time.Second) // a duplicate would arrive by now
	mu.Lock()
	for i := range 3 {
		id := sub.Result.RequestID + "-" + strconv.Itoa(i)
		if accepted[id] != 1 {
			t.Errorf("job %s announced %d times", id, accepted[id])
		}
	}
	if bad > 0 || posts < 6 {
		t.Errorf("%d unverified notifications, %d posts (3 refused, then 3 accepted)", bad, posts)
	}
	t.Logf("%d posts: 3 answered 500, %d accepted, %d unverified", posts, len(accepted), bad)
	mu.Unlock()

	plain := c.edge(t, "--webhook-hosts", "127.0.0.1")
	status, b = post(t, tok, plain+"/ai/run/"+clusterModel+"?queueRequest=true", batch)
	if status != 400 || !strings.Contains(string(b), "not a public address") {
		t.Fatalf("a webhook to 127.0.0.1 without --webhook-allow-private: %d %s", status, b)
	}
}

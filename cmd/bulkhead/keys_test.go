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
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bulkhead-ai/bulkhead/models/testkit"
	"github.com/bulkhead-ai/bulkhead/queue"
)

// put sends a PUT with a JSON body and returns the status and body.
func put(t *testing.T, token, url, body string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest("PUT", url, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// TestKeyBudgets: two API keys of one tenant, through real processes
// (secure NATS, edge, worker, billing, redis-server) and a local HTTPS
// receiver. The tenant gives key "app" a hard daily budget of 4.5
// requests' cost with an alert webhook: app's sixth request is refused
// with 3036 naming the key while key "ci" still runs; the receiver gets
// each of the day's 50, 80 and 100% alerts exactly once, signed; the
// usage API shows app's spend against its budget and the alerts.
func TestKeyBudgets(t *testing.T) {
	const secret = "the-alert-receivers-secret"
	var mu sync.Mutex
	alerts, bad := map[string]int{}, 0
	var eighty map[string]any
	recv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		id, ts := r.Header.Get("webhook-id"), r.Header.Get("webhook-timestamp")
		mac := hmac.New(sha256.New, []byte(secret))
		fmt.Fprintf(mac, "%s.%s.%s", id, ts, body)
		var b map[string]any
		mu.Lock()
		defer mu.Unlock()
		if r.Header.Get("webhook-signature") != "v1,"+base64.StdEncoding.EncodeToString(mac.Sum(nil)) ||
			json.Unmarshal(body, &b) != nil || b["type"] != "ai.budget.alert" {
			bad++
			http.Error(w, "bad notification", http.StatusBadRequest)
			return
		}
		alerts[id]++
		if b["threshold"] == 80.0 {
			eighty = b
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer recv.Close()
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: recv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}

	c := startSecureCluster(t, "unified")
	edgeURL := c.edge(t, "--webhook-hosts", "127.0.0.1", "--webhook-allow-private", "--webhook-ca", ca)
	c.start(t, "billing", c.bin, append([]string{"billing", "--nats", c.natsURL, "--redis", c.redisURL},
		c.natsCreds(queue.RoleBilling)...)...)
	mint := func(key string, scopes ...string) string {
		tok, err := c.key.MintKey("acme", key, scopes, nil, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	app, ci, probe := mint("app", "ai:run"), mint("ci", "ai:run"), mint("probe", "ai:run")
	admin, reader := mint("", "billing:read", "billing:write"), mint("", "billing:read")
	const body = `{"prompt":"Once upon a time","max_tokens":24,"temperature":0}`
	run := func(tok string) (int, []byte) { return post(t, tok, edgeURL+"/ai/run/"+clusterModel, body) }

	// One request's cost, from the usage API (greedy: each costs the same).
	if status, b := run(probe); status != 200 {
		t.Fatalf("probe: %d %s", status, b)
	}
	var cost float64
	testkit.Poll(t, 60*time.Second, func() error {
		var recent struct {
			Requests []struct {
				Neurons float64 `json:"neurons"`
			} `json:"requests"`
		}
		getUsage(t, edgeURL, "/ai/usage/requests", reader, &recent)
		if len(recent.Requests) == 0 {
			return fmt.Errorf("the probe is not counted yet")
		}
		cost = recent.Requests[0].Neurons
		return nil
	})

	keysURL := edgeURL + "/ai/usage/keys/"
	policy := fmt.Sprintf(`{"daily_neurons":%.6f,"webhook":{"url":%q,"secret":%q}}`, 4.5*cost, recv.URL+"/alerts", secret)
	if status, b := put(t, reader, keysURL+"app", policy); status != 403 {
		t.Fatalf("a billing:read token set a policy: %d %s", status, b)
	}
	for _, badPolicy := range []string{`{"daily_neurons":-1}`, `{"budget":5}`, `{"webhook":{"url":"http://x","secret":"0123456789abcdef"}}`} {
		if status, b := put(t, admin, keysURL+"app", badPolicy); status != 400 {
			t.Fatalf("policy %s: %d %s, want 400", badPolicy, status, b)
		}
	}
	if status, b := put(t, admin, keysURL+"app", policy); status != 200 {
		t.Fatalf("setting app's policy: %d %s", status, b)
	}

	served := 0
	for ; served < 10; served++ {
		status, b := run(app)
		if status == 200 {
			continue
		}
		var env struct {
			Errors []struct {
				Code    int    `json:"code"`
				Message string `json:"message"`
			} `json:"errors"`
		}
		if status != 429 || json.Unmarshal(b, &env) != nil || len(env.Errors) == 0 || env.Errors[0].Code != 3036 ||
			!strings.Contains(env.Errors[0].Message, "app") {
			t.Fatalf("app's request %d: %d %s, want 429 / 3036 naming the key", served, status, b)
		}
		break
	}
	if served != 5 {
		t.Errorf("app served %d requests of %.6f neurons under a budget of 4.5 of them, want 5", served, cost)
	}
	if status, b := run(ci); status != 200 {
		t.Fatalf("ci after app's budget ran out: %d %s", status, b)
	}

	testkit.Poll(t, 60*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		if len(alerts) < 3 {
			return fmt.Errorf("%d of 3 alerts delivered", len(alerts))
		}
		return nil
	})
	time.Sleep(time.Second) // a duplicate would arrive by now
	day := time.Now().UTC().Format(time.DateOnly)
	mu.Lock()
	for _, th := range []string{"50", "80", "100"} {
		if id := "alert-app-" + day + "-" + th; alerts[id] != 1 {
			t.Errorf("alert %s delivered %d times", id, alerts[id])
		}
	}
	if len(alerts) != 3 || bad != 0 || eighty["key"] != "app" || eighty["period"] != "day" {
		t.Errorf("alerts %v, %d bad, the 80%% one %v", alerts, bad, eighty)
	}
	mu.Unlock()

	var keys struct {
		Keys []struct {
			Key string `json:"key"`
			Day struct {
				Neurons float64  `json:"neurons"`
				Budget  *float64 `json:"budget"`
				Alert   int      `json:"alert"`
			} `json:"day"`
		} `json:"keys"`
		Alerts []struct {
			Key       string `json:"key"`
			Threshold int    `json:"threshold"`
		} `json:"alerts"`
	}
	if status := getUsage(t, edgeURL, "/ai/usage/keys", reader, &keys); status != 200 {
		t.Fatalf("GET keys: %d", status)
	}
	if len(keys.Keys) != 1 || keys.Keys[0].Key != "app" || keys.Keys[0].Day.Alert != 100 || keys.Keys[0].Day.Budget == nil ||
		keys.Keys[0].Day.Neurons < *keys.Keys[0].Day.Budget || len(keys.Alerts) != 3 || keys.Alerts[0].Threshold != 100 {
		t.Errorf("keys %+v", keys)
	}
	t.Logf("one request %.6f neurons; app spent %.6f of %.6f; alerts %v", cost, keys.Keys[0].Day.Neurons, 4.5*cost, alerts)
}

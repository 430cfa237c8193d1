package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bulkhead-ai/bulkhead/models/refdatatest"
	"github.com/bulkhead-ai/bulkhead/models/testkit"
)

// TestSharedStoresHoldUnderFloods: on dev with its defaults and ten models
// (or deploy/local's cluster in BULKHEAD_FLOOD_CLUSTER, started with ten),
// tenant A floods async batches on one model and tenant B on all ten, each
// until refused; a third tenant's synchronous, async and chat requests all
// succeed meanwhile. A's and B's refusals are their own bounds (429
// tenant_queue_full 3051, async_results_full 3052), never a full shared
// store (503) and never a refusal of the third tenant: one tenant cannot
// fill the jobs stream through many models, nor the results bucket with
// async results (issue 22, defects 2 and 3).
func TestSharedStoresHoldUnderFloods(t *testing.T) {
	if testing.Short() {
		t.Skip("floods dev for a while")
	}
	var base string
	var token func(tenant string) string
	if os.Getenv("BULKHEAD_FLOOD_CLUSTER") != "" {
		// deploy/local's cluster (make cluster ARGS="--also-model ..."),
		// serving the models it lists.
		target := localTarget(t)
		base, token = target.url, target.token
	} else {
		model := refdatatest.Path(t, "models/stories260K.gguf")
		var args []string
		for i := range 10 {
			args = append(args, "--model", fmt.Sprintf("@cf/test/m%d=%s", i, model))
		}
		d := startDev(t, args...)
		base, token = "http://"+d.addr, func(tenant string) string { return d.token(t, tenant) }
	}
	models := servedModels(t, base, token("lister"))
	if len(models) < 10 {
		t.Fatalf("%d models served, want 10 or more", len(models))
	}
	batch := `{"requests":[` + strings.TrimSuffix(strings.Repeat(`{"prompt":"Once upon a time","raw":true,"max_tokens":2},`, 32), ",") + `]}`

	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var refusedA, refusedB atomic.Int32
	flood := func(tenant string, targets []string, refused *atomic.Int32) {
		tok := token(tenant)
		for i := 0; ctx.Err() == nil; i++ {
			status, body, err := postCtx(ctx, tok, base+"/ai/run/"+targets[i%len(targets)]+"?queueRequest=true", batch)
			switch {
			case err != nil:
				return // the test is over
			case status == 200:
			case status == 429 && (strings.Contains(string(body), "3051") || strings.Contains(string(body), "3052") ||
				strings.Contains(string(body), "3038")): // deploy/local's edges bound concurrency too
				refused.Add(1)
				time.Sleep(50 * time.Millisecond)
			default:
				t.Errorf("%s: %d %s", tenant, status, body)
				return
			}
		}
	}
	wg.Go(func() { flood("flood-a", models[:1], &refusedA) })
	wg.Go(func() { flood("flood-b", models, &refusedB) })
	testkit.Poll(t, 2*time.Minute, testkit.Cond("both floods to reach their bounds", func() bool {
		return refusedA.Load() > 0 && refusedB.Load() > 0
	}))

	c := token("tenant-c")
	for i := range 3 {
		m := models[i*4%len(models)]
		if status, body := post(t, c, base+"/ai/run/"+m, `{"prompt":"Once upon a time","raw":true,"max_tokens":4}`); status != 200 {
			t.Fatalf("C's synchronous request %d: %d %s", i, status, body)
		}
		if status, body := post(t, c, base+"/v1/chat/completions", `{"model":"`+m+`","messages":[{"role":"user","content":"Hi"}],"max_tokens":4}`); status != 200 {
			t.Fatalf("C's chat request %d: %d %s", i, status, body)
		}
		status, body := post(t, c, base+"/ai/run/"+m+"?queueRequest=true", `{"requests":[{"prompt":"Lily","raw":true,"max_tokens":4}]}`)
		var queued struct {
			Result struct {
				RequestID string `json:"request_id"`
			} `json:"result"`
		}
		if status != 200 || json.Unmarshal(body, &queued) != nil {
			t.Fatalf("C's async batch %d: %d %s", i, status, body)
		}
		testkit.Poll(t, 2*time.Minute, testkit.Cond("C's async batch to finish", func() bool {
			_, b := post(t, c, base+"/ai/run/"+m, `{"request_id":"`+queued.Result.RequestID+`"}`)
			return strings.Contains(string(b), `"status":"done"`)
		}))
	}
	stop()
	wg.Wait()
	t.Logf("A refused %d times, B %d times", refusedA.Load(), refusedB.Load())
}

// servedModels lists the models base's /v1/models gives tok.
func servedModels(t *testing.T, base, tok string) []string {
	t.Helper()
	req, err := http.NewRequest("GET", base+"/v1/models", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, m := range list.Data {
		names = append(names, m.ID)
	}
	slices.Sort(names)
	return names
}

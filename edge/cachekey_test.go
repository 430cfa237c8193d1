package edge

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/bulkhead-ai/bulkhead/models/testkit"
	"github.com/bulkhead-ai/bulkhead/queue"
)

// TestPromptCacheKeyRoutes: OpenAI's prompt_cache_key keeps a conversation
// on one worker as x-session-affinity does; without either, a job with no
// announced prefix takes the shared queue; an over-long key is refused by
// name.
func TestPromptCacheKeyRoutes(t *testing.T) {
	h := newHarness(t, harnessOpts{routed: true})
	for _, id := range []string{"w1", "w2", "w3"} {
		b, err := json.Marshal(queue.WorkerStatus{Worker: id, MaxBatch: 16, Pages: 100, FreePages: 100, PageSize: 16})
		if err != nil {
			t.Fatal(err)
		}
		if err := h.nc.Publish(queue.StatusSubject(modelStories), b); err != nil {
			t.Fatal(err)
		}
	}
	testkit.Poll(t, 5*time.Second, testkit.Cond("three workers announced", func() bool { return len(h.router.Workers(modelStories)) == 3 }))
	chat := func(extra, content string) string {
		return `{"model":"` + modelStories + `","messages":[{"role":"user","content":"` + content + `"}]` + extra + `}`
	}
	route := func(body string) string {
		t.Helper()
		if status, _, b := h.do("POST", "/v1/chat/completions", "alice", body); status != 200 {
			t.Fatalf("%d %s", status, b)
		}
		return h.lastJob().Route
	}
	if r := route(chat("", "Hi")); r != "" {
		t.Errorf("no session, no prefix: routed to %q, want the shared queue", r)
	}
	first := route(chat(`,"prompt_cache_key":"conv-1"`, "Hi"))
	if first == "" {
		t.Fatal("a prompt_cache_key was not routed")
	}
	for _, turn := range []string{"And then?", "Why?"} {
		if r := route(chat(`,"prompt_cache_key":"conv-1"`, turn)); r != first {
			t.Errorf("turn %q went to %q, the conversation is on %q", turn, r, first)
		}
	}
	if status, _, b := h.do("POST", "/v1/chat/completions", "alice", chat(`,"prompt_cache_key":"`+strings.Repeat("k", MaxSessionKey+1)+`"`, "Hi")); status != 400 || !strings.Contains(string(b), "prompt_cache_key") {
		t.Errorf("an over-long key: %d %s", status, b)
	}
}

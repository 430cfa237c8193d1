package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/bulkhead-ai/bulkhead/edge/auth"
	"github.com/bulkhead-ai/bulkhead/models/builtin"
	"github.com/bulkhead-ai/bulkhead/models/testkit"
)

// cacheUsage is the part of a response's usage these tests read; native
// answers carry it under result, OpenAI ones at the top.
type cacheUsage struct {
	PromptTokens int `json:"prompt_tokens"`
	Details      struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

// TestDevPrefixCacheDefault: through a dev node serving the built-in model,
// a tenant that repeats a prompt longer than a KV page, sending no cache
// field, is told on both APIs that the prompt's whole pages came from the
// cache. cache_prefix false, a class with prefix_cache=off, and another
// tenant sending the same prompt get no cached tokens.
func TestDevPrefixCacheDefault(t *testing.T) {
	dir := t.TempDir()
	addr := freeAddr(t)
	dev := startNode(t, "dev", "--data-dir", dir, "--listen", addr, "--threads", "1",
		"--tenant-classes", "nocache:prefix_cache=off", "--tenant-class", "carol=nocache")
	testkit.Poll(t, time.Minute, testkit.Cond("dev to serve", func() bool { return strings.Contains(dev.stdout.String(), "serving") }))
	key, err := auth.LoadOrCreateDevKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	tokens := map[string]string{}
	for _, tenant := range []string{"alice", "bob", "carol"} {
		if tokens[tenant], err = key.Mint(tenant, []string{auth.ScopeRun}, nil, time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	base := "http://" + addr
	// About 40 tokens: two whole pages before the last prompt token.
	story, _ := json.Marshal(strings.Repeat("Once upon a time there was a cat. ", 4))
	talk, _ := json.Marshal(strings.Repeat("Lily and Tom went to the park to play. ", 4))
	native := func(extra string) string {
		return `{"prompt":` + string(story) + `,"raw":true,"max_tokens":4,"temperature":0` + extra + `}`
	}
	completion := func(extra string) string {
		return `{"model":"` + builtin.Name + `","prompt":` + string(story) + `,"max_tokens":4,"temperature":0` + extra + `}`
	}
	chat := `{"model":"` + builtin.Name + `","messages":[{"role":"user","content":` + string(talk) + `}],"max_tokens":4,"temperature":0}`
	run, completions, chats := base+"/ai/run/"+builtin.Name, base+"/v1/completions", base+"/v1/chat/completions"
	steps := []struct {
		name, tenant, url, body string
		hit                     bool // the prompt's whole pages are reported cached
	}{
		{"alice first is cold", "alice", run, native(""), false},
		{"alice again hits by default", "alice", run, native(""), true},
		{"alice opted out", "alice", run, native(`,"cache_prefix":false`), false},
		{"alice completions hits by default", "alice", completions, completion(""), true},
		{"alice completions opted out", "alice", completions, completion(`,"cache_prefix":false`), false},
		{"alice chat first is cold", "alice", chats, chat, false},
		{"alice chat again hits by default", "alice", chats, chat, true},
		{"bob sends alice's prompt: cold", "bob", run, native(""), false},
		{"bob again hits his own", "bob", run, native(""), true},
		{"carol's class is off", "carol", run, native(""), false},
		{"carol's class is off again", "carol", run, native(""), false},
		{"carol's class is off whatever the body says", "carol", completions, completion(`,"cache_prefix":true`), false},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			var got struct {
				Result struct {
					Usage cacheUsage `json:"usage"`
				} `json:"result"`
				Usage cacheUsage `json:"usage"`
			}
			if status := httpJSON(t, "POST", s.url, tokens[s.tenant], s.body, &got); status != 200 {
				t.Fatalf("status %d", status)
			}
			u := got.Usage
			if strings.HasPrefix(s.url, run) {
				u = got.Result.Usage
			}
			want := 0
			if s.hit {
				want = (u.PromptTokens - 1) / pageSize * pageSize // whole pages before the last prompt token
			}
			if u.PromptTokens <= 2*pageSize || u.Details.CachedTokens != want {
				t.Errorf("%d cached of %d prompt tokens, want %d (more than %d prompt tokens)", u.Details.CachedTokens, u.PromptTokens, want, 2*pageSize)
			}
		})
	}
}

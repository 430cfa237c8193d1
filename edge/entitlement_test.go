package edge

import (
	"errors"
	"strings"
	"testing"

	"github.com/bulkhead-ai/bulkhead/edge/tenants"
	"github.com/bulkhead-ai/bulkhead/models/catalog"
	"github.com/bulkhead-ai/bulkhead/models/refdatatest"
	"github.com/bulkhead-ai/bulkhead/queue"
	"github.com/bulkhead-ai/bulkhead/queue/queuetest"
)

// TestModelEntitlements: a model whose allowed_classes names "pro" serves
// a tenant of that class and refuses one of the default class with 403
// model_requires_plan (5035) on both APIs, queuing nothing.
func TestModelEntitlements(t *testing.T) {
	classes, err := tenants.New(tenants.Config{
		Classes: []tenants.Class{{Name: "pro", Weight: 1}},
		Members: map[string]string{"alice": "pro"},
	})
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, harnessOpts{tenants: classes, properties: map[string]string{PropAllowedClasses: "pro"}})
	run := "/ai/run/" + modelStories
	if status, _, b := h.do("POST", run, "alice", `{"prompt":"hi"}`); status != 200 {
		t.Fatalf("a pro tenant: %d %s", status, b)
	}
	before := h.jobCount()
	status, _, b := h.do("POST", run, "bob", `{"prompt":"hi"}`)
	if status != 403 || !strings.Contains(string(b), `"code":5035`) || !strings.Contains(string(b), "requires a paid plan") {
		t.Errorf("a default-class tenant, native: %d %s", status, b)
	}
	chat := `{"model":"` + modelStories + `","messages":[{"role":"user","content":"hi"}]}`
	status, _, b = h.do("POST", "/v1/chat/completions", "bob", chat)
	if typ, code, msg := openAIErr(t, b); status != 403 || typ != "invalid_request_error" || code != "model_not_allowed" || !strings.Contains(msg, "paid plan") {
		t.Errorf("a default-class tenant, OpenAI: %d %s", status, b)
	}
	if h.jobCount() != before {
		t.Errorf("%d jobs queued for the refused requests", h.jobCount()-before)
	}
}

// TestEntitlementsChecked: allowed_classes naming a class nobody defined,
// or none, stops the edge at start.
func TestEntitlementsChecked(t *testing.T) {
	stories := refdatatest.Path(t, "models/stories260K.gguf")
	nc, js := queuetest.JetStream(t, queuetest.Server(t).ClientURL())
	for _, v := range []string{"gold", " , "} {
		cat, err := catalog.FromFlags([]string{modelStories + "=" + stories})
		if err != nil {
			t.Fatal(err)
		}
		m, _ := cat.Lookup(modelStories)
		m.Properties = map[string]string{PropAllowedClasses: v}
		_, err = New(nil, Config{Catalog: cat, Auth: testAuth, Quota: &fakeLimiter{}, Queue: queue.NewClient(nc, js)})
		if !errors.Is(err, ErrConfig) {
			t.Errorf("allowed_classes %q: New = %v, want ErrConfig", v, err)
		}
	}
}

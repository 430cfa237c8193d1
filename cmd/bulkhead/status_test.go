package main

import (
	"strings"
	"testing"
	"time"

	"github.com/bulkhead-ai/bulkhead/queue"
)

// TestPrintStatus: the fleet table gives each worker's prefix hit ratio,
// and the backlog table each model's tenants with their queued jobs and
// oldest wait, once per model whichever workers report it.
func TestPrintStatus(t *testing.T) {
	oldest := time.Now().Add(-3 * time.Second)
	m := queue.ModelStatus{Name: "@cf/m", KVPagesTotal: 8, PrefixHits: 3, PrefixMisses: 1,
		Backlog: []queue.TenantBacklog{{Tenant: "acme-1a2b3c4d", Jobs: 7, Oldest: oldest}}}
	nodes := []queue.Node{
		{Service: queue.FleetWorker, ID: "w1", Role: "unified", Models: []string{"@cf/m"}, Status: queue.NodeStatus{Models: []queue.ModelStatus{m}}},
		{Service: queue.FleetWorker, ID: "w2", Role: "unified", Models: []string{"@cf/m"}, Status: queue.NodeStatus{Models: []queue.ModelStatus{m}}},
	}
	var b strings.Builder
	if err := printFleet(&b, nodes); err != nil {
		t.Fatal(err)
	}
	if err := printBacklog(&b, nodes); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"PREFIX HITS", "75% of 4", "MODEL", "acme-1a2b3c4d", " 7 ", "3s"} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "acme-1a2b3c4d"); n != 1 {
		t.Errorf("the tenant's backlog is listed %d times, want once:\n%s", n, out)
	}
	b.Reset()
	nodes[0].Status.Models[0].Backlog, nodes[1].Status.Models[0].Backlog = nil, nil
	if err := printBacklog(&b, nodes); err != nil || b.Len() != 0 {
		t.Errorf("no backlog printed %q (%v), want nothing", b.String(), err)
	}
}

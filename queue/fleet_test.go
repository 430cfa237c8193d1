package queue

import (
	"context"
	"testing"
	"time"
)

func TestFleet(t *testing.T) {
	env := startEnv(t, StreamConfig{})
	for _, cfg := range []NodeConfig{
		{Service: FleetWorker, Version: "0.1.0", Role: "prefill", Models: []string{"@cf/a", "@cf/b"},
			Status: func() NodeStatus {
				return NodeStatus{JobsDone: 3, Models: []ModelStatus{{Name: "@cf/a", KVPagesUsed: 2, KVPagesTotal: 8, Running: 1, Waiting: 4}}}
			}},
		{Service: FleetWorker, Version: "0.1.0", Role: "decode", Models: []string{"@cf/a"}},
		{Service: FleetEdge, Version: "0.1.0", Models: []string{"@cf/a"}},
	} {
		svc, err := RegisterNode(env.nc, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = svc.Stop() })
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	nodes, err := ListFleet(ctx, env.nc, 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes) != 3 {
		t.Fatalf("listed %d nodes: %+v", len(nodes), nodes)
	}
	for i, want := range []struct{ service, role string }{{FleetWorker, "decode"}, {FleetWorker, "prefill"}, {FleetEdge, ""}} {
		if nodes[i].Service != want.service || nodes[i].Role != want.role {
			t.Errorf("node %d: %s %q, want %s %q", i, nodes[i].Service, nodes[i].Role, want.service, want.role)
		}
		if nodes[i].Started.IsZero() || nodes[i].Version != "0.1.0" {
			t.Errorf("node %d: %+v", i, nodes[i])
		}
	}
	p := nodes[1]
	if len(p.Models) != 2 || p.Status.JobsDone != 3 || len(p.Status.Models) != 1 || p.Status.Models[0].Waiting != 4 {
		t.Errorf("prefill node %+v", p)
	}
}

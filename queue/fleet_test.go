package queue

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
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

// TestFleetRolesAnswerAsThemselves: on an authenticated bus, each role
// registers under its own service name only, and a node of one role cannot
// add itself to the fleet as another: billing answering the generic
// $SRV.STATS as a worker, or subscribing to the workers' subject, is not
// listed.
func TestFleetRolesAnswerAsThemselves(t *testing.T) {
	env := startAuthEnv(t, StreamConfig{})
	for role, svc := range map[string]string{RoleWorker: FleetWorker, RoleEdge: FleetEdge, RoleBilling: FleetBilling} {
		nc, _ := env.conn(t, role)
		s, err := RegisterNode(nc, NodeConfig{Service: svc, Version: "0.1.0", Role: role})
		if err != nil {
			t.Fatalf("%s registering as %s: %v", role, svc, err)
		}
		t.Cleanup(func() { _ = s.Stop() })
	}
	// Billing poses as a decode worker: on the generic subject (which it
	// may hear) and on the workers' own (which it may not).
	bnc, _ := env.conn(t, RoleBilling)
	fake, _ := json.Marshal(micro.Stats{ServiceIdentity: micro.ServiceIdentity{Name: FleetWorker, ID: "fake", Version: "0.1.0",
		Metadata: map[string]string{"role": "decode"}}})
	answer := func(m *nats.Msg) { _ = m.Respond(fake) }
	if _, err := bnc.Subscribe(micro.APIPrefix+".STATS", answer); err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 4)
	bnc.SetErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { errs <- err })
	if _, err := bnc.Subscribe(micro.APIPrefix+".STATS."+FleetWorker, answer); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errs:
		if !errors.Is(err, nats.ErrPermissionViolation) {
			t.Fatalf("billing subscribing to the workers' fleet subject: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("billing may subscribe to the workers' fleet subject")
	}
	onc, _ := env.conn(t, RoleOperator)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	nodes, err := ListFleet(ctx, onc, 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]string{}
	for _, n := range nodes {
		if n.ID == "fake" {
			t.Errorf("the fleet lists billing's fake worker: %+v", n)
		}
		seen[n.Service] = n.Role
	}
	if len(nodes) != 3 || seen[FleetWorker] != RoleWorker || seen[FleetEdge] != RoleEdge || seen[FleetBilling] != RoleBilling {
		t.Errorf("fleet %+v, want one node of each role", nodes)
	}
}

package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
)

// Fleet service names: every node registers as a NATS micro service under
// one of these, so `nats micro ls` and `bulkhead status` see the fleet.
const (
	FleetWorker  = "bulkhead-worker"
	FleetEdge    = "bulkhead-edge"
	FleetBilling = "bulkhead-billing"
)

// fleetPrefix starts the subject of each node's status endpoint; the node's
// service id follows, so every instance answers on its own subject.
const fleetPrefix = "bulkhead.fleet."

// ErrFleet reports a node that could not register, or a fleet listing that
// could not be sent.
var ErrFleet = errors.New("queue: fleet")

// ModelStatus is one served model's live figures on a worker.
type ModelStatus struct {
	Name         string `json:"name"`
	KVPagesUsed  int    `json:"kv_pages_used"`
	KVPagesTotal int    `json:"kv_pages_total"`
	Running      int    `json:"running"`
	Waiting      int    `json:"waiting"`
	// PrefixHits and PrefixMisses count the prefix-cache look-ups that
	// attached a cached page or none: the worker's prefix hit ratio.
	PrefixHits   uint64 `json:"prefix_hits"`
	PrefixMisses uint64 `json:"prefix_misses"`
	// Backlog is the model's tenants with the most jobs in the jobs stream
	// (Backlog), as this worker read it.
	Backlog []TenantBacklog `json:"backlog,omitempty"`
}

// NodeStatus is what a node's status endpoint reports.
type NodeStatus struct {
	Models   []ModelStatus `json:"models,omitempty"`
	JobsDone uint64        `json:"jobs_done"`
}

// NodeConfig describes a node registering with the fleet.
type NodeConfig struct {
	Service string   // FleetWorker, FleetEdge or FleetBilling
	Version string   // semantic version, e.g. 0.1.0
	Role    string   // worker role (unified, prefill, decode); empty otherwise
	Models  []string // catalog names served
	// Status returns the node's live figures for each status request; nil
	// reports none.
	Status func() NodeStatus
}

// RegisterNode registers the node as a NATS micro service: its name,
// version, role and models in the service metadata, and a status endpoint
// (bulkhead.fleet.<id>.status) whose figures also appear in the service's
// $SRV.STATS answer. The caller stops the service before closing nc.
func RegisterNode(nc *nats.Conn, cfg NodeConfig) (micro.Service, error) {
	status := cfg.Status
	if status == nil {
		status = func() NodeStatus { return NodeStatus{} }
	}
	meta := map[string]string{"role": cfg.Role, "models": strings.Join(cfg.Models, ",")}
	svc, err := micro.AddService(nc, micro.Config{
		Name:        cfg.Service,
		Version:     cfg.Version,
		Description: "Bulkhead " + strings.TrimPrefix(cfg.Service, "bulkhead-"),
		Metadata:    meta,
		StatsHandler: func(*micro.Endpoint) any {
			return status()
		},
	})
	if err != nil {
		return nil, fmt.Errorf("%w: registering %s: %v", ErrFleet, cfg.Service, err)
	}
	err = svc.AddEndpoint("status", micro.HandlerFunc(func(req micro.Request) {
		_ = req.RespondJSON(status())
	}), micro.WithEndpointSubject(fleetPrefix+svc.Info().ID+".status"), micro.WithEndpointQueueGroupDisabled())
	if err != nil {
		_ = svc.Stop()
		return nil, fmt.Errorf("%w: status endpoint of %s: %v", ErrFleet, cfg.Service, err)
	}
	return svc, nil
}

// Node is one member of the fleet as ListFleet found it.
type Node struct {
	Service string     `json:"service"`
	ID      string     `json:"id"`
	Version string     `json:"version"`
	Role    string     `json:"role,omitempty"`
	Models  []string   `json:"models,omitempty"`
	Started time.Time  `json:"started"`
	Status  NodeStatus `json:"status"`
}

// ListFleet asks every Bulkhead node on nc for its stats and collects the
// answers until ctx ends or quiet passes without one. It asks each service
// on its own subject ($SRV.STATS.<service>), which only that service's role
// may subscribe to (RolePermissions), into an inbox of its own, and keeps
// only answers that name that service: a node of another role (a billing
// credential, say) cannot pose as a worker. Nodes come sorted: workers (by
// role, then id), edges, billing.
func ListFleet(ctx context.Context, nc *nats.Conn, quiet time.Duration) ([]Node, error) {
	answers := make(chan *nats.Msg, 256)
	asked := map[string]string{} // inbox -> service
	for _, svc := range []string{FleetWorker, FleetEdge, FleetBilling} {
		inbox := nc.NewInbox()
		sub, err := nc.ChanSubscribe(inbox, answers)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrFleet, err)
		}
		defer sub.Unsubscribe()
		asked[inbox] = svc
		if err := nc.PublishRequest(micro.APIPrefix+".STATS."+svc, inbox, nil); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrFleet, err)
		}
	}
	var nodes []Node
	for {
		var msg *nats.Msg
		t := time.NewTimer(quiet)
		select {
		case msg = <-answers:
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
		if msg == nil {
			break
		}
		var st micro.Stats
		if json.Unmarshal(msg.Data, &st) != nil || st.Name != asked[msg.Subject] {
			continue // an answer that does not name the service asked
		}
		n := Node{Service: st.Name, ID: st.ID, Version: st.Version, Role: st.Metadata["role"], Started: st.Started}
		if m := st.Metadata["models"]; m != "" {
			n.Models = strings.Split(m, ",")
		}
		for _, ep := range st.Endpoints {
			if ep.Name == "status" && len(ep.Data) > 0 {
				_ = json.Unmarshal(ep.Data, &n.Status)
			}
		}
		nodes = append(nodes, n)
	}
	sort.Slice(nodes, func(i, j int) bool {
		a, b := nodes[i], nodes[j]
		if a.Service != b.Service {
			return a.Service > b.Service // workers, then edges, then billing
		}
		if a.Role != b.Role {
			return a.Role < b.Role
		}
		return a.ID < b.ID
	})
	return nodes, nil
}

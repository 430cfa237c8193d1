package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/bulkhead-ai/bulkhead/queue"
	"github.com/bulkhead-ai/bulkhead/workers/engine"
	"github.com/bulkhead-ai/bulkhead/workers/worker"
)

// runFleetStatus lists the fleet: every worker, edge and billing node registered
// on NATS, with each worker's models, KV pool use, running and waiting
// sequences, version and uptime.
func runFleetStatus(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("status", stderr)
	natsURL := fs.String("nats", "nats://127.0.0.1:4222", "NATS server URL")
	asJSON := fs.Bool("json", false, "print the fleet as JSON")
	wait := fs.Duration("wait", 500*time.Millisecond, "how long to wait for more answers after the last one")
	var nf natsFlags // on an authenticated bus, the operator's credentials (operator.nk)
	nf.registerConn(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	opts, err := nf.options()
	if err != nil {
		return err
	}
	nc, err := nats.Connect(*natsURL, append(opts, nats.Name("bulkhead-status"), nats.Timeout(5*time.Second))...)
	if err != nil {
		return fmt.Errorf("connecting to NATS at %s: %w", *natsURL, err)
	}
	defer nc.Close()
	lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	nodes, err := queue.ListFleet(lctx, nc, *wait)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if nodes == nil {
			nodes = []queue.Node{}
		}
		return enc.Encode(nodes)
	}
	if err := printFleet(stdout, nodes); err != nil {
		return err
	}
	if err := printBacklog(stdout, nodes); err != nil {
		return err
	}
	if len(nodes) == 0 {
		fmt.Fprintln(stderr, "no Bulkhead node answered on", *natsURL)
	}
	return nil
}

// printFleet writes the fleet's table: a line a node.
func printFleet(w io.Writer, nodes []queue.Node) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tID\tROLE\tMODELS\tKV USED/TOTAL\tRUNNING\tWAITING\tPREFIX HITS\tJOBS\tVERSION\tUPTIME")
	now := time.Now()
	for _, n := range nodes {
		var used, total, running, waiting int
		var hits, misses uint64
		for _, m := range n.Status.Models {
			used += m.KVPagesUsed
			total += m.KVPagesTotal
			running += m.Running
			waiting += m.Waiting
			hits += m.PrefixHits
			misses += m.PrefixMisses
		}
		kv, run, wait, hit, jobs := "-", "-", "-", "-", "-"
		if n.Service == queue.FleetWorker {
			kv = fmt.Sprintf("%d/%d", used, total)
			run, wait, jobs = fmt.Sprint(running), fmt.Sprint(waiting), fmt.Sprint(n.Status.JobsDone)
			if hits+misses > 0 {
				hit = fmt.Sprintf("%.0f%% of %d", 100*float64(hits)/float64(hits+misses), hits+misses)
			}
		}
		role := n.Role
		if role == "" {
			role = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", strings.TrimPrefix(n.Service, "bulkhead-"), n.ID, role,
			strings.Join(n.Models, ","), kv, run, wait, hit, jobs, n.Version, now.Sub(n.Started).Round(time.Second))
	}
	return tw.Flush()
}

// printBacklog writes, when any worker reported one, each model's tenants
// with the most jobs in the jobs stream and how long their oldest job has
// waited (the first worker's report of each model).
func printBacklog(w io.Writer, nodes []queue.Node) error {
	seen := map[string]bool{}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	now := time.Now()
	for _, n := range nodes {
		for _, m := range n.Status.Models {
			if seen[m.Name] || len(m.Backlog) == 0 {
				continue
			}
			if len(seen) == 0 {
				fmt.Fprintln(tw, "\nMODEL\tTENANT\tJOBS QUEUED OR RUNNING\tOLDEST")
			}
			seen[m.Name] = true
			for _, b := range m.Backlog {
				fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", m.Name, b.Tenant, b.Jobs, age(now.Sub(b.Oldest)))
			}
		}
	}
	return tw.Flush()
}

// registerWorker registers a worker with the fleet: its role and models,
// and live figures from its engines and jobs, and for the roles that take
// jobs from the jobs stream each model's tenants with the most jobs there.
// stop unregisters it.
func registerWorker(log *slog.Logger, nc *nats.Conn, js jetstream.JetStream, role string, engines map[string]*engine.Engine, jobsDone func() uint64) (stop func()) {
	names := slices.Sorted(maps.Keys(engines))
	svc, err := queue.RegisterNode(nc, queue.NodeConfig{
		Service: queue.FleetWorker, Version: version, Role: role, Models: names,
		Status: func() queue.NodeStatus {
			st := queue.NodeStatus{JobsDone: jobsDone()}
			for _, n := range names {
				e := engines[n]
				es, ps := e.Stats(), e.KV().PrefixStats()
				st.Models = append(st.Models, queue.ModelStatus{Name: n, KVPagesUsed: e.KV().UsedPages(),
					KVPagesTotal: e.KV().TotalPages(), Running: es.Running, Waiting: es.Waiting,
					PrefixHits: ps.Hits, PrefixMisses: ps.Misses, Backlog: backlog(js, role, n)})
			}
			return st
		},
	})
	return stopService(log, svc, err)
}

// statusBacklog is how many tenants a worker lists per model in its status.
const statusBacklog = 10

// backlog is model's tenants with the most jobs in the jobs stream, read
// within a second; none on the decode role (it takes no jobs from there)
// or when the stream does not answer.
func backlog(js jetstream.JetStream, role, model string) []queue.TenantBacklog {
	if role == string(worker.RoleDecode) {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	b, err := queue.Backlog(ctx, js, model, statusBacklog)
	if err != nil {
		return nil
	}
	return b
}

// registerEdge registers an edge with the fleet.
func registerEdge(log *slog.Logger, nc *nats.Conn, models []string) (stop func()) {
	svc, err := queue.RegisterNode(nc, queue.NodeConfig{Service: queue.FleetEdge, Version: version, Models: models})
	return stopService(log, svc, err)
}

// stopService logs a failed registration (the node serves anyway: the fleet
// listing is for operators) and returns the function that unregisters.
func stopService(log *slog.Logger, svc micro.Service, err error) func() {
	if err != nil {
		log.Warn("fleet registration failed; `bulkhead status` will not list this node", "err", err)
		return func() {}
	}
	return func() { _ = svc.Stop() }
}

// age is how long a backlog's oldest job has waited, for people: whole
// seconds from a second on, milliseconds below.
func age(d time.Duration) time.Duration {
	if d >= time.Second {
		return d.Round(time.Second)
	}
	return d.Round(time.Millisecond)
}

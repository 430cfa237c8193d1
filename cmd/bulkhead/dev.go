package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/bulkhead-ai/bulkhead/edge"
	"github.com/bulkhead-ai/bulkhead/edge/auth"
	"github.com/bulkhead-ai/bulkhead/models/builtin"
	"github.com/bulkhead-ai/bulkhead/models/catalog"
	"github.com/bulkhead-ai/bulkhead/queue"
	"github.com/bulkhead-ai/bulkhead/workers/encoder"
	"github.com/bulkhead-ai/bulkhead/workers/engine"
	"github.com/bulkhead-ai/bulkhead/workers/worker"
)

// devFlags are `bulkhead dev`'s flags.
type devFlags struct {
	dataDir  string
	natsPort int
	disagg   bool
	nPrefill int
	nDecode  int
	nUnified int
	catalog  catalogFlags
	edge     edgeFlags
	engine   engineFlags
	obs      obsFlags
}

func runDev(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var f devFlags
	fs := newFlags("dev", stderr)
	fs.StringVar(&f.dataDir, "data-dir", defaultDataDir(), "where dev keeps its JetStream store, signing key and built-in model")
	fs.IntVar(&f.natsPort, "nats-port", -1, "port of the embedded NATS server (-1: any free port)")
	fs.BoolVar(&f.disagg, "disaggregated", false, "run prefill and decode workers apart, each with its own engines and KV pools, handing each request's KV over NATS")
	fs.IntVar(&f.nPrefill, "prefill-workers", 1, "prefill workers with --disaggregated")
	fs.IntVar(&f.nDecode, "decode-workers", 1, "decode workers with --disaggregated")
	fs.IntVar(&f.nUnified, "workers", 1, "unified workers (without --disaggregated), each with its own engines and KV pools, sharing the model's per-tenant queues")
	f.catalog.register(fs)
	f.edge.register(fs, true)
	f.engine.register(fs)
	f.obs.register(fs, false, true)
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := f.engine.validatePool(); err != nil {
		return err
	}
	roles, err := f.roles()
	if err != nil {
		return err
	}
	return f.run(ctx, stdout, stderr, roles)
}

// roles are the workers dev runs: --workers unified ones, or
// --prefill-workers prefill and --decode-workers decode workers with
// --disaggregated.
func (f *devFlags) roles() ([]worker.Role, error) {
	if !f.disagg {
		if f.nUnified < 1 || f.nUnified > maxDevWorkers {
			return nil, fmt.Errorf("%w: --workers %d must lie in [1, %d]", errUsage, f.nUnified, maxDevWorkers)
		}
		return slices.Repeat([]worker.Role{worker.RoleUnified}, f.nUnified), nil
	}
	if f.nPrefill < 1 || f.nDecode < 1 {
		return nil, fmt.Errorf("%w: --prefill-workers %d and --decode-workers %d must be at least 1", errUsage, f.nPrefill, f.nDecode)
	}
	var roles []worker.Role
	for range f.nPrefill {
		roles = append(roles, worker.RolePrefill)
	}
	for range f.nDecode {
		roles = append(roles, worker.RoleDecode)
	}
	return roles, nil
}

// maxDevWorkers bounds --workers: each holds its own engines and KV pools.
const maxDevWorkers = 64

// run starts every node in this process and serves until ctx ends: the
// engines first, then NATS, Redis, the workers, billing and last the edge,
// which stops first.
func (f *devFlags) run(ctx context.Context, stdout, stderr io.Writer, roles []worker.Role) error {
	log, tel, err := f.obs.startNode(ctx, stderr, "bulkhead-dev", "dev")
	if err != nil {
		return err
	}
	// One tracer provider and one registry for every node of the process:
	// /metrics on the edge's listener shows the edge and all workers.
	defer tel.shutdown(log)
	wm, err := worker.NewMetrics(tel.reg)
	if err != nil {
		return err
	}
	f.engine.onStep = wm.OnStep
	if err := os.MkdirAll(f.dataDir, 0o700); err != nil {
		return err
	}
	cat, err := f.loadCatalog(log)
	if err != nil {
		return err
	}
	// Engines for every model and every worker (each its own KV pools),
	// before anything else starts: a KV pool too small for the context
	// refuses start-up here, or (--clamp-context) clamps the window in cat,
	// which the edge below advertises and admits by.
	// The pools sized from memory split it among all workers.
	budget := f.engine.budget(log, cat, len(roles))
	defer f.engine.share(log, len(roles)*len(cat.Models()))()
	engineSets := make([]map[string]*engine.Engine, len(roles))
	encoderSets := make([]map[string]*encoder.Server, len(roles))
	for i, role := range roles {
		engines, closeEngines, err := f.engine.engines(log, cat, budget)
		if err != nil {
			return err
		}
		defer closeEngines()
		engineSets[i] = engines
		if role != worker.RoleUnified {
			continue
		}
		encoders, closeEncoders, err := f.engine.encoders(log, cat)
		if err != nil {
			return err
		}
		defer closeEncoders()
		encoderSets[i] = encoders
	}
	if generators(cat) < len(cat.Models()) && !slices.Contains(roles, worker.RoleUnified) {
		return fmt.Errorf("%w: encoder models (text-embeddings, text-classification) need a unified worker; drop --disaggregated", errUsage)
	}
	ns, natsAuth, stopNATS, err := f.startNATS(ctx, log)
	if err != nil {
		return err
	}
	defer stopNATS()
	d := devNode{log: log, tel: tel, url: ns.ClientURL(), auth: natsAuth}
	return d.serve(ctx, f, devWorkers{roles: roles, engines: engineSets, encoders: encoderSets, metrics: wm}, cat, stdout)
}

// loadCatalog is the catalog the flags give, else the built-in model
// written into the data directory.
func (f *devFlags) loadCatalog(log *slog.Logger) (*catalog.Catalog, error) {
	cat, err := f.catalog.load()
	if err != nil {
		return nil, err
	}
	if cat == nil {
		path, err := builtin.WriteTo(f.dataDir)
		if err != nil {
			return nil, err
		}
		if cat, err = catalog.FromFlags([]string{builtin.Name + "=" + path}); err != nil {
			return nil, err
		}
		log.Info("no --model given: serving the built-in TinyStories model (stories260K, MIT licence)", "model", builtin.Name)
	}
	if err := f.engine.applyContext(cat); err != nil {
		return nil, err
	}
	return cat, nil
}

// startNATS runs NATS with JetStream in process. Every role has its own
// credentials and permissions, even in one process; nodes joining from
// elsewhere use the files in nats-creds/.
func (f *devFlags) startNATS(ctx context.Context, log *slog.Logger) (*queue.Server, *queue.Auth, func(), error) {
	credsDir := filepath.Join(f.dataDir, "nats-creds")
	natsAuth, err := queue.LoadOrCreateAuth(credsDir)
	if err != nil {
		return nil, nil, nil, err
	}
	ns, stop, err := startNATS(ctx, log, queue.ServerConfig{Port: f.natsPort, StoreDir: filepath.Join(f.dataDir, "jetstream"), Auth: natsAuth},
		natsAuth.Credentials(queue.RoleSetup), queue.StreamConfig{})
	if err != nil {
		return nil, nil, nil, err
	}
	log.Info("NATS requires role credentials", "url", ns.ClientURL(), "creds_dir", credsDir)
	return ns, natsAuth, stop, nil
}

// devNode is dev's process-wide wiring: its logger and telemetry, and the
// embedded NATS every node connects to with its role's credentials.
type devNode struct {
	log  *slog.Logger
	tel  *telemetry
	url  string
	auth *queue.Auth
}

// devWorkers are dev's workers: a role and an engine set each.
type devWorkers struct {
	roles    []worker.Role
	engines  []map[string]*engine.Engine
	encoders []map[string]*encoder.Server // nil for the roles that do not run them
	metrics  *worker.Metrics
}

// connect opens a connection with role's credentials.
func (d devNode) connect(ctx context.Context, role, name string) (*nats.Conn, jetstream.JetStream, error) {
	return connect(ctx, d.log, d.url, name, queue.StreamConfig{}, d.auth.Credentials(role).Options()...)
}

// serve starts Redis, the workers, billing and the edge, and serves until
// ctx ends.
func (d devNode) serve(ctx context.Context, f *devFlags, ws devWorkers, cat *catalog.Catalog, stdout io.Writer) error {
	n := edgeNode{log: d.log, tel: d.tel, h: edge.NewHealth(), cat: cat, logContent: f.obs.logContent,
		ready: func(addr string) { d.banner(stdout, cat, addr, f.dataDir) }}
	rdb, closeRedis, err := devRedis(f.edge.redisURL)
	if err != nil {
		return err
	}
	defer closeRedis()
	n.rdb = rdb
	n.h.Add("redis", redisCheck(rdb))
	dev, err := auth.LoadOrCreateDevKey(f.dataDir)
	if err != nil {
		return err
	}
	if n.verifier, err = f.edge.verifier(d.log, dev); err != nil {
		return err
	}
	// Every connection sets the streams up before any worker creates its
	// consumers: nats-server races a stream update against a consumer
	// creation on the same stream. Each worker has its own connection.
	conns, closeConns, err := d.connectWorkers(ctx, ws.roles)
	if err != nil {
		return err
	}
	defer closeConns()
	if n.nc, n.js, err = d.connect(ctx, queue.RoleEdge, "bulkhead-dev-edge"); err != nil {
		return err
	}
	defer n.nc.Close()
	n.h.Add("nats", natsCheck(n.nc))
	for i, engines := range ws.engines {
		n.h.Add(fmt.Sprintf("engines_%d", i), func(context.Context) error { return worker.EnginesReady(engines) })
	}
	defer d.startWorkers(ws, conns, &f.engine)()
	// Billing: usage events into the ledger the usage API and the budget read.
	bnc, bjs, err := d.connect(ctx, queue.RoleBilling, "bulkhead-dev-billing")
	if err != nil {
		return err
	}
	defer bnc.Close()
	var stopBilling func()
	if n.ledger, stopBilling, err = startBilling(d.log, d.tel.tp, bjs, rdb); err != nil {
		return err
	}
	defer stopBilling()
	// Workers joining this NATS from elsewhere may hold less than dev's own:
	// the edge follows the capacity bucket.
	return f.edge.serve(ctx, n)
}

// workerConn is one worker's connection.
type workerConn struct {
	nc *nats.Conn
	js jetstream.JetStream
}

// connectWorkers opens one connection per worker; closeAll closes them.
func (d devNode) connectWorkers(ctx context.Context, roles []worker.Role) (conns []workerConn, closeAll func(), err error) {
	closeAll = func() {
		for _, c := range conns {
			c.nc.Close()
		}
	}
	for i, role := range roles {
		nc, js, err := d.connect(ctx, queue.RoleWorker, fmt.Sprintf("bulkhead-dev-%s-worker-%d", role, i))
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		conns = append(conns, workerConn{nc, js})
	}
	return conns, closeAll, nil
}

// startWorkers starts a worker on each connection with its role and
// engines; stop stops them, the last started first, each after draining.
func (d devNode) startWorkers(ws devWorkers, conns []workerConn, ef *engineFlags) (stop func()) {
	stops := make([]func() error, len(conns))
	for i, c := range conns {
		n := workerNode{log: d.log.With("worker", i), nc: c.nc, js: c.js, engines: ws.engines[i], encoders: ws.encoders[i], role: ws.roles[i],
			concurrency: ef.concurrency, loraMemory: ef.loraMemory, loraDir: ef.loraDir,
			obs: workerObs{tp: d.tel.tp, metrics: ws.metrics, name: fmt.Sprintf("dev-%d", i)}}
		stops[i] = background(n.run)
	}
	return func() {
		for _, s := range slices.Backward(stops) {
			_ = s()
		}
	}
}

// banner tells the developer where dev serves and how to call it.
func (d devNode) banner(w io.Writer, cat *catalog.Catalog, addr, dataDir string) {
	first := cat.Models()[0].Name
	fmt.Fprintf(w, `Bulkhead dev is serving %d model(s) at http://%s (NATS at %s).
Mint a token and call it:
  TOKEN=$(bulkhead token --tenant acme --key-dir %q)
  curl -s http://%s/ai/run/%s -H "Authorization: Bearer $TOKEN" -d '{"prompt":"Once upon a time","max_tokens":32}'
`, len(cat.Models()), addr, d.url, dataDir, addr, first)
}

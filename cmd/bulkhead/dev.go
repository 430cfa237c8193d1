package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/alicebob/miniredis/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/bulkhead-ai/bulkhead/edge"
	"github.com/bulkhead-ai/bulkhead/edge/auth"
	"github.com/bulkhead-ai/bulkhead/models/builtin"
	"github.com/bulkhead-ai/bulkhead/models/catalog"
	"github.com/bulkhead-ai/bulkhead/queue"
	"github.com/bulkhead-ai/bulkhead/workers/engine"
	"github.com/bulkhead-ai/bulkhead/workers/worker"
)

func runDev(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("dev", stderr)
	dataDir := fs.String("data-dir", defaultDataDir(), "where dev keeps its JetStream store, signing key and built-in model")
	natsListen := fs.Int("nats-port", -1, "port of the embedded NATS server (-1: any free port)")
	disagg := fs.Bool("disaggregated", false, "run prefill and decode workers apart, each with its own engines and KV pools, handing each request's KV over NATS")
	nPrefill := fs.Int("prefill-workers", 1, "prefill workers with --disaggregated")
	nDecode := fs.Int("decode-workers", 1, "decode workers with --disaggregated")
	var cf catalogFlags
	var ef edgeFlags
	var wf engineFlags
	var of obsFlags
	cf.register(fs)
	ef.register(fs, true)
	wf.register(fs)
	of.register(fs, false, true)
	if err := parse(fs, args); err != nil {
		return err
	}
	roles := []worker.Role{worker.RoleUnified}
	if *disagg {
		if *nPrefill < 1 || *nDecode < 1 {
			return fmt.Errorf("%w: --prefill-workers %d and --decode-workers %d must be at least 1", errUsage, *nPrefill, *nDecode)
		}
		roles = nil
		for range *nPrefill {
			roles = append(roles, worker.RolePrefill)
		}
		for range *nDecode {
			roles = append(roles, worker.RoleDecode)
		}
	}
	log, err := of.logger(stderr)
	if err != nil {
		return err
	}
	// One tracer provider and one registry for every node of the process:
	// /metrics on the edge's listener shows the edge and all workers.
	tel, err := newTelemetry(ctx, log, "bulkhead-dev", "dev")
	if err != nil {
		return err
	}
	defer tel.shutdown(log)
	em, err := edge.NewMetrics(tel.reg)
	if err != nil {
		return err
	}
	wm, err := worker.NewMetrics(tel.reg)
	if err != nil {
		return err
	}
	wf.onStep = wm.OnStep
	h := newHealth()
	if err := os.MkdirAll(*dataDir, 0o700); err != nil {
		return err
	}
	cat, err := cf.load()
	if err != nil {
		return err
	}
	if cat == nil {
		path, err := builtin.WriteTo(*dataDir)
		if err != nil {
			return err
		}
		if cat, err = catalog.FromFlags([]string{builtin.Name + "=" + path}); err != nil {
			return err
		}
		log.Info("no --model given: serving the built-in TinyStories model (stories260K, MIT licence)", "model", builtin.Name)
	}
	if err := wf.applyContext(cat); err != nil {
		return err
	}
	// Engines for every model and every worker (each its own KV pools),
	// before anything else starts: a KV pool too small for the context
	// refuses start-up here, or (--clamp-context) clamps the window in cat,
	// which the edge below advertises and admits by.
	engineCtx, stopEngines := context.WithCancel(context.Background())
	defer stopEngines()
	engineSets := make([]map[string]*engine.Engine, len(roles))
	for i := range roles {
		engines, closeEngines, err := wf.engines(engineCtx, log, cat)
		if err != nil {
			return err
		}
		defer closeEngines()
		engineSets[i] = engines
	}

	// NATS with JetStream, in process.
	// Every role has its own credentials and permissions, even in one
	// process; nodes joining from elsewhere use the files in nats-creds/.
	credsDir := filepath.Join(*dataDir, "nats-creds")
	natsAuth, err := queue.LoadOrCreateAuth(credsDir)
	if err != nil {
		return err
	}
	ns, err := queue.StartServer(queue.ServerConfig{Port: *natsListen, StoreDir: filepath.Join(*dataDir, "jetstream"), Auth: natsAuth})
	if err != nil {
		return err
	}
	defer ns.Shutdown()
	stopOp, err := operate(ctx, log, ns.ClientURL(), natsAuth.Credentials(queue.RoleOperator), queue.StreamConfig{})
	if err != nil {
		return err
	}
	defer stopOp()
	log.Info("NATS requires role credentials", "url", ns.ClientURL(), "creds_dir", credsDir)
	roleOpts := func(role string) []nats.Option { return natsAuth.Credentials(role).Options() }

	// Redis: the one given, else an embedded Redis-compatible server.
	var rdb redis.UniversalClient
	if ef.redisURL != "" {
		opt, err := redis.ParseURL(ef.redisURL)
		if err != nil {
			return fmt.Errorf("%w: --redis: %v", errUsage, err)
		}
		rdb = redis.NewClient(opt)
	} else {
		mr, err := miniredis.Run()
		if err != nil {
			return fmt.Errorf("embedded redis: %w", err)
		}
		defer mr.Close()
		rdb = redis.NewClient(&redis.Options{Addr: mr.Addr()})
	}
	defer rdb.Close()
	h.add("redis", redisCheck(rdb))

	dev, err := auth.LoadOrCreateDevKey(*dataDir)
	if err != nil {
		return err
	}
	verifier, err := ef.verifier(log, dev)
	if err != nil {
		return err
	}
	// Not ready once the JWKS file has failed to reload past its keys' grace.
	h.add("jwks", func(context.Context) error { return verifier.Ready() })
	q, err := ef.quota(log, rdb)
	if err != nil {
		return err
	}

	// Every connection sets the streams up before any worker creates its
	// consumers: nats-server races a stream update against a consumer
	// creation on the same stream. Each worker has its own connection.
	type conn struct {
		nc *nats.Conn
		js jetstream.JetStream
	}
	conns := make([]conn, len(roles))
	for i, role := range roles {
		nc, js, err := connect(ctx, log, ns.ClientURL(), fmt.Sprintf("bulkhead-dev-%s-worker-%d", role, i), roleOpts(queue.RoleWorker)...)
		if err != nil {
			return err
		}
		defer nc.Close()
		conns[i] = conn{nc, js}
	}
	enc, ejs, err := connect(ctx, log, ns.ClientURL(), "bulkhead-dev-edge", roleOpts(queue.RoleEdge)...)
	if err != nil {
		return err
	}
	defer enc.Close()
	h.add("nats", natsCheck(enc))

	// Workers: the job loops over their engines.
	for i, role := range roles {
		capCtx, stopCap := context.WithCancel(context.Background())
		waitCap := publishCapacity(capCtx, log, conns[i].js, workerID(), engineSets[i])
		defer func() { stopCap(); waitCap() }()
		workerCtx, stopWorker := context.WithCancel(context.Background())
		workerDone := make(chan error, 1)
		go func() {
			workerDone <- runWorker(workerCtx, log.With("worker", i), conns[i].nc, conns[i].js, engineSets[i], wf.concurrency, role,
				workerObs{tp: tel.tp, metrics: wm, name: fmt.Sprintf("dev-%d", i)})
		}()
		defer func() { stopWorker(); <-workerDone }()
	}

	// Billing: usage events into the ledger the usage API and the budget read.
	bnc, bjs, err := connect(ctx, log, ns.ClientURL(), "bulkhead-dev-billing", roleOpts(queue.RoleBilling)...)
	if err != nil {
		return err
	}
	defer bnc.Close()
	lg, stopBilling, err := startBilling(log, tel.tp, bjs, rdb)
	if err != nil {
		return err
	}
	defer stopBilling()

	// Edge.
	// Workers joining this NATS from elsewhere may hold less than dev's own.
	followCtx, stopFollow := context.WithCancel(context.Background())
	live := queue.NewLiveModels(liveGrace)
	waitFollow, err := followCapacity(followCtx, log, ejs, cat, live)
	if err != nil {
		stopFollow()
		return err
	}
	defer func() { stopFollow(); waitFollow() }()
	classes, err := ef.tenants()
	if err != nil {
		return err
	}
	srv, err := edge.New(log.With("node", "edge"), edge.Config{
		Catalog: cat, Auth: verifier, Quota: q, Queue: queue.NewClient(enc, ejs).WithLiveness(live),
		Ledger: lg, DailyNeurons: ef.dailyNeurons,
		RequestTimeout: ef.requestTimeout, MaxBodyBytes: ef.maxBody, HTTP: ef.http,
		Tenants: classes, DefaultMaxTokens: ef.maxTokens,
		TracerProvider: tel.tp, Metrics: em, LogContent: of.logContent,
	})
	if err != nil {
		return err
	}
	defer registerEdge(log, enc, catalogNames(cat))()
	err = serveEdge(ctx, log, srv, h, tel.reg, ef.listen, func(addr string) {
		first := cat.Models()[0].Name
		fmt.Fprintf(stdout, `Bulkhead dev is serving %d model(s) at http://%s (NATS at %s).
Mint a token and call it:
  TOKEN=$(bulkhead token --tenant acme --key-dir %q)
  curl -s http://%s/ai/run/%s -H "Authorization: Bearer $TOKEN" -d '{"prompt":"Once upon a time","max_tokens":32}'
`, len(cat.Models()), addr, ns.ClientURL(), *dataDir, addr, first)
	})
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

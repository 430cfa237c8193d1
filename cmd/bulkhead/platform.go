package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bulkhead-ai/bulkhead/edge"
	"github.com/bulkhead-ai/bulkhead/edge/auth"
	"github.com/bulkhead-ai/bulkhead/models/catalog"
	"github.com/bulkhead-ai/bulkhead/queue"
	"github.com/bulkhead-ai/bulkhead/workers/worker"
)

func newLogger(w io.Writer) *slog.Logger { return slog.New(slog.NewTextHandler(w, nil)) }

// catalogNames lists the catalog's model names.
func catalogNames(cat *catalog.Catalog) []string {
	var names []string
	for _, m := range cat.Models() {
		names = append(names, m.Name)
	}
	return names
}

// defaultDataDir is where dev keeps its JetStream store and signing key.
func defaultDataDir() string {
	if d, err := os.UserConfigDir(); err == nil {
		return filepath.Join(d, "bulkhead")
	}
	return ".bulkhead"
}

func runNATS(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("nats", stderr)
	listen := fs.String("listen", "127.0.0.1:4222", "client listen address")
	store := fs.String("store-dir", filepath.Join(defaultDataDir(), "jetstream"), "JetStream storage directory")
	authDir := fs.String("auth-dir", "", "directory of the role credentials (edge.nk, worker.nk, billing.nk, operator.nk; created when missing): every connection must present one and gets only its role's permissions. Required off loopback")
	tlsCert := fs.String("tls-cert", "", "server certificate (PEM); required off loopback")
	tlsKey := fs.String("tls-key", "", "the server certificate's key (PEM)")
	tlsClientCA := fs.String("tls-client-ca", "", "CA (PEM) whose client certificates are required of every connection")
	requestTimeout := fs.Duration("request-timeout", 2*time.Minute, "the edges' --request-timeout, for sizing the results bucket")
	var lf loadFlags
	lf.register(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	log := newLogger(stderr)
	tlsCfg, err := serverTLS(*tlsCert, *tlsKey, *tlsClientCA)
	if err != nil {
		return err
	}
	streams, err := lf.streams(*requestTimeout)
	if err != nil {
		return err
	}
	var natsAuth *queue.Auth
	if *authDir != "" {
		if natsAuth, err = queue.LoadOrCreateAuth(*authDir); err != nil {
			return err
		}
	}
	host, portText, err := net.SplitHostPort(*listen)
	if err != nil {
		return fmt.Errorf("%w: --listen: %v", errUsage, err)
	}
	port, err := strconv.Atoi(portText)
	if err != nil {
		return fmt.Errorf("%w: --listen port %q", errUsage, portText)
	}
	srv, err := queue.StartServer(queue.ServerConfig{Host: host, Port: port, StoreDir: *store, Auth: natsAuth, TLS: tlsCfg})
	if err != nil {
		return err
	}
	defer srv.Shutdown()
	var op *queue.Credentials
	if natsAuth != nil {
		op = natsAuth.Credentials(queue.RoleOperator)
		log.Info("NATS requires role credentials: give each node its file with --nats-creds", "auth_dir", *authDir)
	} else {
		log.Warn("NATS without authentication: any process that reaches it can read every tenant's prompts and replies; pass --auth-dir")
	}
	stopOp, err := operate(ctx, log, srv.ClientURL(), op, streams)
	if err != nil {
		return err
	}
	defer stopOp()
	fmt.Fprintf(stdout, "NATS with JetStream listening at %s (store %s)\n", srv.ClientURL(), *store)
	<-ctx.Done()
	return nil
}

func runToken(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("token", stderr)
	tenant := fs.String("tenant", "", "tenant (account) id: the token's sub")
	scope := fs.String("scope", auth.ScopeRun, `space-separated scopes: ai:run, ai:read, billing:read`)
	models := fs.String("models", "", "comma-separated model allowlist (empty: all models)")
	ttl := fs.Duration("ttl", time.Hour, "lifetime")
	dir := fs.String("key-dir", defaultDataDir(), "directory holding the dev signing key that `bulkhead dev` created")
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := require(fs, "tenant"); err != nil {
		return err
	}
	if *ttl > auth.DefaultMaxLifetime {
		return fmt.Errorf("%w: --ttl %v is longer than the edge accepts (%v)", errUsage, *ttl, auth.DefaultMaxLifetime)
	}
	key, err := auth.LoadOrCreateDevKey(*dir)
	if err != nil {
		return err
	}
	var allow []string
	if *models != "" {
		allow = strings.Split(*models, ",")
	}
	tok, err := key.Mint(*tenant, strings.Fields(*scope), allow, *ttl)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(stdout, tok)
	return err
}

func runWorkerCmd(ctx context.Context, args []string, _, stderr io.Writer) error {
	fs := newFlags("worker", stderr)
	natsURL := fs.String("nats", "nats://127.0.0.1:4222", "NATS server URL")
	roleName := fs.String("role", "unified", "worker role: unified (whole requests), prefill (runs prompts, hands their KV to decode workers) or decode (verifies handed-over KV and generates)")
	var cf catalogFlags
	var ef engineFlags
	var of obsFlags
	var nf natsFlags
	nf.register(fs)
	cf.register(fs)
	ef.register(fs)
	of.register(fs, true, false)
	if err := parse(fs, args); err != nil {
		return err
	}
	role, err := worker.ParseRole(*roleName)
	if err != nil {
		return fmt.Errorf("%w: --role: %v", errUsage, err)
	}
	log, err := of.logger(stderr)
	if err != nil {
		return err
	}
	tel, err := newTelemetry(ctx, log, "bulkhead-worker-"+string(role), "worker")
	if err != nil {
		return err
	}
	defer tel.shutdown(log)
	wm, err := worker.NewMetrics(tel.reg)
	if err != nil {
		return err
	}
	ef.onStep = wm.OnStep
	// Health answers from the start: not ready until the models are loaded
	// and NATS is connected, nor once shutdown begins.
	h := newHealth()
	var loaded atomic.Bool
	h.add("models", flagCheck(&loaded, "models not loaded yet"))
	stopOps, err := serveOps(log, of.metricsListen, h, tel.reg)
	if err != nil {
		return err
	}
	defer stopOps()
	defer context.AfterFunc(ctx, h.drain)()
	cat, err := cf.load()
	if err != nil {
		return err
	}
	if cat == nil {
		return fmt.Errorf("%w: give --model NAME=PATH.gguf or --catalog FILE", errUsage)
	}
	if err := ef.applyContext(cat); err != nil {
		return err
	}
	// Engines first: a KV pool too small for the context refuses start-up
	// before the worker touches NATS.
	runCtx, cancel := context.WithCancel(context.Background())
	defer cancel()
	engines, stop, err := ef.engines(runCtx, log, cat)
	if err != nil {
		return err
	}
	defer stop()
	loaded.Store(true)
	natsOpts, err := nf.options()
	if err != nil {
		return err
	}
	nc, js, err := connect(ctx, log, *natsURL, "bulkhead-worker", natsOpts...)
	if err != nil {
		return err
	}
	defer nc.Close()
	h.add("nats", natsCheck(nc))
	// Edges follow the windows published here; the records go when the
	// worker stops, before its connection closes.
	capCtx, stopCap := context.WithCancel(context.Background())
	waitCap := publishCapacity(capCtx, log, js, workerID(), engines)
	defer func() { stopCap(); waitCap() }()
	return runWorker(ctx, log, nc, js, engines, ef.concurrency, role, workerObs{tp: tel.tp, metrics: wm, name: "worker"})
}

func runEdgeCmd(ctx context.Context, args []string, _, stderr io.Writer) error {
	fs := newFlags("edge", stderr)
	natsURL := fs.String("nats", "nats://127.0.0.1:4222", "NATS server URL")
	var cf catalogFlags
	var ef edgeFlags
	var of obsFlags
	var nf natsFlags
	nf.register(fs)
	cf.register(fs)
	ef.register(fs, true)
	of.register(fs, false, true)
	window := fs.Int("context", 0, "context window to advertise for every model (0: the catalog's)")
	if err := parse(fs, args); err != nil {
		return err
	}
	log, err := of.logger(stderr)
	if err != nil {
		return err
	}
	tel, err := newTelemetry(ctx, log, "bulkhead-edge", "edge")
	if err != nil {
		return err
	}
	defer tel.shutdown(log)
	em, err := edge.NewMetrics(tel.reg)
	if err != nil {
		return err
	}
	h := newHealth()
	cat, err := cf.load()
	if err != nil {
		return err
	}
	if cat == nil {
		return fmt.Errorf("%w: give --model NAME=PATH.gguf or --catalog FILE", errUsage)
	}
	if err := (&engineFlags{context: *window}).applyContext(cat); err != nil {
		return err
	}
	verifier, err := ef.verifier(log, nil)
	if err != nil {
		return err
	}
	// Not ready once the JWKS file has failed to reload past its keys' grace.
	h.add("jwks", func(context.Context) error { return verifier.Ready() })
	var rdb redis.UniversalClient
	if ef.redisURL != "" {
		opt, err := redis.ParseURL(ef.redisURL)
		if err != nil {
			return fmt.Errorf("%w: --redis: %v", errUsage, err)
		}
		c := redis.NewClient(opt)
		defer c.Close()
		rdb = c
		h.add("redis", redisCheck(rdb))
	}
	q, err := ef.quota(log, rdb)
	if err != nil {
		return err
	}
	lg, err := edgeLedger(rdb)
	if err != nil {
		return err
	}
	natsOpts, err := nf.options()
	if err != nil {
		return err
	}
	nc, js, err := connect(ctx, log, *natsURL, "bulkhead-edge", natsOpts...)
	if err != nil {
		return err
	}
	defer nc.Close()
	h.add("nats", natsCheck(nc))
	// Advertise no more than the live workers can hold.
	followCtx, stopFollow := context.WithCancel(context.Background())
	live := queue.NewLiveModels(liveGrace)
	waitFollow, err := followCapacity(followCtx, log, js, cat, live)
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
		Catalog: cat, Auth: verifier, Quota: q, Queue: queue.NewClient(nc, js).WithLiveness(live),
		Ledger: lg, DailyNeurons: ef.dailyNeurons,
		RequestTimeout: ef.requestTimeout, MaxBodyBytes: ef.maxBody, HTTP: ef.http,
		Tenants: classes, DefaultMaxTokens: ef.maxTokens,
		TracerProvider: tel.tp, Metrics: em, LogContent: of.logContent,
	})
	if err != nil {
		return err
	}
	defer registerEdge(log, nc, catalogNames(cat))()
	err = serveEdge(ctx, log, srv, h, tel.reg, ef.listen, nil)
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/bulkhead-ai/bulkhead/edge"
	"github.com/bulkhead-ai/bulkhead/edge/auth"
	"github.com/bulkhead-ai/bulkhead/models/catalog"
	"github.com/bulkhead-ai/bulkhead/models/gguf"
	"github.com/bulkhead-ai/bulkhead/models/synth"
	"github.com/bulkhead-ai/bulkhead/queue"
)

// SyntheticModel is the name dev serves its built-in random-weight model under:
// clearly not a production model.
const SyntheticModel = "@bulkhead/synthetic/random-stories260k"

func runDev(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("dev", stderr)
	dataDir := fs.String("data-dir", defaultDataDir(), "where dev keeps its JetStream store, signing key and built-in model")
	natsListen := fs.Int("nats-port", -1, "port of the embedded NATS server (-1: any free port)")
	var cf catalogFlags
	var ef edgeFlags
	var wf engineFlags
	cf.register(fs)
	ef.register(fs, true)
	wf.register(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	log := newLogger(stderr)
	if err := os.MkdirAll(*dataDir, 0o700); err != nil {
		return err
	}
	cat, err := cf.load()
	if err != nil {
		return err
	}
	if cat == nil {
		path := filepath.Join(*dataDir, "synthetic-stories260k-f32.gguf")
		if _, err := os.Stat(path); err != nil {
			if err := synth.GenerateFile(synth.Config{Shape: "stories260k", Type: gguf.TypeF32, Seed: 1}, path); err != nil {
				return err
			}
		}
		if cat, err = catalog.FromFlags([]string{SyntheticModel + "=" + path}); err != nil {
			return err
		}
		log.Warn("no --model given: serving a built-in RANDOM-WEIGHT model; its output is noise", "model", SyntheticModel)
	}
	if err := wf.applyContext(cat); err != nil {
		return err
	}
	// Engines for every model, before anything else starts: a KV pool too
	// small for the context refuses start-up here, or (--clamp-context) clamps
	// the window in cat, which the edge below advertises and admits by.
	engineCtx, stopEngines := context.WithCancel(context.Background())
	defer stopEngines()
	engines, closeEngines, err := wf.engines(engineCtx, log, cat)
	if err != nil {
		return err
	}
	defer closeEngines()

	// NATS with JetStream, in process.
	ns, err := queue.StartServer(queue.ServerConfig{Port: *natsListen, StoreDir: filepath.Join(*dataDir, "jetstream")})
	if err != nil {
		return err
	}
	defer ns.Shutdown()

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

	dev, err := auth.LoadOrCreateDevKey(*dataDir)
	if err != nil {
		return err
	}
	verifier, err := ef.verifier(dev)
	if err != nil {
		return err
	}
	q, err := ef.quota(log, rdb)
	if err != nil {
		return err
	}

	// Both connections set the streams up before the worker creates its
	// consumers: nats-server races a stream update against a consumer
	// creation on the same stream.
	wnc, wjs, err := connect(ctx, log, ns.ClientURL(), "bulkhead-dev-worker")
	if err != nil {
		return err
	}
	defer wnc.Close()
	enc, ejs, err := connect(ctx, log, ns.ClientURL(), "bulkhead-dev-edge")
	if err != nil {
		return err
	}
	defer enc.Close()

	// Workers: the job loop over the engines.
	capCtx, stopCap := context.WithCancel(context.Background())
	waitCap := publishCapacity(capCtx, log, wjs, workerID(), engines)
	defer func() { stopCap(); waitCap() }()
	workerCtx, stopWorker := context.WithCancel(context.Background())
	workerDone := make(chan error, 1)
	go func() { workerDone <- runWorker(workerCtx, log, wnc, wjs, engines, wf.concurrency) }()
	defer func() { stopWorker(); <-workerDone }()

	// Edge.
	// Workers joining this NATS from elsewhere may hold less than dev's own.
	followCtx, stopFollow := context.WithCancel(context.Background())
	waitFollow, err := followCapacity(followCtx, log, ejs, cat)
	if err != nil {
		stopFollow()
		return err
	}
	defer func() { stopFollow(); waitFollow() }()
	srv, err := edge.New(log.With("node", "edge"), edge.Config{
		Catalog: cat, Auth: verifier, Quota: q, Queue: queue.NewClient(enc, ejs),
		RequestTimeout: ef.requestTimeout, MaxBodyBytes: ef.maxBody,
	})
	if err != nil {
		return err
	}
	err = serveEdge(ctx, log, srv, ef.listen, func(addr string) {
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

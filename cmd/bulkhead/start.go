package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"

	"github.com/alicebob/miniredis/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/bulkhead-ai/bulkhead/billing/ledger"
	"github.com/bulkhead-ai/bulkhead/billing/meter"
	"github.com/bulkhead-ai/bulkhead/edge"
	"github.com/bulkhead-ai/bulkhead/queue"
	"github.com/bulkhead-ai/bulkhead/workers/engine"
)

// The start-up helpers here are shared by `dev` and the single-role
// commands: one per node kind (NATS, Redis, engines, worker, edge, billing),
// each starting its node from what the caller built and returning how to
// stop it.

// background runs run in a goroutine under a context of its own until stop,
// which cancels that context, waits for run to return and returns its error.
func background(run func(ctx context.Context) error) (stop func() error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	return func() error {
		cancel()
		return <-done
	}
}

// runEngine runs en until stop, which closes it and waits for its loop to
// end; a loop that failed is logged.
func runEngine(log *slog.Logger, en *engine.Engine) (stop func()) {
	wait := background(en.Run)
	return func() {
		en.Close()
		if err := wait(); err != nil && !errors.Is(err, context.Canceled) {
			log.Error("engine stopped", "err", err)
		}
	}
}

// startNode builds a node's logger on stderr and its telemetry (service
// names it to tracing, component to bulkhead_build_info). The caller flushes
// the telemetry last (tel.shutdown).
func (o *obsFlags) startNode(ctx context.Context, stderr io.Writer, service, component string) (*slog.Logger, *telemetry, error) {
	log, err := o.logger(stderr)
	if err != nil {
		return nil, nil, err
	}
	tel, err := newTelemetry(ctx, log, service, component)
	if err != nil {
		return nil, nil, err
	}
	return log, tel, nil
}

// serveHealth serves h and the node's metrics on --metrics-listen, for a
// node without an HTTP listener of its own (worker, billing), draining h once
// ctx ends. stop shuts the listener down.
func (o *obsFlags) serveHealth(ctx context.Context, log *slog.Logger, h *edge.Health, tel *telemetry) (stop func(), err error) {
	stopOps, err := edge.ServeOps(log, o.metricsListen, h, tel.reg)
	if err != nil {
		return nil, err
	}
	undrain := context.AfterFunc(ctx, h.Drain)
	return func() { undrain(); stopOps() }, nil
}

// startNATS runs an embedded NATS server with cfg and sets its streams up
// as the operator (op: its credentials, nil without auth). stop shuts both
// down.
func startNATS(ctx context.Context, log *slog.Logger, cfg queue.ServerConfig, op *queue.Credentials, streams queue.StreamConfig) (*queue.Server, func(), error) {
	srv, err := queue.StartServer(cfg)
	if err != nil {
		return nil, nil, err
	}
	stopOp, err := operate(ctx, log, srv.ClientURL(), op, streams)
	if err != nil {
		srv.Shutdown()
		return nil, nil, err
	}
	return srv, func() { stopOp(); srv.Shutdown() }, nil
}

// connect is connect with the node's NATS credentials and TLS flags.
func (n *natsFlags) connect(ctx context.Context, log *slog.Logger, url, name string) (*nats.Conn, jetstream.JetStream, error) {
	opts, err := n.options()
	if err != nil {
		return nil, nil, err
	}
	return connect(ctx, log, url, name, n.streams(), opts...)
}

// dialRedis opens the Redis at url (a --redis flag).
func dialRedis(url string) (*redis.Client, error) {
	opt, err := redis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("%w: --redis: %v", errUsage, err)
	}
	return redis.NewClient(opt), nil
}

// devRedis opens the Redis at url, else (url empty) an embedded
// Redis-compatible server. stop closes the client and the server.
func devRedis(url string) (redis.UniversalClient, func(), error) {
	if url != "" {
		rdb, err := dialRedis(url)
		if err != nil {
			return nil, nil, err
		}
		return rdb, func() { _ = rdb.Close() }, nil
	}
	mr, err := miniredis.Run()
	if err != nil {
		return nil, nil, fmt.Errorf("embedded redis: %w", err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	return rdb, func() { _ = rdb.Close(); mr.Close() }, nil
}

// newMeter builds the ledger in rdb and the billing meter that counts usage
// events from js into it.
func newMeter(log *slog.Logger, js jetstream.JetStream, rdb redis.UniversalClient, cfg meter.Config) (*ledger.Ledger, *meter.Meter, error) {
	l, err := ledger.New(rdb, ledger.Config{})
	if err != nil {
		return nil, nil, err
	}
	m, err := meter.New(log.With("node", "billing"), js, l, cfg)
	if err != nil {
		return nil, nil, err
	}
	return l, m, nil
}

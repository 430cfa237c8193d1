package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/bulkhead-ai/bulkhead/queue"
)

// natsFlags are how a node authenticates to NATS: its role's nkey seed and,
// for a server off this machine, TLS.
type natsFlags struct {
	replicas int
	creds    string
	tlsCA    string
	tlsCert  string
	tlsKey   string
}

func (n *natsFlags) register(fs *flag.FlagSet) {
	n.registerConn(fs)
	fs.IntVar(&n.replicas, "replicas", 1, "replicas of the streams and buckets if this node has to create them (`bulkhead nats` sets them up otherwise)")
}

// registerConn registers the connection flags alone (credentials and TLS),
// for commands that only read the bus.
func (n *natsFlags) registerConn(fs *flag.FlagSet) {
	fs.StringVar(&n.creds, "nats-creds", "", "this role's NATS credentials: the nkey seed file `bulkhead nats` wrote into its --auth-dir (edge.nk, worker.nk, billing.nk, export.nk, operator.nk)")
	fs.StringVar(&n.tlsCA, "nats-tls-ca", "", "CA certificate (PEM) that signed the NATS server's certificate")
	fs.StringVar(&n.tlsCert, "nats-tls-cert", "", "client certificate (PEM) for a NATS server that requires one")
	fs.StringVar(&n.tlsKey, "nats-tls-key", "", "the client certificate's key (PEM)")
}

// streams is the stream configuration a node creates missing streams with.
func (n *natsFlags) streams() queue.StreamConfig { return queue.StreamConfig{Replicas: n.replicas} }

// options are the connect options the flags ask for.
func (n *natsFlags) options() ([]nats.Option, error) {
	var opts []nats.Option
	if n.creds != "" {
		c, err := queue.LoadCredentials(n.creds)
		if err != nil {
			return nil, fmt.Errorf("%w: --nats-creds: %v", errUsage, err)
		}
		opts = append(opts, c.Options()...)
	}
	if (n.tlsCert == "") != (n.tlsKey == "") {
		return nil, fmt.Errorf("%w: give --nats-tls-cert and --nats-tls-key together", errUsage)
	}
	if n.tlsCA != "" {
		opts = append(opts, nats.RootCAs(n.tlsCA))
	}
	if n.tlsCert != "" {
		opts = append(opts, nats.ClientCert(n.tlsCert, n.tlsKey))
	}
	return opts, nil
}

// serverTLS loads the NATS server's certificate and, when clientCA is set,
// requires clients to present a certificate it signed. All empty: no TLS.
func serverTLS(cert, key, clientCA string) (*tls.Config, error) {
	if cert == "" && key == "" && clientCA == "" {
		return nil, nil
	}
	if cert == "" || key == "" {
		return nil, fmt.Errorf("%w: give --tls-cert and --tls-key together", errUsage)
	}
	pair, err := tls.LoadX509KeyPair(cert, key)
	if err != nil {
		return nil, fmt.Errorf("%w: --tls-cert/--tls-key: %v", errUsage, err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}
	if clientCA != "" {
		pem, err := os.ReadFile(clientCA)
		if err != nil {
			return nil, fmt.Errorf("%w: --tls-client-ca: %v", errUsage, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%w: --tls-client-ca %s holds no PEM certificate", errUsage, clientCA)
		}
		cfg.ClientCAs, cfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

// loadFlags size the streams and the results bucket from the traffic the
// cluster is built for (queue.SizeFor).
type loadFlags struct {
	syncRPS     float64
	asyncRPS    float64
	resultBytes int64
	perTenant   int64
}

func (l *loadFlags) register(fs *flag.FlagSet) {
	fs.Float64Var(&l.syncRPS, "sync-rps", 50, "sustained synchronous requests per second the results bucket is sized for")
	fs.Float64Var(&l.asyncRPS, "async-rps", 0.1, "sustained async requests per second the results bucket is sized for (results live 24 h)")
	fs.Int64Var(&l.resultBytes, "async-result-bytes", 16<<10, "largest async result text the results bucket is sized for")
	fs.Int64Var(&l.perTenant, "jobs-per-tenant", 0, "jobs one tenant may hold in the jobs stream per model, waiting or running (0: a tenth of the stream)")
}

func (l *loadFlags) streams(requestTimeout time.Duration) (queue.StreamConfig, error) {
	cfg, err := queue.SizeFor(queue.Load{SyncPerSecond: l.syncRPS, AsyncPerSecond: l.asyncRPS,
		MaxResultBytes: l.resultBytes, RequestTimeout: requestTimeout})
	if err != nil {
		return queue.StreamConfig{}, fmt.Errorf("%w: %v", errUsage, err)
	}
	if l.perTenant < 0 || l.perTenant > cfg.MaxJobs {
		return queue.StreamConfig{}, fmt.Errorf("%w: --jobs-per-tenant %d must lie in [0, %d] (the jobs stream's size)", errUsage, l.perTenant, cfg.MaxJobs)
	}
	cfg.MaxJobsPerTenant = l.perTenant
	return cfg, nil
}

// fillInterval is how often the NATS node checks how full its stores are.
const fillInterval = 10 * time.Second

// operate connects to the server at url as the operator, sets the streams
// and buckets up with cfg (the roles only check they exist) and logs their
// fill level until stop is called.
func operate(ctx context.Context, log *slog.Logger, url string, creds *queue.Credentials, cfg queue.StreamConfig) (stop func(), err error) {
	var opts []nats.Option
	if creds != nil {
		opts = creds.Options()
	}
	nc, err := nats.Connect(url, append(opts, nats.Name("bulkhead-setup"))...)
	if err != nil {
		return nil, fmt.Errorf("connecting to NATS at %s with the setup role: %w", url, err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, err
	}
	if err := setupStreams(ctx, log, js, cfg); err != nil {
		nc.Close()
		return nil, fmt.Errorf("setting up JetStream at %s: %w", url, err)
	}
	wctx, stopWatch := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { queue.WatchFill(wctx, log, js, fillInterval) })
	wg.Go(func() { queue.WatchStreams(wctx, log, js, fillInterval) })
	return func() { stopWatch(); wg.Wait(); nc.Close() }, nil
}

// setupTimeout bounds how long a NATS node waits for its streams to be set
// up: on a cluster, until enough of its peers are up to hold every replica.
const setupTimeout = 2 * time.Minute

// setupStreams runs queue.Setup until it succeeds and, with replicas, until
// every stream has its leader and current followers. A JetStream request
// waits as long as its context while the cluster has no leader yet, so each
// try has its own few seconds.
func setupStreams(ctx context.Context, log *slog.Logger, js jetstream.JetStream, cfg queue.StreamConfig) error {
	ctx, cancel := context.WithTimeout(ctx, setupTimeout)
	defer cancel()
	try := func(f func(ctx context.Context) error) error {
		for {
			tctx, tcancel := context.WithTimeout(ctx, 2*time.Second)
			err := f(tctx)
			tcancel()
			if err == nil || errors.Is(err, queue.ErrConfig) {
				return err
			}
			log.Info("waiting for JetStream", "err", err)
			select {
			case <-ctx.Done():
				return fmt.Errorf("%w (last: %v)", ctx.Err(), err)
			case <-time.After(500 * time.Millisecond):
			}
		}
	}
	if err := try(func(ctx context.Context) error { return queue.Setup(ctx, js, cfg) }); err != nil {
		return err
	}
	return try(func(ctx context.Context) error { return queue.Replicated(ctx, js, cfg.Replicas) })
}

// permissionLogger logs what the server refused a connection: a
// permissions violation is a role doing what it may not.
func permissionLogger(log *slog.Logger) nats.Option {
	return nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
		subj := ""
		if sub != nil {
			subj = sub.Subject
		}
		if errors.Is(err, nats.ErrPermissionViolation) || errors.Is(err, nats.ErrAuthorization) {
			log.Error("NATS refused an operation", "subject", subj, "err", err)
			return
		}
		log.Warn("NATS error", "subject", subj, "err", err)
	})
}

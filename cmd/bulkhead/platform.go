package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/bulkhead-ai/bulkhead/edge/auth"
	"github.com/bulkhead-ai/bulkhead/models/catalog"
	"github.com/bulkhead-ai/bulkhead/queue"
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
	authDir := fs.String("auth-dir", filepath.Join(defaultDataDir(), "nats-creds"), "directory of the role credentials (edge.nk, worker.nk, billing.nk, export.nk, operator.nk; created when missing): every connection must present one and gets only its role's permissions")
	noAuth := fs.Bool("no-auth", false, "serve NATS without authentication, on loopback only: any local process can then read every tenant's prompts and replies and queue jobs billed to any tenant (not for shared machines)")
	tlsCert := fs.String("tls-cert", "", "server certificate (PEM); required off loopback")
	tlsKey := fs.String("tls-key", "", "the server certificate's key (PEM)")
	tlsClientCA := fs.String("tls-client-ca", "", "CA (PEM) whose client certificates are required of every connection")
	requestTimeout := fs.Duration("request-timeout", 2*time.Minute, "the edges' --request-timeout, for sizing the results bucket")
	tenantCreds := fs.String("tenant-creds", "", "comma-separated tenants to give a NATS credential for their event subjects (<auth-dir>/tenants/<tenant>.nk, created when missing; every file there is accepted): hand each tenant its file")
	var lf loadFlags
	lf.register(fs)
	var adapters int64
	fs.Func("adapters-max-bytes", "bytes the LoRA adapters object store holds, all tenants (bytes, or with KiB, MiB or GiB; default 1GiB)", func(s string) error {
		n, err := parseByteSize(s)
		adapters = n
		return err
	})
	var cf clusterFlags
	cf.register(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	log := newLogger(stderr)
	cluster, err := cf.config()
	if err != nil {
		return err
	}
	tlsCfg, err := serverTLS(*tlsCert, *tlsKey, *tlsClientCA)
	if err != nil {
		return err
	}
	streams, err := lf.streams(*requestTimeout)
	if err != nil {
		return err
	}
	streams.Replicas = cf.streamReplicas()
	streams.AdaptersMaxBytes = adapters
	natsAuth, err := busAuth(*noAuth, *authDir, *tenantCreds)
	if err != nil {
		return err
	}
	host, port, err := hostPort(*listen)
	if err != nil {
		return err
	}
	var op *queue.Credentials
	if natsAuth != nil {
		op = natsAuth.Credentials(queue.RoleSetup)
	}
	srv, stop, err := startNATS(ctx, log, queue.ServerConfig{Host: host, Port: port, StoreDir: *store, Auth: natsAuth, TLS: tlsCfg,
		Name: cf.serverName, Cluster: cluster}, op, streams)
	if err != nil {
		return err
	}
	defer stop()
	if natsAuth != nil {
		log.Info("NATS requires role credentials: give each node its file with --nats-creds", "auth_dir", *authDir)
	} else {
		log.Warn("NATS WITHOUT AUTHENTICATION (--no-auth): any process that reaches it can read every tenant's prompts and replies and queue jobs billed to any tenant; drop --no-auth to require role credentials")
	}
	if cluster != nil {
		fmt.Fprintf(stdout, "NATS server %s of cluster %s: routes at %s, streams with %d replicas\n", cf.serverName, cf.name, srv.ClusterURL(), streams.Replicas)
	}
	fmt.Fprintf(stdout, "NATS with JetStream listening at %s (store %s)\n", srv.ClientURL(), *store)
	<-ctx.Done()
	return nil
}

// busAuth loads or creates the bus's role credentials in authDir, and the
// credentials of the tenants listed in tenantCreds; nil with noAuth.
func busAuth(noAuth bool, authDir, tenantCreds string) (*queue.Auth, error) {
	if noAuth {
		if tenantCreds != "" {
			return nil, fmt.Errorf("%w: --tenant-creds needs credentials (drop --no-auth)", errUsage)
		}
		return nil, nil
	}
	if authDir == "" {
		return nil, fmt.Errorf("%w: --auth-dir is empty; give a directory, or --no-auth for an anonymous bus on loopback", errUsage)
	}
	for _, tenant := range splitList(tenantCreds) {
		if _, err := queue.LoadOrCreateTenantCreds(authDir, tenant); err != nil {
			return nil, fmt.Errorf("%w: --tenant-creds: %w", errUsage, err)
		}
	}
	return queue.LoadOrCreateAuth(authDir)
}

// hostPort splits --listen's host:port.
func hostPort(listen string) (string, int, error) {
	host, portText, err := net.SplitHostPort(listen)
	if err != nil {
		return "", 0, fmt.Errorf("%w: --listen: %v", errUsage, err)
	}
	port, err := strconv.Atoi(portText)
	if err != nil {
		return "", 0, fmt.Errorf("%w: --listen port %q", errUsage, portText)
	}
	return host, port, nil
}

func runToken(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("token", stderr)
	tenant := fs.String("tenant", "", "tenant (account) id: the token's sub")
	scope := fs.String("scope", auth.ScopeRun, `space-separated scopes: ai:run, ai:read, billing:read, billing:write, finetunes:write`)
	models := fs.String("models", "", "comma-separated model allowlist (empty: all models)")
	ttl := fs.Duration("ttl", time.Hour, "lifetime")
	apiKey := fs.String("key", "", "which of the tenant's API keys the token is (its \"key\" claim: spend is told apart per key; empty: none)")
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
	tok, err := key.MintKey(*tenant, *apiKey, strings.Fields(*scope), allow, *ttl)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(stdout, tok)
	return err
}

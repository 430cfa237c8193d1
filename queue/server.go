package queue

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// ErrServer reports an embedded NATS server that could not be configured or
// did not become ready.
var ErrServer = errors.New("queue: embedded NATS server")

// ServerConfig configures the embedded NATS server. Zero values take the
// defaults noted.
type ServerConfig struct {
	Host     string // listen address; default "127.0.0.1"
	Port     int    // client port; -1 picks a free port; 0 means the NATS default 4222
	StoreDir string // JetStream storage directory; required

	// JetStream resource limits; 0 lets the server choose from the machine.
	MaxMemory int64
	MaxStore  int64

	// ReadyTimeout bounds the wait for the server to accept connections;
	// default 10s.
	ReadyTimeout time.Duration

	// Auth, when set, is the only way in: one nkey user per role with its
	// RolePermissions; a connection without credentials is refused.
	Auth *Auth
	// TLS, when set, is required of every client connection.
	TLS *tls.Config

	// Name is the server's name, unique within a cluster (JetStream's
	// peers are named by it); default: the server's generated id.
	Name string
	// Cluster, when set, makes this server one node of a JetStream cluster.
	Cluster *ClusterConfig
}

// ClusterConfig joins an embedded server to a NATS cluster: it listens for
// routes from the other servers and dials the ones it is given. Any NATS
// 2.10+ server can be a peer; nothing here is specific to ours.
type ClusterConfig struct {
	Name   string   // the cluster's name, the same on every peer; required
	Host   string   // route listen address; default "127.0.0.1"
	Port   int      // route port; -1 picks a free port; 0 means the NATS default 6222
	Routes []string // peers' route URLs, nats-route://host:port; required (this server's own may be listed)

	// TLS secures routes both ways: it must hold this server's certificate,
	// RootCAs to verify the peers it dials and ClientCAs with
	// tls.RequireAndVerifyClientCert to verify the peers that dial it
	// (mutual TLS is how peers authenticate one another). Required when the
	// route listener or any route is off loopback.
	TLS *tls.Config
}

// validate fills defaults and refuses a cluster that cannot form or would
// carry the bus in the clear off this machine.
func (c *ClusterConfig) validate() ([]*url.URL, error) {
	if c.Host == "" {
		c.Host = "127.0.0.1"
	}
	switch {
	case c.Name == "":
		return nil, fmt.Errorf("%w: Cluster.Name is required", ErrServer)
	case c.Port < -1 || c.Port > 65535:
		return nil, fmt.Errorf("%w: Cluster.Port %d", ErrServer, c.Port)
	case len(c.Routes) == 0:
		// JetStream's meta group cannot form without them.
		return nil, fmt.Errorf("%w: a cluster needs Routes (its peers'; its own may be listed, so every peer can be given the same list)", ErrServer)
	}
	secure := c.TLS != nil && c.TLS.ClientAuth == tls.RequireAndVerifyClientCert && c.TLS.RootCAs != nil
	if !loopback(c.Host) && !secure {
		return nil, fmt.Errorf("%w: refusing to listen for routes on %s without mutual TLS", ErrServer, c.Host)
	}
	var routes []*url.URL
	for _, r := range c.Routes {
		u, err := url.Parse(r)
		if err != nil || u.Host == "" || u.Port() == "" {
			return nil, fmt.Errorf("%w: route %q is not a URL like nats-route://host:6222", ErrServer, r)
		}
		if !loopback(u.Hostname()) && !secure {
			return nil, fmt.Errorf("%w: refusing route %s off loopback without mutual TLS", ErrServer, r)
		}
		routes = append(routes, u)
	}
	return routes, nil
}

// loopback reports whether host names only this machine.
func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Server is an embedded NATS server with JetStream enabled.
type Server struct {
	ns   *server.Server
	once sync.Once
}

// StartServer starts an embedded NATS server and waits until it accepts
// connections.
func StartServer(cfg ServerConfig) (*Server, error) {
	if cfg.Host == "" {
		cfg.Host = "127.0.0.1"
	}
	if cfg.ReadyTimeout == 0 {
		cfg.ReadyTimeout = 10 * time.Second
	}
	switch {
	case cfg.StoreDir == "":
		return nil, fmt.Errorf("%w: StoreDir is required", ErrServer)
	case cfg.Port < -1 || cfg.Port > 65535:
		return nil, fmt.Errorf("%w: Port %d", ErrServer, cfg.Port)
	case cfg.MaxMemory < 0 || cfg.MaxStore < 0:
		return nil, fmt.Errorf("%w: MaxMemory and MaxStore must not be negative", ErrServer)
	case cfg.ReadyTimeout < 0:
		return nil, fmt.Errorf("%w: ReadyTimeout %v", ErrServer, cfg.ReadyTimeout)
	}
	if !loopback(cfg.Host) && (cfg.Auth == nil || cfg.TLS == nil) {
		return nil, fmt.Errorf("%w: refusing to listen on %s without authentication and TLS", ErrServer, cfg.Host)
	}
	opts := &server.Options{
		ServerName:         cfg.Name,
		Host:               cfg.Host,
		Port:               cfg.Port,
		JetStream:          true,
		StoreDir:           cfg.StoreDir,
		JetStreamMaxMemory: cfg.MaxMemory,
		JetStreamMaxStore:  cfg.MaxStore,
		NoSigs:             true,
		NoLog:              true,
	}
	if cfg.Auth != nil {
		opts.Nkeys = cfg.Auth.nkeyUsers()
	}
	if cfg.TLS != nil {
		opts.TLS, opts.TLSConfig, opts.TLSTimeout = true, cfg.TLS, 2
		opts.TLSVerify = cfg.TLS.ClientAuth == tls.RequireAndVerifyClientCert
	}
	if c := cfg.Cluster; c != nil {
		routes, err := c.validate()
		if err != nil {
			return nil, err
		}
		if cfg.Name == "" {
			return nil, fmt.Errorf("%w: a clustered server needs a Name (unique among its peers)", ErrServer)
		}
		opts.Cluster = server.ClusterOpts{Name: c.Name, Host: c.Host, Port: c.Port}
		if c.TLS != nil {
			opts.Cluster.TLSConfig, opts.Cluster.TLSTimeout = c.TLS, 2
		}
		opts.Routes = routes
	}
	ns, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrServer, err)
	}
	ns.Start()
	if !ns.ReadyForConnections(cfg.ReadyTimeout) {
		ns.Shutdown()
		ns.WaitForShutdown()
		return nil, fmt.Errorf("%w: not ready after %v", ErrServer, cfg.ReadyTimeout)
	}
	return &Server{ns: ns}, nil
}

// ClientURL is the URL clients connect to, e.g. nats://127.0.0.1:4222.
func (s *Server) ClientURL() string { return s.ns.ClientURL() }

// ClusterURL is the URL its peers' routes dial, e.g.
// nats-route://127.0.0.1:6222; empty when the server is not clustered.
func (s *Server) ClusterURL() string {
	a := s.ns.ClusterAddr()
	if a == nil {
		return ""
	}
	return "nats-route://" + a.String()
}

// Shutdown stops the server and waits until it has stopped. It is idempotent.
func (s *Server) Shutdown() {
	s.once.Do(func() {
		s.ns.Shutdown()
		s.ns.WaitForShutdown()
	})
}

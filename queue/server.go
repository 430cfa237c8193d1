package queue

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
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

// Shutdown stops the server and waits until it has stopped. It is idempotent.
func (s *Server) Shutdown() {
	s.once.Do(func() {
		s.ns.Shutdown()
		s.ns.WaitForShutdown()
	})
}

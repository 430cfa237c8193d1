package main

import (
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"

	"github.com/bulkhead-ai/bulkhead/queue"
)

// clusterFlags make `bulkhead nats` one server of a JetStream cluster.
type clusterFlags struct {
	serverName string
	name       string
	listen     string
	routes     string
	replicas   int
	tlsCert    string
	tlsKey     string
	tlsCA      string
}

func (c *clusterFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&c.serverName, "server-name", "", "this server's name, unique in its cluster (default: its generated id; required with --cluster-name)")
	fs.StringVar(&c.name, "cluster-name", "", "join the JetStream cluster of this name (empty: a server of its own)")
	fs.StringVar(&c.listen, "cluster-listen", "127.0.0.1:6222", "route listen address, for the cluster's other servers")
	fs.StringVar(&c.routes, "routes", "", "comma-separated route URLs of the cluster's servers, nats-route://host:6222 (this one's may be listed)")
	fs.IntVar(&c.replicas, "replicas", 0, "replicas of every stream and bucket (0: 1 alone, 3 in a cluster; the cluster must have that many servers)")
	fs.StringVar(&c.tlsCert, "cluster-tls-cert", "", "certificate (PEM) this server presents to its peers; required for routes off loopback")
	fs.StringVar(&c.tlsKey, "cluster-tls-key", "", "the cluster certificate's key (PEM)")
	fs.StringVar(&c.tlsCA, "cluster-tls-ca", "", "CA (PEM) that signed every peer's cluster certificate (routes are mutual TLS)")
}

// streamReplicas is --replicas with its default.
func (c *clusterFlags) streamReplicas() int {
	switch {
	case c.replicas != 0:
		return c.replicas
	case c.name != "":
		return 3
	}
	return 1
}

// config is the queue.ClusterConfig the flags ask for; nil alone.
func (c *clusterFlags) config() (*queue.ClusterConfig, error) {
	if c.name == "" {
		if c.routes != "" {
			return nil, fmt.Errorf("%w: --routes needs --cluster-name", errUsage)
		}
		return nil, nil
	}
	if c.serverName == "" {
		return nil, fmt.Errorf("%w: --cluster-name needs --server-name (unique in the cluster)", errUsage)
	}
	host, portText, err := net.SplitHostPort(c.listen)
	if err != nil {
		return nil, fmt.Errorf("%w: --cluster-listen: %v", errUsage, err)
	}
	port, err := strconv.Atoi(portText)
	if err != nil {
		return nil, fmt.Errorf("%w: --cluster-listen port %q", errUsage, portText)
	}
	cfg := &queue.ClusterConfig{Name: c.name, Host: host, Port: port}
	for r := range strings.SplitSeq(c.routes, ",") {
		if r = strings.TrimSpace(r); r != "" {
			cfg.Routes = append(cfg.Routes, r)
		}
	}
	if cfg.TLS, err = c.tls(); err != nil {
		return nil, err
	}
	return cfg, nil
}

// tls is the routes' mutual TLS: this server's certificate, and the CA that
// both verifies the peers it dials and is required of the peers that dial it.
func (c *clusterFlags) tls() (*tls.Config, error) {
	if c.tlsCert == "" && c.tlsKey == "" && c.tlsCA == "" {
		return nil, nil
	}
	if c.tlsCert == "" || c.tlsKey == "" || c.tlsCA == "" {
		return nil, fmt.Errorf("%w: give --cluster-tls-cert, --cluster-tls-key and --cluster-tls-ca together", errUsage)
	}
	pair, err := tls.LoadX509KeyPair(c.tlsCert, c.tlsKey)
	if err != nil {
		return nil, fmt.Errorf("%w: --cluster-tls-cert/--cluster-tls-key: %v", errUsage, err)
	}
	pem, err := os.ReadFile(c.tlsCA)
	if err != nil {
		return nil, fmt.Errorf("%w: --cluster-tls-ca: %v", errUsage, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%w: --cluster-tls-ca %s holds no PEM certificate", errUsage, c.tlsCA)
	}
	return &tls.Config{Certificates: []tls.Certificate{pair}, RootCAs: pool, ClientCAs: pool,
		ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12}, nil
}

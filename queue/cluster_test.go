package queue

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/bulkhead-ai/bulkhead/models/testkit"
)

// freePort is a TCP port free on loopback a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// startCluster runs n embedded servers as one JetStream cluster on loopback
// (free ports), each given every server's route URL, its own included.
func startCluster(t *testing.T, n int) []*Server {
	t.Helper()
	ports := make([]int, n)
	var routes []string
	for i := range ports {
		ports[i] = freePort(t)
		routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", ports[i]))
	}
	var srvs []*Server
	for i := range n {
		s, err := StartServer(ServerConfig{Port: -1, StoreDir: t.TempDir(), Name: fmt.Sprintf("n%d", i),
			Cluster: &ClusterConfig{Name: "bulkhead-test", Port: ports[i], Routes: routes}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Shutdown)
		if s.ClusterURL() != routes[i] {
			t.Fatalf("cluster URL %s, want %s", s.ClusterURL(), routes[i])
		}
		srvs = append(srvs, s)
	}
	return srvs
}

// eventually retries f, each try bounded by a few seconds (a JetStream
// request waits as long as its context while the cluster has no leader),
// until it succeeds or within has passed.
func eventually(t *testing.T, within time.Duration, f func(ctx context.Context) error) {
	t.Helper()
	testkit.Poll(t, within, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		return f(ctx)
	})
}

// clusterJS starts a three-server cluster (skipped in -short mode) and
// returns its servers and JetStream on a connection to all of them, closed
// when the test ends.
func clusterJS(t *testing.T) ([]*Server, jetstream.JetStream) {
	t.Helper()
	if testing.Short() {
		t.Skip("three-server cluster skipped in -short mode")
	}
	srvs := startCluster(t, 3)
	_, js := connectJS(t, clientURLs(srvs))
	return srvs, js
}

func clientURLs(srvs []*Server) string {
	var urls []string
	for _, s := range srvs {
		urls = append(urls, s.ClientURL())
	}
	return strings.Join(urls, ",")
}

// TestClusterReplicates sets the platform up with three replicas on a
// three-server cluster, then shuts the jobs stream's leader down: the jobs
// queued before are all still there, new jobs and records are taken, and
// the results bucket still reads.
// (A job submitted during the election is taken once there is a leader.)
func TestClusterReplicates(t *testing.T) {
	if testing.Short() {
		t.Skip("three-server cluster skipped in -short mode")
	}
	srvs := startCluster(t, 3)
	nc, err := nats.Connect(clientURLs(srvs), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	eventually(t, 30*time.Second, func(ctx context.Context) error { return Setup(ctx, js, StreamConfig{Replicas: 3}) })
	eventually(t, 30*time.Second, func(ctx context.Context) error { return Replicated(ctx, js, 3) })

	c := NewClient(nc, js)
	const queued = 20
	for i := range queued {
		if err := c.SubmitAsync(ctx, testJob(fmt.Sprintf("before-%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	s, err := js.Stream(ctx, JobsStream)
	if err != nil {
		t.Fatal(err)
	}
	leader := s.CachedInfo().Cluster.Leader
	for _, srv := range srvs {
		if srv.ns.Name() == leader {
			srv.Shutdown()
		}
	}
	// A job published while the stream has no leader waits for the new one
	// (LeaderWait) instead of being refused.
	if err := c.SubmitAsync(ctx, testJob("during")); err != nil {
		t.Fatalf("SubmitAsync during the election: %v", err)
	}
	// The new leader took over from the two servers left.
	eventually(t, 30*time.Second, func(ctx context.Context) error {
		info, err := s.Info(ctx)
		if err != nil {
			return err
		}
		if info.Cluster.Leader == "" || info.Cluster.Leader == leader {
			return fmt.Errorf("leader %q", info.Cluster.Leader)
		}
		if info.State.Msgs != queued+1 {
			return fmt.Errorf("%d jobs in the stream, want %d", info.State.Msgs, queued+1)
		}
		return nil
	})
	st, err := c.AsyncStatus(ctx, "before-3")
	if err != nil || st.Status != StatusQueued {
		t.Fatalf("record of a job queued before the loss: %+v, %v", st, err)
	}
}

// TestClusterCapacityReplicated: Setup gives an existing capacity bucket
// (created by a worker, one replica) the replicas asked for.
func TestClusterCapacityReplicated(t *testing.T) {
	_, js := clusterJS(t)
	eventually(t, 30*time.Second, func(ctx context.Context) error {
		return PublishCapacity(ctx, js, "@cf/test/model", 512, "w1")
	})
	eventually(t, 30*time.Second, func(ctx context.Context) error { return Setup(ctx, js, StreamConfig{Replicas: 3}) })
	eventually(t, 30*time.Second, func(ctx context.Context) error { return Replicated(ctx, js, 3) })
}

func TestClusterRefuses(t *testing.T) {
	mtls := &tls.Config{ClientAuth: tls.RequireAndVerifyClientCert}
	self := []string{"nats-route://127.0.0.1:6222"}
	for _, tc := range []struct {
		name string
		cfg  ServerConfig
		want string
	}{
		{"no cluster name", ServerConfig{Name: "a", Cluster: &ClusterConfig{Port: -1, Routes: self}}, "Cluster.Name"},
		{"no server name", ServerConfig{Cluster: &ClusterConfig{Name: "c", Port: -1, Routes: self}}, "needs a Name"},
		{"no routes", ServerConfig{Name: "a", Cluster: &ClusterConfig{Name: "c", Port: -1}}, "needs Routes"},
		{"routes off loopback in the clear", ServerConfig{Name: "a", Cluster: &ClusterConfig{Name: "c", Port: -1,
			Routes: []string{"nats-route://10.1.2.3:6222"}}}, "without mutual TLS"},
		{"listening off loopback in the clear", ServerConfig{Name: "a", Cluster: &ClusterConfig{Name: "c", Host: "0.0.0.0", Port: -1, Routes: self}}, "without mutual TLS"},
		{"TLS that verifies no peer", ServerConfig{Name: "a", Cluster: &ClusterConfig{Name: "c", Host: "0.0.0.0", Port: -1, TLS: mtls, Routes: self}}, "without mutual TLS"},
		{"route without a port", ServerConfig{Name: "a", Cluster: &ClusterConfig{Name: "c", Port: -1,
			Routes: []string{"nats-route://127.0.0.1"}}}, "not a URL"},
		{"bad port", ServerConfig{Name: "a", Cluster: &ClusterConfig{Name: "c", Port: 70000, Routes: self}}, "Cluster.Port"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.Port, tc.cfg.StoreDir = -1, t.TempDir()
			s, err := StartServer(tc.cfg)
			if err == nil {
				s.Shutdown()
				t.Fatal("started")
			}
			if !errors.Is(err, ErrServer) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want ErrServer naming %q", err, tc.want)
			}
		})
	}
}

func TestReplicasRefused(t *testing.T) {
	env := startEnv(t, StreamConfig{})
	for _, r := range []int{-1, 6} {
		if err := Setup(context.Background(), env.js, StreamConfig{Replicas: r}); !errors.Is(err, ErrConfig) {
			t.Errorf("Replicas %d: %v, want ErrConfig", r, err)
		}
	}
	// One server cannot hold three replicas: Setup says so rather than
	// creating fewer.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := Setup(ctx, env.js, StreamConfig{Replicas: 3}); err == nil {
		t.Error("Setup with 3 replicas on one server succeeded")
	}
}

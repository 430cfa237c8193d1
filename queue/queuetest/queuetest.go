package queuetest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/bulkhead-ai/bulkhead/models/testkit"
	"github.com/bulkhead-ai/bulkhead/queue"
)

// Server starts an in-process NATS server with JetStream on a free port,
// storing in a temporary directory of t, and shuts it down when t ends.
func Server(t testing.TB) *queue.Server {
	t.Helper()
	srv, err := queue.StartServer(queue.ServerConfig{Port: -1, StoreDir: t.TempDir()})
	if err != nil {
		t.Fatalf("nats server: %v", err)
	}
	t.Cleanup(srv.Shutdown)
	return srv
}

// Conn opens a client connection to url, closed when t ends.
func Conn(t testing.TB, url string) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatalf("nats connect %s: %v", url, err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// JetStream opens a client connection to url, closed when t ends, and a
// JetStream context on it.
func JetStream(t testing.TB, url string) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc := Conn(t, url)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("jetstream: %v", err)
	}
	return nc, js
}

// WaitWatched waits, up to 10 s, until the stream behind KV bucket has a
// consumer: a watch started on another goroutine (such as the edge's
// ReleaseEnded, which sees only records written after its watch began) is
// then in place, and a record the test writes next reaches it.
func WaitWatched(t testing.TB, js jetstream.JetStream, bucket string) {
	t.Helper()
	testkit.Poll(t, 10*time.Second, func() error { return Watched(js, bucket) })
}

// Watched is nil once the stream behind KV bucket has a consumer.
func Watched(js jetstream.JetStream, bucket string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	s, err := js.Stream(ctx, "KV_"+bucket)
	if err != nil {
		return err
	}
	if s.CachedInfo().State.Consumers == 0 {
		return fmt.Errorf("no watch of bucket %s yet", bucket)
	}
	return nil
}

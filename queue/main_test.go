package queue

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/bulkhead-ai/bulkhead/models/testkit"
)

// TestMain fails the run if goroutines outlive the tests (servers, clients
// and subscriptions must all be shut down).
func TestMain(m *testing.M) { testkit.Main(m) }

type testEnv struct {
	srv *Server
	nc  *nats.Conn
	js  jetstream.JetStream
}

// startEnv runs an embedded server on a random port with the stream and
// bucket set up by cfg, and a client connection; all closed at cleanup.
func startEnv(t testing.TB, cfg StreamConfig) *testEnv {
	t.Helper()
	srv, err := StartServer(ServerConfig{Port: -1, StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	nc, js := connectJS(t, srv.ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := Setup(ctx, js, cfg); err != nil {
		t.Fatal(err)
	}
	return &testEnv{srv: srv, nc: nc, js: js}
}

// connectJS connects to url (one or more servers) until the test ends.
func connectJS(t testing.TB, url string) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}

func testJob(id string) *Job {
	return &Job{
		ID: id, Tenant: "tenant-a", Model: "@cf/test/model", Prompt: "Once upon a time",
		MaxTokens: 8, Reply: ReplySubject(id), Deadline: time.Now().Add(time.Minute),
	}
}

package queuetest

import (
	"context"
	"testing"
	"time"

	"github.com/bulkhead-ai/bulkhead/models/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m) }

func TestServerServesJetStream(t *testing.T) {
	srv := Server(t)
	nc, js := JetStream(t, srv.ClientURL())
	if !nc.IsConnected() {
		t.Fatalf("connection to %s is not connected", srv.ClientURL())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.AccountInfo(ctx); err != nil {
		t.Fatalf("JetStream account info: %v", err)
	}
	other := Conn(t, srv.ClientURL())
	if !other.IsConnected() {
		t.Fatal("second connection is not connected")
	}
}

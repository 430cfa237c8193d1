package main

import (
	"net"
	"testing"
)

// TestStopsCleanlyWithSilentConnection: a connection that is open but has
// sent no request (a client cancelled mid-dial leaves these) does not make
// dev's shutdown fail once the drain is over: it exits 0 (net/http's
// Shutdown waits 5s for such a connection's first request).
func TestStopsCleanlyWithSilentConnection(t *testing.T) {
	if testing.Short() {
		t.Skip("starts dev")
	}
	d := startDev(t)
	c, err := net.Dial("tcp", d.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	d.node.stop(t) // exit 0, within 30s
}

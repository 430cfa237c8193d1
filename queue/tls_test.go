package queue

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// selfSigned writes a CA-less self-signed certificate for 127.0.0.1 and
// returns its TLS config and the PEM file clients trust.
func selfSigned(t *testing.T) (*tls.Config, string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "bulkhead-nats"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}, MinVersion: tls.VersionTLS12}, path
}

// TestTLSAndAuth: a server with TLS and role credentials takes a client
// that trusts its certificate and presents a role's key, and refuses a
// client without credentials and one that does not trust its certificate.
func TestTLSAndAuth(t *testing.T) {
	cfg, ca := selfSigned(t)
	a, err := NewAuth()
	if err != nil {
		t.Fatal(err)
	}
	srv, err := StartServer(ServerConfig{Port: -1, StoreDir: t.TempDir(), Auth: a, TLS: cfg})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	url := srv.ClientURL()
	tests := []struct {
		name string
		opts []nats.Option
		ok   bool
	}{
		{"TLS and credentials", append(a.Credentials(RoleEdge).Options(), nats.RootCAs(ca)), true},
		{"TLS without credentials", []nats.Option{nats.RootCAs(ca)}, false},
		{"credentials without trusting the server", a.Credentials(RoleEdge).Options(), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			nc, err := nats.Connect(url, append(tc.opts, nats.MaxReconnects(0), nats.Timeout(2*time.Second))...)
			if err == nil {
				defer nc.Close()
			}
			if tc.ok != (err == nil) {
				t.Fatalf("connect: %v, want ok %v", err, tc.ok)
			}
			if err == nil && !nc.TLSRequired() {
				t.Fatal("connected without TLS")
			}
		})
	}
}

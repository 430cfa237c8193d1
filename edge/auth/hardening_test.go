package auth

import (
	"bytes"
	"errors"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestNumericDatesMustBeNumbers: exp, nbf and iat given as JSON strings are
// refused even though they hold a number and the signature verifies.
func TestNumericDatesMustBeNumbers(t *testing.T) {
	k := edKey("ed-1", 1)
	v, _ := newTestVerifier(t, Config{}, k)
	tests := []struct {
		name  string
		claim string
		value any
		ok    bool
	}{
		{"numbers", "", nil, true},
		{"exp as a string", "exp", "4102444800", false},
		{"nbf as a string", "nbf", "0", false},
		{"iat as a string", "iat", "1700000000", false},
		{"exp as a float", "exp", float64(testNow.Add(time.Hour).Unix()) + 0.5, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := goodClaims()
			if tc.claim != "" {
				c[tc.claim] = tc.value
			}
			_, err := v.Verify(sign(t, k, c))
			if tc.ok != (err == nil) {
				t.Fatalf("Verify = %v, want ok %v", err, tc.ok)
			}
			if err != nil && (!errors.Is(err, ErrUnauthenticated) || !strings.Contains(err.Error(), tc.claim)) {
				t.Fatalf("error %q does not wrap ErrUnauthenticated naming %s", err, tc.claim)
			}
		})
	}
}

// TestMaxLifetime: a token living longer than MaxLifetime (default 24 h) is
// refused, measured from iat, or from now without iat.
func TestMaxLifetime(t *testing.T) {
	k := edKey("ed-1", 1)
	def, _ := newTestVerifier(t, Config{}, k)
	short, _ := newTestVerifier(t, Config{MaxLifetime: time.Hour}, k)
	tests := []struct {
		name string
		v    *Verifier
		iat  *time.Time
		exp  time.Time
		ok   bool
	}{
		{"a day from iat", def, ptr(testNow.Add(-time.Minute)), testNow.Add(24*time.Hour - time.Minute), true},
		{"over a day from iat", def, ptr(testNow.Add(-time.Minute)), testNow.Add(25 * time.Hour), false},
		{"a year", def, ptr(testNow), testNow.Add(365 * 24 * time.Hour), false},
		{"no iat, a day from now", def, nil, testNow.Add(24 * time.Hour), true},
		{"no iat, two days from now", def, nil, testNow.Add(48 * time.Hour), false},
		{"configured one hour", short, ptr(testNow), testNow.Add(59 * time.Minute), true},
		{"configured one hour, two asked", short, ptr(testNow), testNow.Add(2 * time.Hour), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := goodClaims()
			delete(c, "iat")
			if tc.iat != nil {
				c["iat"] = tc.iat.Unix()
			}
			c["exp"] = tc.exp.Unix()
			_, err := tc.v.Verify(sign(t, k, c))
			if tc.ok != (err == nil) {
				t.Fatalf("Verify = %v, want ok %v", err, tc.ok)
			}
			if err != nil && !errors.Is(err, ErrUnauthenticated) {
				t.Fatalf("error %v does not wrap ErrUnauthenticated", err)
			}
		})
	}
	if err := (&Config{JWKSFile: "x", MaxLifetime: -time.Second}).Validate(); err == nil {
		t.Fatal("a negative MaxLifetime validated")
	}
}

func ptr[T any](v T) *T { return &v }

// syncBuf is a log destination tests read while the verifier writes.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) { s.mu.Lock(); defer s.mu.Unlock(); return s.b.Write(p) }
func (s *syncBuf) String() string              { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// TestJWKSReloadFailureReadiness: a JWKS file that stops reloading is logged,
// its last good keys keep verifying, and once StaleKeys has passed Ready
// reports the keys expired; a good file makes it ready again.
func TestJWKSReloadFailureReadiness(t *testing.T) {
	k := edKey("k1", 1)
	clk := &clock{t: testNow}
	path := jwksPath(t)
	writeJWKS(t, path, testNow, k)
	var logs syncBuf
	v, err := NewVerifier(slog.New(slog.NewTextHandler(&logs, nil)),
		Config{JWKSFile: path, ReloadEvery: time.Second, Now: clk.Now, StaleKeys: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if err := v.Ready(); err != nil {
		t.Fatalf("fresh verifier not ready: %v", err)
	}
	tests := []struct {
		name    string
		change  func()
		advance time.Duration
		ready   bool
	}{
		{"file removed: still ready on the last good keys", func() { os.Remove(path) }, time.Second, true},
		{"half an hour later", nil, 30 * time.Minute, true},
		{"past StaleKeys: keys expired", nil, 31 * time.Minute, false},
		{"file back: ready again", func() { writeJWKS(t, path, testNow.Add(2*time.Hour), k) }, time.Second, true},
		{"malformed file", func() {
			if err := os.WriteFile(path, []byte(`{"keys":[`), 0o644); err != nil {
				t.Fatal(err)
			}
			os.Chtimes(path, testNow.Add(3*time.Hour), testNow.Add(3*time.Hour))
		}, time.Second, true},
		{"malformed for over an hour", nil, 61 * time.Minute, false},
	}
	for _, tc := range tests {
		if tc.change != nil {
			tc.change()
		}
		clk.Add(tc.advance)
		err := v.Ready()
		if tc.ready != (err == nil) {
			t.Fatalf("%s: Ready = %v, want ready %v", tc.name, err, tc.ready)
		}
		if _, err := v.Verify(sign(t, k, goodClaimsAt(clk.Now()))); err != nil {
			t.Fatalf("%s: the last good key stopped verifying: %v", tc.name, err)
		}
	}
	if got := logs.String(); !strings.Contains(got, "JWKS reload failed") || !strings.Contains(got, "keys_expire") {
		t.Fatalf("reload failures not logged:\n%s", got)
	}
}

func goodClaimsAt(now time.Time) map[string]any {
	return map[string]any{"sub": "tenant-a", "scope": "ai:run", "iat": now.Add(-time.Minute).Unix(), "exp": now.Add(time.Hour).Unix()}
}

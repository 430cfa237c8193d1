package auth

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestDevKey(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "keys")
	k, err := LoadOrCreateDevKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	k.now = fixedNow
	t.Run("files and modes", func(t *testing.T) {
		st, err := os.Stat(filepath.Join(dir, DevKeyFile))
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != 0o600 {
			t.Fatalf("private key mode %v, want 0600", st.Mode().Perm())
		}
		data, err := os.ReadFile(k.JWKSPath())
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(data), `"d"`) || !strings.Contains(string(data), k.KeyID()) {
			t.Fatalf("JWKS %s: want the public key with kid %s only", data, k.KeyID())
		}
	})
	t.Run("reload keeps the key", func(t *testing.T) {
		k2, err := LoadOrCreateDevKey(dir)
		if err != nil {
			t.Fatal(err)
		}
		if k2.KeyID() != k.KeyID() {
			t.Fatalf("kid changed on reload: %s -> %s", k.KeyID(), k2.KeyID())
		}
	})
	t.Run("missing JWKS is rewritten", func(t *testing.T) {
		if err := os.Remove(k.JWKSPath()); err != nil {
			t.Fatal(err)
		}
		k2, err := LoadOrCreateDevKey(dir)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(k2.JWKSPath()); err != nil || k2.KeyID() != k.KeyID() {
			t.Fatalf("JWKS not restored (%v) or kid changed", err)
		}
	})
	t.Run("stale JWKS is rewritten", func(t *testing.T) {
		writeJWKS(t, k.JWKSPath(), testNow, edKey("stale", 9))
		if _, err := LoadOrCreateDevKey(dir); err != nil {
			t.Fatal(err)
		}
		keys, err := readJWKSFile(k.JWKSPath())
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := keys[k.KeyID()]; !ok || len(keys) != 1 {
			t.Fatalf("JWKS holds %d keys, want only %s", len(keys), k.KeyID())
		}
	})

	v, err := NewVerifier(nil, func() Config { c := k.VerifierConfig(); c.Now = fixedNow; return c }())
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		tenant  string
		scopes  []string
		models  []string
		ttl     time.Duration
		at      time.Time // verify time
		wantErr error     // from Mint (ErrDevKey) or Verify (ErrUnauthenticated)
	}{
		{name: "run token", tenant: "acme", scopes: []string{ScopeRun}, ttl: time.Hour, at: testNow},
		{name: "with models", tenant: "acme_2", scopes: []string{ScopeRun, ScopeRead}, models: []string{"llama"}, ttl: time.Hour, at: testNow},
		{name: "no scopes", tenant: "acme", ttl: time.Minute, at: testNow},
		{name: "expired", tenant: "acme", scopes: []string{ScopeRun}, ttl: time.Hour, at: testNow.Add(2 * time.Hour), wantErr: ErrUnauthenticated},
		{name: "bad tenant", tenant: "ac me", ttl: time.Hour, wantErr: ErrDevKey},
		{name: "empty tenant", tenant: "", ttl: time.Hour, wantErr: ErrDevKey},
		{name: "zero ttl", tenant: "acme", ttl: 0, wantErr: ErrDevKey},
		{name: "ttl too long", tenant: "acme", ttl: MaxDevTTL + time.Second, wantErr: ErrDevKey},
		{name: "bad scope", tenant: "acme", scopes: []string{"ai run"}, ttl: time.Hour, wantErr: ErrDevKey},
		{name: "bad model", tenant: "acme", models: []string{""}, ttl: time.Hour, wantErr: ErrDevKey},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tok, err := k.Mint(tc.tenant, tc.scopes, tc.models, tc.ttl)
			if errors.Is(tc.wantErr, ErrDevKey) {
				if !errors.Is(err, ErrDevKey) {
					t.Fatalf("Mint = %v, want ErrDevKey", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			vt, err := NewVerifier(nil, Config{JWKSFile: k.JWKSPath(), Issuer: DevIssuer, Now: func() time.Time { return tc.at }})
			if err != nil {
				t.Fatal(err)
			}
			p, err := vt.Verify(tok)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("Verify = %v, want %v", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if p.Tenant != tc.tenant || !slices.Equal(p.Scopes, tc.scopes) || !slices.Equal(p.Models, tc.models) {
				t.Fatalf("principal %+v, want tenant %q scopes %q models %q", p, tc.tenant, tc.scopes, tc.models)
			}
			if _, err := v.Verify(tok); err != nil {
				t.Fatalf("VerifierConfig verifier refused: %v", err)
			}
		})
	}
	t.Run("other dev key refused", func(t *testing.T) {
		other, err := LoadOrCreateDevKey(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		other.now = fixedNow
		tok, err := other.Mint("acme", []string{ScopeRun}, nil, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := v.Verify(tok); !errors.Is(err, ErrUnauthenticated) {
			t.Fatalf("token of another dev key: %v, want ErrUnauthenticated", err)
		}
	})
}

func TestDevKeyRefusals(t *testing.T) {
	tests := []struct {
		name  string
		setup func(t *testing.T, dir string)
		want  string
	}{
		{name: "world-readable key", setup: func(t *testing.T, dir string) {
			if _, err := LoadOrCreateDevKey(dir); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(filepath.Join(dir, DevKeyFile), 0o644); err != nil {
				t.Fatal(err)
			}
		}, want: "chmod 600"},
		{name: "not PEM", setup: func(t *testing.T, dir string) {
			if err := os.WriteFile(filepath.Join(dir, DevKeyFile), []byte("hello"), 0o600); err != nil {
				t.Fatal(err)
			}
		}, want: "not a PEM"},
		{name: "not PKCS8", setup: func(t *testing.T, dir string) {
			data := "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"
			if err := os.WriteFile(filepath.Join(dir, DevKeyFile), []byte(data), 0o600); err != nil {
				t.Fatal(err)
			}
		}, want: "PKCS#8"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			tc.setup(t, dir)
			_, err := LoadOrCreateDevKey(dir)
			if !errors.Is(err, ErrDevKey) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("LoadOrCreateDevKey = %v, want ErrDevKey mentioning %q", err, tc.want)
			}
		})
	}
	t.Run("empty dir name", func(t *testing.T) {
		if _, err := LoadOrCreateDevKey(""); !errors.Is(err, ErrDevKey) {
			t.Fatalf("got %v", err)
		}
	})
}

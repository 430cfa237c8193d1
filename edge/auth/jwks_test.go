package auth

import (
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestParseJWKS(t *testing.T) {
	ed := edKey("ed", 1)
	ec := ecKey(t, "ec")
	rs := rsaKey("rs")
	tests := []struct {
		name     string
		doc      string
		wantKids []string
		wantErr  string
	}{
		{name: "three types", doc: `{"keys":[` + js(ed.pub) + `,` + js(ec.pub) + `,` + js(rs.pub) + `]}`, wantKids: []string{"ed", "ec", "rs"}},
		{name: "empty set", doc: `{"keys":[]}`},
		{name: "enc key skipped", doc: `{"keys":[{"kty":"RSA","kid":"e","use":"enc","n":"AQ","e":"AQAB"}]}`},
		{name: "alg matches", doc: `{"keys":[{"kty":"OKP","crv":"Ed25519","kid":"a","alg":"EdDSA","x":"` + ed.pub.X + `"}]}`, wantKids: []string{"a"}},
		{name: "not json", doc: `keys`, wantErr: "not a JSON"},
		{name: "no keys member", doc: `{}`, wantErr: "no \"keys\""},
		{name: "missing kid", doc: `{"keys":[{"kty":"OKP","crv":"Ed25519","x":"` + ed.pub.X + `"}]}`, wantErr: "kid"},
		{name: "duplicate kid", doc: `{"keys":[` + js(ed.pub) + `,` + js(ed.pub) + `]}`, wantErr: "duplicate kid"},
		{name: "private member", doc: `{"keys":[{"kty":"OKP","crv":"Ed25519","kid":"a","x":"` + ed.pub.X + `","d":"AAAA"}]}`, wantErr: "private"},
		{name: "oct key", doc: `{"keys":[{"kty":"oct","kid":"a"}]}`, wantErr: "symmetric"},
		{name: "unknown kty", doc: `{"keys":[{"kty":"XYZ","kid":"a"}]}`, wantErr: "unsupported kty"},
		{name: "X25519 curve", doc: `{"keys":[{"kty":"OKP","crv":"X25519","kid":"a","x":"` + ed.pub.X + `"}]}`, wantErr: "curve"},
		{name: "short x", doc: `{"keys":[{"kty":"OKP","crv":"Ed25519","kid":"a","x":"AAAA"}]}`, wantErr: "bytes"},
		{name: "padded base64", doc: `{"keys":[{"kty":"OKP","crv":"Ed25519","kid":"a","x":"` + ed.pub.X + `="}]}`, wantErr: "base64url"},
		{name: "P-384", doc: `{"keys":[{"kty":"EC","crv":"P-384","kid":"a","x":"` + ec.pub.X + `","y":"` + ec.pub.Y + `"}]}`, wantErr: "curve"},
		{name: "point off curve", doc: `{"keys":[{"kty":"EC","crv":"P-256","kid":"a","x":"` + ec.pub.X + `","y":"` + ec.pub.X + `"}]}`, wantErr: "not on P-256"},
		{name: "small RSA", doc: `{"keys":[{"kty":"RSA","kid":"a","n":"` + b64u(make([]byte, 128)) + `","e":"AQAB"}]}`, wantErr: "modulus"},
		{name: "RSA even exponent", doc: `{"keys":[{"kty":"RSA","kid":"a","n":"` + rs.pub.N + `","e":"Ag"}]}`, wantErr: "exponent"},
		{name: "alg mismatch", doc: `{"keys":[{"kty":"OKP","crv":"Ed25519","kid":"a","alg":"RS256","x":"` + ed.pub.X + `"}]}`, wantErr: "does not fit"},
		{name: "too big", doc: `{"keys":[],"pad":"` + strings.Repeat("x", maxJWKSBytes) + `"}`, wantErr: "larger than"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			keys, err := parseJWKS([]byte(tc.doc))
			if tc.wantErr != "" {
				if !errors.Is(err, ErrJWKS) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("parseJWKS = %v, want ErrJWKS mentioning %q", err, tc.wantErr)
				}
				if strings.Contains(err.Error(), ed.pub.X) {
					t.Fatalf("error leaks key material: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(keys) != len(tc.wantKids) {
				t.Fatalf("got %d keys, want %v", len(keys), tc.wantKids)
			}
			for _, kid := range tc.wantKids {
				if _, ok := keys[kid]; !ok {
					t.Fatalf("kid %q missing", kid)
				}
			}
		})
	}
}

func js(k jwk) string {
	var b strings.Builder
	b.WriteString(`{"kty":"` + k.Kty + `","kid":"` + k.Kid + `"`)
	for _, f := range [][2]string{{"crv", k.Crv}, {"x", k.X}, {"y", k.Y}, {"n", k.N}, {"e", k.E}} {
		if f[1] != "" {
			b.WriteString(`,"` + f[0] + `":"` + f[1] + `"`)
		}
	}
	b.WriteString("}")
	return b.String()
}

// clock is a settable test clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func TestJWKSRotation(t *testing.T) {
	k1, k2 := edKey("k1", 1), edKey("k2", 2)
	ec := ecKey(t, "k3")
	clk := &clock{t: testNow}
	path := jwksPath(t)
	writeJWKS(t, path, testNow, k1)
	v, err := NewVerifier(nil, Config{JWKSFile: path, ReloadEvery: time.Second, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	accepts := func(k testKey) bool {
		t.Helper()
		_, err := v.Verify(sign(t, k, goodClaims()))
		if err != nil && !errors.Is(err, ErrUnauthenticated) {
			t.Fatalf("error %v does not wrap ErrUnauthenticated", err)
		}
		return err == nil
	}
	steps := []struct {
		name      string
		write     func() // nil: no change
		advance   time.Duration
		accept    []testKey
		refuse    []testKey
		wantKeysE bool
	}{
		{name: "initial", accept: []testKey{k1}, refuse: []testKey{k2, ec}},
		{name: "new kid added, not yet rechecked", write: func() { writeJWKS(t, path, testNow.Add(time.Minute), k1, k2) },
			advance: 100 * time.Millisecond, accept: []testKey{k1}, refuse: []testKey{k2}},
		{name: "new kid accepted after reload", advance: time.Second, accept: []testKey{k1, k2}},
		{name: "old kid removed", write: func() { writeJWKS(t, path, testNow.Add(2*time.Minute), k2, ec) },
			advance: time.Second, accept: []testKey{k2, ec}, refuse: []testKey{k1}},
		{name: "broken file keeps last good keys", write: func() {
			if err := os.WriteFile(path, []byte(`{"keys":[`), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Chtimes(path, testNow.Add(3*time.Minute), testNow.Add(3*time.Minute)); err != nil {
				t.Fatal(err)
			}
		}, advance: time.Second, accept: []testKey{k2, ec}, refuse: []testKey{k1}, wantKeysE: true},
		{name: "fixed file loads", write: func() { writeJWKS(t, path, testNow.Add(4*time.Minute), k1) },
			advance: time.Second, accept: []testKey{k1}, refuse: []testKey{k2, ec}},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			if s.write != nil {
				s.write()
			}
			clk.Add(s.advance)
			for _, k := range s.accept {
				if !accepts(k) {
					t.Errorf("key %s refused", k.kid)
				}
			}
			for _, k := range s.refuse {
				if accepts(k) {
					t.Errorf("key %s accepted", k.kid)
				}
			}
			if got := v.KeysError() != nil; got != s.wantKeysE {
				t.Errorf("KeysError = %v, want error: %v", v.KeysError(), s.wantKeysE)
			}
		})
	}
	t.Run("explicit Reload", func(t *testing.T) {
		writeJWKS(t, path, testNow.Add(4*time.Minute), k2) // same mtime as before
		if err := v.Reload(); err != nil {
			t.Fatal(err)
		}
		if !accepts(k2) || accepts(k1) {
			t.Fatal("Reload did not swap the keys")
		}
	})
}

func TestJWKSConcurrentReload(t *testing.T) {
	k1, k2 := edKey("k1", 1), edKey("k2", 2)
	path := jwksPath(t)
	writeJWKS(t, path, testNow, k1, k2)
	v, err := NewVerifier(nil, Config{JWKSFile: path, ReloadEvery: time.Nanosecond, Now: time.Now})
	if err != nil {
		t.Fatal(err)
	}
	c := goodClaims()
	c["iat"], c["nbf"], c["exp"] = time.Now().Unix(), time.Now().Unix(), time.Now().Add(time.Hour).Unix()
	tok := sign(t, k1, c)
	doc := []byte(`{"keys":[` + js(k1.pub) + `,` + js(k2.pub) + `]}`)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				if g == 0 && i%10 == 0 {
					// Rewrite the same keys with a new mtime: every reload must keep k1.
					at := testNow.Add(time.Duration(i) * time.Second)
					if err := writeFileAtomic(path, doc, 0o644); err != nil {
						errs <- err
						return
					}
					if err := os.Chtimes(path, at, at); err != nil {
						errs <- err
						return
					}
				}
				if _, err := v.Verify(tok); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("Verify during reloads: %v", err)
	}
}

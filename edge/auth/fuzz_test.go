package auth

import (
	"errors"
	"strings"
	"testing"

	"github.com/golang-jwt/jwt/v5"
)

// FuzzVerify feeds arbitrary strings to Verify: it must never panic, every
// refusal must wrap ErrUnauthenticated, and the only strings it may accept are
// the tokens genuinely signed here (any other accepted string is a forgery).
func FuzzVerify(f *testing.F) {
	ed := edKey("fz", 1) // deterministic: Ed25519 signatures are too
	secret := []byte(strings.Repeat("fuzz-secret-", 3))
	path := jwksPath(f)
	writeJWKS(f, path, testNow, ed)
	v, err := NewVerifier(nil, Config{JWKSFile: path, HS256Secret: secret, Now: fixedNow})
	if err != nil {
		f.Fatal(err)
	}
	valid := map[string]bool{
		sign(f, ed, goodClaims()):                                true,
		signHS256(f, secret, "", goodClaims()):                   true,
		sign(f, ed, with(goodClaims(), "models", []string{"m"})): true,
	}
	for tok := range valid {
		f.Add(tok)
	}
	f.Add("")
	f.Add("a.b.c")
	f.Add(rawToken(f, map[string]any{"alg": "none"}, goodClaims(), nil))
	f.Add(rawToken(f, map[string]any{"alg": "EdDSA", "kid": "fz"}, goodClaims(), make([]byte, 64)))
	f.Add(rawToken(f, map[string]any{"alg": "HS256", "kid": []int{1}}, jwt.MapClaims{"sub": 1}, []byte("x")))
	f.Add(sign(f, ed, with(goodClaims(), "exp", 1e300)))
	f.Add(sign(f, ed, with(goodClaims(), "aud", map[string]any{"a": 1})))
	f.Fuzz(func(t *testing.T, tok string) {
		p, err := v.Verify(tok)
		if err != nil {
			if !errors.Is(err, ErrUnauthenticated) {
				t.Fatalf("error %v does not wrap ErrUnauthenticated", err)
			}
			if p.Tenant != "" {
				t.Fatalf("refused token yielded tenant %q", p.Tenant)
			}
			return
		}
		if !valid[strings.TrimSpace(tok)] {
			t.Fatalf("accepted a token that was never signed: %q (tenant %q)", tok, p.Tenant)
		}
	})
}

func BenchmarkVerify(b *testing.B) {
	ed := edKey("k", 1)
	ec := ecKey(b, "e")
	rs := rsaKey("r")
	path := jwksPath(b)
	writeJWKS(b, path, testNow, ed, ec, rs)
	v, err := NewVerifier(nil, Config{JWKSFile: path, Now: fixedNow})
	if err != nil {
		b.Fatal(err)
	}
	for _, k := range []testKey{ed, ec, rs} {
		tok := sign(b, k, goodClaims())
		b.Run(k.alg, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := v.Verify(tok); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

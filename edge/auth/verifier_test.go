package auth

import (
	"encoding/base64"
	"errors"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

func newTestVerifier(t testing.TB, cfg Config, keys ...testKey) (*Verifier, string) {
	t.Helper()
	path := ""
	if len(keys) > 0 {
		path = jwksPath(t)
		writeJWKS(t, path, testNow, keys...)
		cfg.JWKSFile = path
	}
	if cfg.Now == nil {
		cfg.Now = fixedNow
	}
	v, err := NewVerifier(nil, cfg)
	if err != nil {
		t.Fatalf("NewVerifier: %v", err)
	}
	return v, path
}

func with(c jwt.MapClaims, k string, v any) jwt.MapClaims {
	c[k] = v
	return c
}

func without(c jwt.MapClaims, k string) jwt.MapClaims {
	delete(c, k)
	return c
}

func TestVerify(t *testing.T) {
	ed := edKey("ed-1", 1)
	ec := ecKey(t, "ec-1")
	rs := rsaKey("rsa-1")
	other := edKey("ed-1", 2) // same kid, different key: not in the file
	v, path := newTestVerifier(t, Config{Audience: "bulkhead", Issuer: "https://issuer.example"}, ed, ec, rs)
	withAudIss := func(c jwt.MapClaims) jwt.MapClaims {
		c["aud"] = "bulkhead"
		c["iss"] = "https://issuer.example"
		return c
	}
	good := func() jwt.MapClaims { return withAudIss(goodClaims()) }

	// Public key bytes and the JWKS file itself are what an attacker would try
	// as an HMAC secret (alg confusion).
	pubBytes, _ := base64.RawURLEncoding.DecodeString(ed.pub.X)
	noKid := ed
	noKid.kid = ""
	unknownKid := ed
	unknownKid.kid = "ed-9"
	ecWithEdKid := ec
	ecWithEdKid.kid = "ed-1" // ES256 token naming an Ed25519 key

	tampered := func() string {
		tok := sign(t, ed, good())
		parts := strings.Split(tok, ".")
		c := good()
		c["sub"] = "tenant-b"
		forged := rawToken(t, map[string]any{"alg": "EdDSA", "kid": "ed-1", "typ": "JWT"}, c, nil)
		return strings.Split(forged, ".")[0] + "." + strings.Split(forged, ".")[1] + "." + parts[2]
	}

	tests := []struct {
		name       string
		token      string
		wantTenant string
		wantErr    string // substring of the reason; "" means success
	}{
		{name: "valid EdDSA", token: sign(t, ed, good()), wantTenant: "tenant-a"},
		{name: "valid ES256", token: sign(t, ec, good()), wantTenant: "tenant-a"},
		{name: "valid RS256", token: sign(t, rs, good()), wantTenant: "tenant-a"},
		{name: "aud as array", token: sign(t, ed, with(good(), "aud", []string{"x", "bulkhead"})), wantTenant: "tenant-a"},
		{name: "expired within leeway", token: sign(t, ed, with(good(), "exp", testNow.Add(-10*time.Second).Unix())), wantTenant: "tenant-a"},
		{name: "expired", token: sign(t, ed, with(good(), "exp", testNow.Add(-time.Minute).Unix())), wantErr: "expired"},
		{name: "not yet valid", token: sign(t, ed, with(good(), "nbf", testNow.Add(time.Minute).Unix())), wantErr: "not valid yet"},
		{name: "issued in the future", token: sign(t, ed, with(good(), "iat", testNow.Add(time.Minute).Unix())), wantErr: "issued in the future"},
		{name: "missing exp", token: sign(t, ed, without(good(), "exp")), wantErr: "missing a required claim"},
		{name: "exp wrong type", token: sign(t, ed, with(good(), "exp", "tomorrow")), wantErr: "malformed"},
		{name: "missing sub", token: sign(t, ed, without(good(), "sub")), wantErr: "sub is missing"},
		{name: "sub bad charset", token: sign(t, ed, with(good(), "sub", "tenant/../b")), wantErr: "sub is missing"},
		{name: "sub too long", token: sign(t, ed, with(good(), "sub", strings.Repeat("a", MaxTenantLen+1))), wantErr: "sub is missing"},
		{name: "sub longest", token: sign(t, ed, with(good(), "sub", strings.Repeat("a", MaxTenantLen))), wantTenant: strings.Repeat("a", MaxTenantLen)},
		{name: "wrong audience", token: sign(t, ed, with(good(), "aud", "someone-else")), wantErr: "audience"},
		{name: "missing audience", token: sign(t, ed, without(good(), "aud")), wantErr: "missing a required claim"},
		{name: "wrong issuer", token: sign(t, ed, with(good(), "iss", "https://evil.example")), wantErr: "issuer"},
		{name: "alg none", token: rawToken(t, map[string]any{"alg": "none", "kid": "ed-1"}, good(), nil), wantErr: "not allowed"},
		{name: "alg none unsigned with key", token: rawToken(t, map[string]any{"alg": "none"}, good(), []byte("x")), wantErr: "not allowed"},
		{name: "HS256 with public key as secret", token: signHS256(t, pubBytes, "ed-1", good()), wantErr: "not allowed"},
		{name: "HS256 with JWKS text as secret", token: signHS256(t, []byte(`{"kty":"OKP","crv":"Ed25519","x":"`+ed.pub.X+`"}`), "ed-1", good()), wantErr: "not allowed"},
		{name: "PS256 not allowed", token: rawToken(t, map[string]any{"alg": "PS256", "kid": "rsa-1"}, good(), []byte("sig")), wantErr: "not allowed"},
		{name: "wrong key same kid", token: sign(t, other, good()), wantErr: "signature is invalid"},
		{name: "unknown kid", token: sign(t, unknownKid, good()), wantErr: "unknown key"},
		{name: "missing kid", token: sign(t, noKid, good()), wantErr: "unknown key"},
		{name: "key type confusion", token: sign(t, ecWithEdKid, good()), wantErr: "does not match its key"},
		{name: "tampered payload", token: tampered(), wantErr: "signature is invalid"},
		{name: "crit header", token: func() string {
			tok := jwt.NewWithClaims(jwt.SigningMethodEdDSA, good())
			tok.Header["kid"] = "ed-1"
			tok.Header["crit"] = []string{"exp"}
			s, _ := tok.SignedString(ed.priv)
			return s
		}(), wantErr: "critical"},
		{name: "scope wrong type", token: sign(t, ed, with(good(), "scope", 7)), wantErr: "malformed"},
		{name: "models wrong type", token: sign(t, ed, with(good(), "models", "llama")), wantErr: "malformed"},
		{name: "models empty list", token: sign(t, ed, with(good(), "models", []string{})), wantErr: "models claim is an empty list"},
		{name: "models bad name", token: sign(t, ed, with(good(), "models", []string{"a b"})), wantErr: "models claim is malformed"},
		{name: "empty", token: "", wantErr: "empty token"},
		{name: "garbage", token: "not.a.jwt", wantErr: "malformed"},
		{name: "two segments", token: "abc.def", wantErr: "malformed"},
		{name: "oversized", token: strings.Repeat("a", MaxTokenBytes+1), wantErr: "longer than"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := v.Verify(tc.token)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("Verify: %v", err)
				}
				if p.Tenant != tc.wantTenant {
					t.Fatalf("tenant %q, want %q", p.Tenant, tc.wantTenant)
				}
				return
			}
			if err == nil {
				t.Fatalf("Verify accepted the token (tenant %q)", p.Tenant)
			}
			if !errors.Is(err, ErrUnauthenticated) {
				t.Fatalf("error %v does not wrap ErrUnauthenticated", err)
			}
			if !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error %q, want it to mention %q", err, tc.wantErr)
			}
			if p.Tenant != "" {
				t.Fatalf("refused token still yielded tenant %q", p.Tenant)
			}
			// Safe to show: no key material, no token pieces.
			for _, secret := range []string{ed.pub.X, ec.pub.X, path} {
				if strings.Contains(err.Error(), secret) {
					t.Fatalf("error %q leaks %q", err, secret)
				}
			}
			for _, part := range strings.Split(tc.token, ".") {
				if len(part) > 8 && strings.Contains(err.Error(), part) {
					t.Fatalf("error %q echoes the token", err)
				}
			}
		})
	}
}

func TestVerifyPrincipal(t *testing.T) {
	ed := edKey("k", 1)
	v, _ := newTestVerifier(t, Config{}, ed)
	c := goodClaims()
	c["scope"] = " ai:run  billing:read custom:x "
	c["models"] = []string{"llama-3-8b", "@cf/qwen/qwen2-0.5b"}
	p, err := v.Verify(sign(t, ed, c))
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"ai:run", "billing:read", "custom:x"}; !slices.Equal(p.Scopes, want) {
		t.Fatalf("scopes %q, want %q", p.Scopes, want)
	}
	if want := []string{"llama-3-8b", "@cf/qwen/qwen2-0.5b"}; !slices.Equal(p.Models, want) {
		t.Fatalf("models %q, want %q", p.Models, want)
	}
	if p.Key != "" {
		t.Fatalf("key %q without a key claim", p.Key)
	}
	// The key claim names one of the tenant's API keys; a malformed one
	// refuses the token.
	c["key"] = "ci-runner_2"
	if p, err := v.Verify(sign(t, ed, c)); err != nil || p.Key != "ci-runner_2" || p.Tenant != "tenant-a" {
		t.Fatalf("with a key claim: %+v, %v", p, err)
	}
	for _, bad := range []any{"", "a.b", "a b", strings.Repeat("k", 65), 7, []string{"x"}} {
		c["key"] = bad
		if p, err := v.Verify(sign(t, ed, c)); !errors.Is(err, ErrUnauthenticated) {
			t.Errorf("key claim %v: %+v, %v; want ErrUnauthenticated", bad, p, err)
		}
	}
}

func TestHS256(t *testing.T) {
	secret := []byte(strings.Repeat("s3cret-", 5))
	ed := edKey("ed-1", 1)
	pubBytes, _ := base64.RawURLEncoding.DecodeString(ed.pub.X)
	tests := []struct {
		name    string
		cfg     Config
		keys    []testKey
		token   string
		wantErr bool
	}{
		{name: "secret configured", cfg: Config{HS256Secret: secret}, token: signHS256(t, secret, "", goodClaims())},
		{name: "secret and JWKS", cfg: Config{HS256Secret: secret}, keys: []testKey{ed}, token: signHS256(t, secret, "ed-1", goodClaims())},
		{name: "JWKS token with secret configured", cfg: Config{HS256Secret: secret}, keys: []testKey{ed}, token: sign(t, ed, goodClaims())},
		{name: "wrong secret", cfg: Config{HS256Secret: secret}, token: signHS256(t, []byte(strings.Repeat("x", 40)), "", goodClaims()), wantErr: true},
		{name: "public key as secret when HS256 is on", cfg: Config{HS256Secret: secret}, keys: []testKey{ed}, token: signHS256(t, pubBytes, "ed-1", goodClaims()), wantErr: true},
		{name: "HS256 only: EdDSA refused", cfg: Config{HS256Secret: secret}, token: sign(t, ed, goodClaims()), wantErr: true},
		{name: "allowlist without HS256", cfg: Config{HS256Secret: secret, Algorithms: []string{AlgEdDSA}}, keys: []testKey{ed}, token: signHS256(t, secret, "", goodClaims()), wantErr: true},
		{name: "allowlist without EdDSA", cfg: Config{Algorithms: []string{AlgES256}}, keys: []testKey{ed}, token: sign(t, ed, goodClaims()), wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v, _ := newTestVerifier(t, tc.cfg, tc.keys...)
			p, err := v.Verify(tc.token)
			if tc.wantErr {
				if err == nil || !errors.Is(err, ErrUnauthenticated) {
					t.Fatalf("Verify = %+v, %v; want ErrUnauthenticated", p, err)
				}
				return
			}
			if err != nil || p.Tenant != "tenant-a" {
				t.Fatalf("Verify = %+v, %v", p, err)
			}
		})
	}
}

func TestAuthenticate(t *testing.T) {
	ed := edKey("k", 1)
	v, _ := newTestVerifier(t, Config{}, ed)
	tok := sign(t, ed, goodClaims())
	tests := []struct {
		name    string
		headers []string
		wantErr string
	}{
		{name: "bearer", headers: []string{"Bearer " + tok}},
		{name: "scheme case-insensitive", headers: []string{"bearer " + tok}},
		{name: "missing", wantErr: "missing Authorization"},
		{name: "basic", headers: []string{"Basic dXNlcjpwYXNz"}, wantErr: "not a Bearer"},
		{name: "no scheme", headers: []string{tok}, wantErr: "not a Bearer"},
		{name: "empty bearer", headers: []string{"Bearer "}, wantErr: "empty token"},
		{name: "two headers", headers: []string{"Bearer " + tok, "Bearer " + tok}, wantErr: "more than one"},
		{name: "bad token", headers: []string{"Bearer x.y.z"}, wantErr: "malformed"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest("POST", "/ai/run/x", nil)
			for _, h := range tc.headers {
				r.Header.Add("Authorization", h)
			}
			p, err := v.Authenticate(r)
			if tc.wantErr == "" {
				if err != nil || p.Tenant != "tenant-a" {
					t.Fatalf("Authenticate = %+v, %v", p, err)
				}
				return
			}
			if !errors.Is(err, ErrUnauthenticated) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Authenticate error %v, want ErrUnauthenticated mentioning %q", err, tc.wantErr)
			}
		})
	}
}

func TestPrincipalChecks(t *testing.T) {
	p := Principal{Tenant: "t", Scopes: []string{ScopeRead}, Models: []string{"llama"}}
	all := Principal{Tenant: "t", Scopes: []string{ScopeRun, ScopeRead}}
	tests := []struct {
		name      string
		err       error
		forbidden bool
	}{
		{name: "scope granted", err: p.RequireScope(ScopeRead)},
		{name: "scope missing", err: p.RequireScope(ScopeRun), forbidden: true},
		{name: "billing missing", err: all.RequireScope(ScopeBillingRead), forbidden: true},
		{name: "empty scope never granted", err: p.RequireScope(""), forbidden: true},
		{name: "model allowed", err: p.RequireModel("llama")},
		{name: "model not in allowlist", err: p.RequireModel("qwen"), forbidden: true},
		{name: "no allowlist allows all", err: all.RequireModel("qwen")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.forbidden != (tc.err != nil) {
				t.Fatalf("err = %v, want forbidden=%v", tc.err, tc.forbidden)
			}
			if tc.forbidden && (!errors.Is(tc.err, ErrForbidden) || errors.Is(tc.err, ErrUnauthenticated)) {
				t.Fatalf("err = %v, want ErrForbidden only", tc.err)
			}
		})
	}
}

func TestConfigValidate(t *testing.T) {
	secret := []byte(strings.Repeat("k", 32))
	tests := []struct {
		name    string
		cfg     Config
		wantErr string
	}{
		{name: "jwks", cfg: Config{JWKSFile: "x"}},
		{name: "secret", cfg: Config{HS256Secret: secret}},
		{name: "nothing", cfg: Config{}, wantErr: "JWKSFile or HS256Secret"},
		{name: "short secret", cfg: Config{HS256Secret: secret[:31]}, wantErr: "HS256Secret"},
		{name: "none alg", cfg: Config{JWKSFile: "x", Algorithms: []string{"none"}}, wantErr: "Algorithms"},
		{name: "HS256 without secret", cfg: Config{JWKSFile: "x", Algorithms: []string{AlgHS256}}, wantErr: "HS256Secret is empty"},
		{name: "EdDSA without JWKS", cfg: Config{HS256Secret: secret, Algorithms: []string{AlgEdDSA}}, wantErr: "JWKSFile is empty"},
		{name: "unknown alg", cfg: Config{JWKSFile: "x", Algorithms: []string{"ES512"}}, wantErr: "Algorithms"},
		{name: "negative leeway", cfg: Config{JWKSFile: "x", Leeway: -time.Second}, wantErr: "Leeway"},
		{name: "huge leeway", cfg: Config{JWKSFile: "x", Leeway: time.Hour}, wantErr: "Leeway"},
		{name: "negative reload", cfg: Config{JWKSFile: "x", ReloadEvery: -1}, wantErr: "ReloadEvery"},
		{name: "bad audience", cfg: Config{JWKSFile: "x", Audience: "a b"}, wantErr: "Audience"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Validate = %v, want mention of %q", err, tc.wantErr)
			}
		})
	}
	t.Run("missing file", func(t *testing.T) {
		_, err := NewVerifier(nil, Config{JWKSFile: jwksPath(t)})
		if !errors.Is(err, ErrJWKS) {
			t.Fatalf("NewVerifier = %v, want ErrJWKS", err)
		}
	})
}

package auth

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"math/big"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// testNow is the fixed clock of these tests.
var testNow = time.Date(2027, 3, 1, 12, 0, 0, 0, time.UTC)

func fixedNow() time.Time { return testNow }

// testKey is a signing key and its public JWK.
type testKey struct {
	kid  string
	alg  string
	priv crypto.Signer
	pub  jwk
}

func b64u(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

// edKey derives a deterministic Ed25519 key from seed.
func edKey(kid string, seed byte) testKey {
	s := sha256.Sum256([]byte{seed})
	priv := ed25519.NewKeyFromSeed(s[:])
	pub := priv.Public().(ed25519.PublicKey)
	return testKey{kid: kid, alg: AlgEdDSA, priv: priv,
		pub: jwk{Kty: "OKP", Crv: "Ed25519", X: b64u(pub), Kid: kid}}
}

func ecKey(t testing.TB, kid string) testKey {
	t.Helper()
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := priv.PublicKey.Bytes() // 0x04 || X || Y
	if err != nil {
		t.Fatal(err)
	}
	return testKey{kid: kid, alg: AlgES256, priv: priv,
		pub: jwk{Kty: "EC", Crv: "P-256", X: b64u(raw[1:33]), Y: b64u(raw[33:]), Kid: kid}}
}

// rsaPriv is generated once: 2048-bit generation is slow.
var rsaPriv = sync.OnceValue(func() *rsa.PrivateKey {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		panic(err)
	}
	return k
})

func rsaKey(kid string) testKey {
	priv := rsaPriv()
	return testKey{kid: kid, alg: AlgRS256, priv: priv,
		pub: jwk{Kty: "RSA", N: b64u(priv.N.Bytes()), E: b64u(big.NewInt(int64(priv.E)).Bytes()), Kid: kid}}
}

// writeJWKS writes keys to path and moves its mtime to at (so a reload is
// seen even on coarse-mtime file systems).
func writeJWKS(t testing.TB, path string, at time.Time, keys ...testKey) {
	t.Helper()
	doc := jwksDoc{Keys: []jwk{}}
	for _, k := range keys {
		doc.Keys = append(doc.Keys, k.pub)
	}
	data, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	if err := writeFileAtomic(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(path, at, at); err != nil {
		t.Fatal(err)
	}
}

func jwksPath(t testing.TB) string { return filepath.Join(t.TempDir(), "jwks.json") }

// goodClaims are valid claims at testNow; tests delete or change members.
func goodClaims() jwt.MapClaims {
	return jwt.MapClaims{
		"sub":   "tenant-a",
		"scope": "ai:run ai:read",
		"iat":   testNow.Add(-time.Minute).Unix(),
		"nbf":   testNow.Add(-time.Minute).Unix(),
		"exp":   testNow.Add(time.Hour).Unix(),
	}
}

// sign signs claims with k (kid header set unless k.kid is empty).
func sign(t testing.TB, k testKey, c jwt.MapClaims) string {
	t.Helper()
	var m jwt.SigningMethod
	switch k.alg {
	case AlgEdDSA:
		m = jwt.SigningMethodEdDSA
	case AlgES256:
		m = jwt.SigningMethodES256
	case AlgRS256:
		m = jwt.SigningMethodRS256
	default:
		t.Fatalf("alg %q", k.alg)
	}
	tok := jwt.NewWithClaims(m, c)
	if k.kid != "" {
		tok.Header["kid"] = k.kid
	}
	s, err := tok.SignedString(k.priv)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// signHS256 signs claims with an HMAC secret and an optional kid.
func signHS256(t testing.TB, secret []byte, kid string, c jwt.MapClaims) string {
	t.Helper()
	tok := jwt.NewWithClaims(jwt.SigningMethodHS256, c)
	if kid != "" {
		tok.Header["kid"] = kid
	}
	s, err := tok.SignedString(secret)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// rawToken assembles a token from a header and claims with the given
// signature bytes (for alg none and hand-made forgeries).
func rawToken(t testing.TB, header map[string]any, c jwt.MapClaims, sig []byte) string {
	t.Helper()
	h, err := json.Marshal(header)
	if err != nil {
		t.Fatal(err)
	}
	p, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	return b64u(h) + "." + b64u(p) + "." + b64u(sig)
}

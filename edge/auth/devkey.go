package auth

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/bulkhead-ai/bulkhead/queue"
)

// Files LoadOrCreateDevKey keeps in its directory.
const (
	DevKeyFile  = "dev-signing-key.pem" // PKCS#8 Ed25519 private key, mode 0600
	DevJWKSFile = "dev-jwks.json"       // its public half as a JWKS, mode 0644
	// DevIssuer is the iss claim of tokens minted by a DevKey.
	DevIssuer = "bulkhead-dev"
	// MaxDevTTL bounds a dev token's lifetime.
	MaxDevTTL = 366 * 24 * time.Hour
)

// ErrDevKey is wrapped by every error about the dev key files.
var ErrDevKey = errors.New("auth: dev key")

// DevKey is a local Ed25519 signing key for development and tests: the edge
// verifies its tokens through the JWKS file next to it.
type DevKey struct {
	dir  string
	priv ed25519.PrivateKey
	kid  string
	now  func() time.Time // tests replace it
}

// LoadOrCreateDevKey loads the key pair in dir, creating dir (0700), the
// private key (0600) and the JWKS on first use. A private key readable by
// group or others is refused. A missing or stale JWKS is rewritten from the
// private key.
func LoadOrCreateDevKey(dir string) (*DevKey, error) {
	if dir == "" {
		return nil, fmt.Errorf("%w: directory is empty", ErrDevKey)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrDevKey, err)
	}
	k := &DevKey{dir: dir, now: time.Now}
	keyPath := filepath.Join(dir, DevKeyFile)
	priv, err := readDevKey(keyPath)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if priv, err = createDevKey(keyPath); err != nil {
			return nil, err
		}
	case err != nil:
		return nil, err
	}
	k.priv = priv
	pub := ed25519JWK(priv.Public().(ed25519.PublicKey))
	k.kid = pub.Kid
	if keys, err := readJWKSFile(k.JWKSPath()); err == nil {
		if vk, ok := keys[k.kid]; ok && len(keys) == 1 && vk.alg == AlgEdDSA {
			return k, nil
		}
	}
	data, err := json.MarshalIndent(jwksDoc{Keys: []jwk{pub}}, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrDevKey, err)
	}
	if err := writeFileAtomic(k.JWKSPath(), append(data, '\n'), 0o644); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrDevKey, err)
	}
	return k, nil
}

func readDevKey(path string) (ed25519.PrivateKey, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err // ErrNotExist is handled by the caller
	}
	if st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("%w: %s is readable by group or others (mode %v); chmod 600 it", ErrDevKey, path, st.Mode().Perm())
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrDevKey, err)
	}
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "PRIVATE KEY" {
		return nil, fmt.Errorf("%w: %s is not a PEM PRIVATE KEY", ErrDevKey, path)
	}
	key, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%w: %s does not parse as PKCS#8", ErrDevKey, path)
	}
	priv, ok := key.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("%w: %s is not an Ed25519 key", ErrDevKey, path)
	}
	return priv, nil
}

func createDevKey(path string) (ed25519.PrivateKey, error) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrDevKey, err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrDevKey, err)
	}
	data := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
	if err := writeFileAtomic(path, data, 0o600); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrDevKey, err)
	}
	return priv, nil
}

func readJWKSFile(path string) (map[string]verifyKey, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return parseJWKS(data)
}

// writeFileAtomic writes through a temporary file and a rename, so a reader
// (a Verifier reloading the JWKS) never sees half a file.
func writeFileAtomic(path string, data []byte, perm os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // no-op after the rename
	if err := tmp.Chmod(perm); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// JWKSPath is the public key set to give the edge (Config.JWKSFile).
func (k *DevKey) JWKSPath() string { return filepath.Join(k.dir, DevJWKSFile) }

// KeyID is the kid of the key (its RFC 7638 thumbprint).
func (k *DevKey) KeyID() string { return k.kid }

// VerifierConfig is a Config that accepts this key's tokens.
func (k *DevKey) VerifierConfig() Config {
	return Config{JWKSFile: k.JWKSPath(), Issuer: DevIssuer}
}

// Mint signs a token for tenant with the given scopes and model allowlist
// (empty: all models), valid for ttl from now. It backs `bulkhead token`.
func (k *DevKey) Mint(tenant string, scopes []string, models []string, ttl time.Duration) (string, error) {
	return k.MintKey(tenant, "", scopes, models, ttl)
}

// MintKey is Mint for one of the tenant's API keys (the "key" claim; none
// when key is empty).
func (k *DevKey) MintKey(tenant, key string, scopes []string, models []string, ttl time.Duration) (string, error) {
	if key != "" && !queue.ValidKey(key) {
		return "", fmt.Errorf("%w: key %q: want 1-%d letters, digits, '-' or '_'", ErrDevKey, key, queue.MaxKeyLen)
	}
	if !queue.ValidTenant(tenant) {
		return "", fmt.Errorf("%w: tenant %q: want 1-%d letters, digits, '-' or '_'", ErrDevKey, tenant, MaxTenantLen)
	}
	if ttl <= 0 || ttl > MaxDevTTL {
		return "", fmt.Errorf("%w: ttl %v outside (0, %v]", ErrDevKey, ttl, MaxDevTTL)
	}
	for _, s := range scopes {
		if !validName(s) {
			return "", fmt.Errorf("%w: scope %q is malformed", ErrDevKey, s)
		}
	}
	for _, m := range models {
		if !validName(m) {
			return "", fmt.Errorf("%w: model %q is malformed", ErrDevKey, m)
		}
	}
	now := k.now().Truncate(time.Second)
	var jti [12]byte
	if _, err := rand.Read(jti[:]); err != nil {
		return "", fmt.Errorf("%w: %v", ErrDevKey, err)
	}
	c := claims{
		RegisteredClaims: jwt.RegisteredClaims{
			Issuer:    DevIssuer,
			Subject:   tenant,
			IssuedAt:  jwt.NewNumericDate(now),
			NotBefore: jwt.NewNumericDate(now),
			ExpiresAt: jwt.NewNumericDate(now.Add(ttl)),
			ID:        base64.RawURLEncoding.EncodeToString(jti[:]),
		},
		Scope: strings.Join(scopes, " "),
	}
	if len(models) > 0 {
		c.Models = models
	}
	if key != "" {
		c.Key = &key
	}
	t := jwt.NewWithClaims(jwt.SigningMethodEdDSA, c)
	t.Header["kid"] = k.kid
	s, err := t.SignedString(k.priv)
	if err != nil {
		return "", fmt.Errorf("%w: signing: %v", ErrDevKey, err)
	}
	return s, nil
}

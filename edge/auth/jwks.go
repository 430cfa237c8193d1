package auth

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"os"
	"sync"
	"time"
)

// ErrJWKS is wrapped by every error about a JWKS document or file.
var ErrJWKS = errors.New("auth: invalid JWKS")

// Limits on a JWKS document; far above any real key set.
const (
	maxJWKSBytes = 1 << 20
	maxJWKSKeys  = 256
	minRSABits   = 2048
)

// jwk is one RFC 7517 key as it appears in the file. Only public members are
// read; a key that carries private members is refused so that a private key
// file is never mistaken for a key set.
type jwk struct {
	Kty string `json:"kty"`
	Kid string `json:"kid"`
	Use string `json:"use,omitempty"`
	Alg string `json:"alg,omitempty"`
	Crv string `json:"crv,omitempty"`
	X   string `json:"x,omitempty"`
	Y   string `json:"y,omitempty"`
	N   string `json:"n,omitempty"`
	E   string `json:"e,omitempty"`
	D   string `json:"d,omitempty"`
	P   string `json:"p,omitempty"`
	Q   string `json:"q,omitempty"`
	K   string `json:"k,omitempty"`
}

type jwksDoc struct {
	Keys []jwk `json:"keys"`
}

// verifyKey is a parsed public key and the one JWS algorithm it may verify.
type verifyKey struct {
	alg string // "EdDSA", "ES256" or "RS256"
	key crypto.PublicKey
}

// parseJWKS parses a JWKS document into keys by kid. Keys whose "use" is not
// "sig" are skipped; any other defect fails the whole document, naming the kid
// (never key material).
func parseJWKS(data []byte) (map[string]verifyKey, error) {
	if len(data) > maxJWKSBytes {
		return nil, fmt.Errorf("%w: larger than %d bytes", ErrJWKS, maxJWKSBytes)
	}
	var doc jwksDoc
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("%w: not a JSON key set", ErrJWKS)
	}
	if doc.Keys == nil {
		return nil, fmt.Errorf("%w: no \"keys\" array", ErrJWKS)
	}
	if len(doc.Keys) > maxJWKSKeys {
		return nil, fmt.Errorf("%w: more than %d keys", ErrJWKS, maxJWKSKeys)
	}
	keys := make(map[string]verifyKey, len(doc.Keys))
	for i, k := range doc.Keys {
		if k.Kid == "" || !validName(k.Kid) {
			return nil, fmt.Errorf("%w: key %d has a missing or malformed kid", ErrJWKS, i)
		}
		if _, dup := keys[k.Kid]; dup {
			return nil, fmt.Errorf("%w: duplicate kid %q", ErrJWKS, k.Kid)
		}
		if k.D != "" || k.P != "" || k.Q != "" || k.K != "" {
			return nil, fmt.Errorf("%w: key %q contains private or symmetric key material", ErrJWKS, k.Kid)
		}
		if k.Use != "" && k.Use != "sig" {
			continue
		}
		vk, err := parseJWK(k)
		if err != nil {
			return nil, fmt.Errorf("%w: key %q: %v", ErrJWKS, k.Kid, err)
		}
		if k.Alg != "" && k.Alg != vk.alg {
			return nil, fmt.Errorf("%w: key %q: alg %q does not fit a %s key", ErrJWKS, k.Kid, k.Alg, k.Kty)
		}
		keys[k.Kid] = vk
	}
	return keys, nil
}

func parseJWK(k jwk) (verifyKey, error) {
	switch k.Kty {
	case "OKP":
		if k.Crv != "Ed25519" {
			return verifyKey{}, fmt.Errorf("unsupported OKP curve %q", k.Crv)
		}
		x, err := b64(k.X, ed25519.PublicKeySize)
		if err != nil {
			return verifyKey{}, fmt.Errorf("x: %v", err)
		}
		return verifyKey{alg: "EdDSA", key: ed25519.PublicKey(x)}, nil
	case "EC":
		if k.Crv != "P-256" {
			return verifyKey{}, fmt.Errorf("unsupported EC curve %q", k.Crv)
		}
		x, err := b64(k.X, 32)
		if err != nil {
			return verifyKey{}, fmt.Errorf("x: %v", err)
		}
		y, err := b64(k.Y, 32)
		if err != nil {
			return verifyKey{}, fmt.Errorf("y: %v", err)
		}
		point := append(append([]byte{4}, x...), y...)
		pub, err := ecdsa.ParseUncompressedPublicKey(elliptic.P256(), point)
		if err != nil {
			return verifyKey{}, errors.New("point is not on P-256")
		}
		return verifyKey{alg: "ES256", key: pub}, nil
	case "RSA":
		n, err := b64(k.N, 0)
		if err != nil {
			return verifyKey{}, fmt.Errorf("n: %v", err)
		}
		e, err := b64(k.E, 0)
		if err != nil {
			return verifyKey{}, fmt.Errorf("e: %v", err)
		}
		pub := &rsa.PublicKey{N: new(big.Int).SetBytes(n)}
		if bits := pub.N.BitLen(); bits < minRSABits || bits > 8192 {
			return verifyKey{}, fmt.Errorf("modulus of %d bits (want %d to 8192)", bits, minRSABits)
		}
		if len(e) == 0 || len(e) > 4 {
			return verifyKey{}, errors.New("exponent out of range")
		}
		ev := new(big.Int).SetBytes(e).Int64()
		if ev < 3 || ev%2 == 0 || ev > 1<<31-1 {
			return verifyKey{}, errors.New("exponent out of range")
		}
		pub.E = int(ev)
		return verifyKey{alg: "RS256", key: pub}, nil
	case "oct":
		return verifyKey{}, errors.New("symmetric keys do not belong in a JWKS file; configure HS256Secret")
	default:
		return verifyKey{}, fmt.Errorf("unsupported kty %q", k.Kty)
	}
}

// b64 decodes unpadded base64url; size > 0 demands exactly that many bytes.
func b64(s string, size int) ([]byte, error) {
	if s == "" {
		return nil, errors.New("missing")
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return nil, errors.New("not base64url")
	}
	if size > 0 && len(b) != size {
		return nil, fmt.Errorf("%d bytes, want %d", len(b), size)
	}
	return b, nil
}

// ed25519JWK returns the public JWK of key with its RFC 7638 thumbprint as kid.
func ed25519JWK(pub ed25519.PublicKey) jwk {
	x := base64.RawURLEncoding.EncodeToString(pub)
	// RFC 7638: required members only, lexicographic order, no whitespace.
	sum := sha256.Sum256([]byte(`{"crv":"Ed25519","kty":"OKP","x":"` + x + `"}`))
	return jwk{Kty: "OKP", Crv: "Ed25519", X: x, Use: "sig", Alg: "EdDSA",
		Kid: base64.RawURLEncoding.EncodeToString(sum[:])}
}

// keyFile is a JWKS file that is re-read when its modification time or size
// changes, checked at most once per interval. When a changed file cannot be
// read or parsed the last good key set stays in use (so a half-written file
// cannot lock every client out) and the file is tried again on its next change.
// To revoke a key, write a valid file without it.
type keyFile struct {
	path     string
	interval time.Duration
	now      func() time.Time

	mu      sync.Mutex // guards the fields below
	keys    map[string]verifyKey
	modTime time.Time
	size    int64
	checked time.Time // last stat
	lastErr error     // last failed reload, nil after a good one
	failing time.Time // when reloads started failing; zero while they succeed
	logged  string    // the failure last logged

	log   *slog.Logger  // reload failures; set once after newKeyFile
	stale time.Duration // how long the last good keys stay current once reloads fail
}

func newKeyFile(path string, interval time.Duration, now func() time.Time) (*keyFile, error) {
	f := &keyFile{path: path, interval: interval, now: now}
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrJWKS, err)
	}
	if err := f.load(st); err != nil {
		return nil, err
	}
	f.checked = now()
	return f, nil
}

// load reads the file; the caller holds mu (or owns f exclusively).
func (f *keyFile) load(st os.FileInfo) error {
	f.modTime, f.size = st.ModTime(), st.Size()
	data, err := os.ReadFile(f.path)
	if err != nil {
		f.lastErr = fmt.Errorf("%w: %v", ErrJWKS, err)
		return f.lastErr
	}
	keys, err := parseJWKS(data)
	if err != nil {
		f.lastErr = fmt.Errorf("%s: %w", f.path, err)
		return f.lastErr
	}
	f.keys, f.lastErr = keys, nil
	return nil
}

// lookup returns the key for kid, reloading the file first if it changed.
func (f *keyFile) lookup(kid string) (verifyKey, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.check()
	k, ok := f.keys[kid]
	return k, ok
}

// check reloads the file if it changed, at most once per interval; the
// caller holds mu. On failure the last good keys stay, lastErr says why and
// the failure is logged once.
func (f *keyFile) check() {
	now := f.now()
	if now.Sub(f.checked) < f.interval && !now.Before(f.checked) {
		return
	}
	f.checked = now
	st, err := os.Stat(f.path)
	switch {
	case err != nil:
		f.failed(fmt.Errorf("%w: %v", ErrJWKS, err))
	case !st.ModTime().Equal(f.modTime) || st.Size() != f.size:
		if err := f.load(st); err != nil {
			f.failed(err)
		} else if !f.failing.IsZero() {
			f.failing = time.Time{}
			f.logger().Info("auth: JWKS reloaded after failures", "path", f.path)
		}
	}
}

// failed records a failed reload; the caller holds mu.
func (f *keyFile) failed(err error) {
	first := f.failing.IsZero()
	if first {
		f.failing = f.now()
	}
	if first || f.logged != err.Error() {
		f.logged = err.Error()
		f.logger().Error("auth: JWKS reload failed; the last good keys stay in use", "path", f.path, "err", err,
			"keys_expire", f.failing.Add(f.stale))
	}
	f.lastErr = err
}

func (f *keyFile) logger() *slog.Logger {
	if f.log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return f.log
}

// ready is nil unless reloads have failed for longer than stale.
func (f *keyFile) ready() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.check()
	if f.failing.IsZero() || f.stale == 0 || f.now().Sub(f.failing) < f.stale {
		return nil
	}
	return fmt.Errorf("auth: JWKS keys expired: reloads failing since %s: %w", f.failing.UTC().Format(time.RFC3339), f.lastErr)
}

// reload re-reads the file now, whatever its modification time.
func (f *keyFile) reload() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	st, err := os.Stat(f.path)
	if err != nil {
		f.failed(fmt.Errorf("%w: %v", ErrJWKS, err))
		return f.lastErr
	}
	f.checked = f.now()
	if err := f.load(st); err != nil {
		f.failed(err)
		return err
	}
	f.failing = time.Time{}
	return nil
}

func (f *keyFile) err() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lastErr
}

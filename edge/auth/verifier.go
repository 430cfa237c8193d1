package auth

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/bulkhead-ai/bulkhead/queue"
)

// Algorithm names (JWS "alg").
const (
	AlgEdDSA = "EdDSA"
	AlgES256 = "ES256"
	AlgRS256 = "RS256"
	AlgHS256 = "HS256"
)

// ErrConfig reports a verifier configuration that cannot run.
var ErrConfig = errors.New("auth: config")

// defaultAlgorithms are accepted when Config.Algorithms is empty, plus HS256
// when Config.HS256Secret is set.
var defaultAlgorithms = []string{AlgEdDSA, AlgES256, AlgRS256}

const (
	// DefaultLeeway is the clock skew allowed on exp, nbf and iat.
	DefaultLeeway = 30 * time.Second
	// MaxLeeway bounds Config.Leeway: a larger skew is a broken clock.
	MaxLeeway = 5 * time.Minute
	// DefaultReloadEvery is how often the JWKS file's mtime is checked.
	DefaultReloadEvery = time.Second
	// MinHS256Secret is the shortest HS256 secret accepted (RFC 7518 §3.2).
	MinHS256Secret = 32
	// MaxTokenBytes bounds a token before it is parsed.
	MaxTokenBytes = 8 << 10
)

// Config configures a Verifier. At least one of JWKSFile and HS256Secret is set.
type Config struct {
	// JWKSFile is an RFC 7517 key set (OKP/Ed25519, EC/P-256, RSA >= 2048 bits).
	// Every key needs a kid; tokens name their key with the "kid" header.
	JWKSFile string
	// Algorithms allowed; empty means EdDSA, ES256, RS256 (+ HS256 when a
	// secret is set). "none" is never allowed; HS256 only with HS256Secret.
	Algorithms []string
	// HS256Secret enables HS256 with this shared secret (>= 32 bytes).
	HS256Secret []byte
	// Audience and Issuer, when set, must match the aud and iss claims.
	Audience, Issuer string
	// Leeway is the clock skew allowed on exp/nbf/iat: 0 means DefaultLeeway,
	// at most MaxLeeway.
	Leeway time.Duration
	// ReloadEvery is how often the JWKS file is checked for changes: 0 means
	// DefaultReloadEvery.
	ReloadEvery time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// MaxLifetime bounds a token's lifetime, exp minus iat (minus now when
	// the token has no iat): 0 means DefaultMaxLifetime.
	MaxLifetime time.Duration
	// StaleKeys is how long the last good JWKS key set stays current after
	// the file stopped reloading (unreadable, removed, malformed): past it
	// Ready reports the keys expired. 0 means DefaultStaleKeys.
	StaleKeys time.Duration
}

const (
	// DefaultMaxLifetime is Config.MaxLifetime's default.
	DefaultMaxLifetime = 24 * time.Hour
	// DefaultStaleKeys is Config.StaleKeys's default.
	DefaultStaleKeys = time.Hour
)

// Validate reports the first bad field; it does not touch the file system.
func (c *Config) Validate() error {
	if c.JWKSFile == "" && len(c.HS256Secret) == 0 {
		return fmt.Errorf("%w: JWKSFile or HS256Secret is required", ErrConfig)
	}
	if len(c.HS256Secret) > 0 && len(c.HS256Secret) < MinHS256Secret {
		return fmt.Errorf("%w: HS256Secret is %d bytes, want at least %d", ErrConfig, len(c.HS256Secret), MinHS256Secret)
	}
	for _, a := range c.Algorithms {
		switch a {
		case AlgEdDSA, AlgES256, AlgRS256:
			if c.JWKSFile == "" {
				return fmt.Errorf("%w: Algorithms has %s but JWKSFile is empty", ErrConfig, a)
			}
		case AlgHS256:
			if len(c.HS256Secret) == 0 {
				return fmt.Errorf("%w: Algorithms has HS256 but HS256Secret is empty", ErrConfig)
			}
		default:
			return fmt.Errorf("%w: Algorithms: %q is not supported", ErrConfig, a)
		}
	}
	if c.Leeway < 0 || c.Leeway > MaxLeeway {
		return fmt.Errorf("%w: Leeway %v is outside [0, %v]", ErrConfig, c.Leeway, MaxLeeway)
	}
	if c.ReloadEvery < 0 {
		return fmt.Errorf("%w: ReloadEvery %v is negative", ErrConfig, c.ReloadEvery)
	}
	if c.MaxLifetime < 0 {
		return fmt.Errorf("%w: MaxLifetime %v is negative", ErrConfig, c.MaxLifetime)
	}
	if c.StaleKeys < 0 {
		return fmt.Errorf("%w: StaleKeys %v is negative", ErrConfig, c.StaleKeys)
	}
	if c.Audience != "" && !validName(c.Audience) {
		return fmt.Errorf("%w: Audience is malformed", ErrConfig)
	}
	if c.Issuer != "" && !validName(c.Issuer) {
		return fmt.Errorf("%w: Issuer is malformed", ErrConfig)
	}
	return nil
}

// Verifier checks bearer tokens. It is safe for concurrent use.
type Verifier struct {
	algs     []string
	secret   []byte
	keys     *keyFile // nil without JWKSFile
	parser   *jwt.Parser
	now      func() time.Time
	leeway   time.Duration
	lifetime time.Duration
}

// NewVerifier validates cfg and loads the JWKS file. log receives JWKS
// reload failures; nil discards them.
func NewVerifier(log *slog.Logger, cfg Config) (*Verifier, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	leeway := cfg.Leeway
	if leeway == 0 {
		leeway = DefaultLeeway
	}
	every := cfg.ReloadEvery
	if every == 0 {
		every = DefaultReloadEvery
	}
	lifetime := cfg.MaxLifetime
	if lifetime == 0 {
		lifetime = DefaultMaxLifetime
	}
	stale := cfg.StaleKeys
	if stale == 0 {
		stale = DefaultStaleKeys
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	v := &Verifier{secret: slices.Clone(cfg.HS256Secret), now: now, leeway: leeway, lifetime: lifetime}
	v.algs = slices.Clone(cfg.Algorithms)
	if len(v.algs) == 0 {
		if cfg.JWKSFile != "" {
			v.algs = slices.Clone(defaultAlgorithms)
		}
		if len(cfg.HS256Secret) > 0 {
			v.algs = append(v.algs, AlgHS256)
		}
	}
	if cfg.JWKSFile != "" {
		kf, err := newKeyFile(cfg.JWKSFile, every, now)
		if kf != nil {
			kf.log, kf.stale = log, stale
		}
		if err != nil {
			return nil, err
		}
		v.keys = kf
	}
	opts := []jwt.ParserOption{
		jwt.WithValidMethods(v.algs),
		jwt.WithExpirationRequired(),
		jwt.WithIssuedAt(),
		jwt.WithLeeway(leeway),
		jwt.WithTimeFunc(now),
		jwt.WithStrictDecoding(),
	}
	if cfg.Audience != "" {
		opts = append(opts, jwt.WithAudience(cfg.Audience))
	}
	if cfg.Issuer != "" {
		opts = append(opts, jwt.WithIssuer(cfg.Issuer))
	}
	v.parser = jwt.NewParser(opts...)
	return v, nil
}

// Reload re-reads the JWKS file now (it is also re-read on change). On error
// the previous keys stay in use.
func (v *Verifier) Reload() error {
	if v.keys == nil {
		return nil
	}
	return v.keys.reload()
}

// KeysError returns why the last automatic JWKS reload failed, or nil when the
// keys in use come from the file as it is now. For health checks.
func (v *Verifier) KeysError() error {
	if v.keys == nil {
		return nil
	}
	return v.keys.err()
}

// Ready reports whether the verifier can still verify with current keys:
// an error once the JWKS file has failed to reload for longer than
// Config.StaleKeys (the edge's readiness check calls it; the last good keys
// stay in use meanwhile). It checks the file for changes first.
func (v *Verifier) Ready() error {
	if v.keys == nil {
		return nil
	}
	return v.keys.ready()
}

// Authenticate verifies the request's "Authorization: Bearer <token>" header.
// Errors wrap ErrUnauthenticated.
func (v *Verifier) Authenticate(r *http.Request) (Principal, error) {
	hs := r.Header.Values("Authorization")
	switch len(hs) {
	case 0:
		return Principal{}, fmt.Errorf("%w: missing Authorization header", ErrUnauthenticated)
	case 1:
	default:
		return Principal{}, fmt.Errorf("%w: more than one Authorization header", ErrUnauthenticated)
	}
	scheme, token, ok := strings.Cut(hs[0], " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return Principal{}, fmt.Errorf("%w: Authorization is not a Bearer token", ErrUnauthenticated)
	}
	return v.Verify(strings.TrimSpace(token))
}

// claims are the token claims read besides the registered ones.
type claims struct {
	jwt.RegisteredClaims
	Scope  string   `json:"scope,omitempty"`
	Models []string `json:"models,omitempty"`
	// Key names one of the tenant's API keys: its spend is told apart
	// (queue.ValidKey's rule).
	Key *string `json:"key,omitempty"`
}

// Verify checks a compact JWS token and returns its principal. Errors wrap
// ErrUnauthenticated and carry a short reason safe to show to the client.
func (v *Verifier) Verify(token string) (Principal, error) {
	if token == "" {
		return Principal{}, fmt.Errorf("%w: empty token", ErrUnauthenticated)
	}
	if len(token) > MaxTokenBytes {
		return Principal{}, fmt.Errorf("%w: token longer than %d bytes", ErrUnauthenticated, MaxTokenBytes)
	}
	var c claims
	if _, err := v.parser.ParseWithClaims(token, &c, v.key); err != nil {
		return Principal{}, fmt.Errorf("%w: %s", ErrUnauthenticated, reason(err))
	}
	if err := numericDates(token); err != nil {
		return Principal{}, err
	}
	from := v.now()
	if c.IssuedAt != nil {
		from = c.IssuedAt.Time
	}
	if life := c.ExpiresAt.Sub(from); life > v.lifetime+v.leeway {
		return Principal{}, fmt.Errorf("%w: token lifetime exceeds %v", ErrUnauthenticated, v.lifetime)
	}
	if !queue.ValidTenant(c.Subject) {
		return Principal{}, fmt.Errorf("%w: sub is missing or not a valid tenant id", ErrUnauthenticated)
	}
	p := Principal{Tenant: c.Subject, Scopes: strings.Fields(c.Scope)}
	if c.Key != nil {
		if !queue.ValidKey(*c.Key) {
			return Principal{}, fmt.Errorf("%w: key claim is not a valid key id (1-%d letters, digits, '-' or '_')", ErrUnauthenticated, queue.MaxKeyLen)
		}
		p.Key = *c.Key
	}
	for _, s := range p.Scopes {
		if !validName(s) {
			return Principal{}, fmt.Errorf("%w: scope claim is malformed", ErrUnauthenticated)
		}
	}
	if c.Models != nil && len(c.Models) == 0 {
		// An explicit empty allowlist would read as "all models": refuse it.
		return Principal{}, fmt.Errorf("%w: models claim is an empty list", ErrUnauthenticated)
	}
	for _, m := range c.Models {
		if !validName(m) {
			return Principal{}, fmt.Errorf("%w: models claim is malformed", ErrUnauthenticated)
		}
	}
	p.Models = c.Models
	return p, nil
}

// errUnknownKey and errKeyType are returned by key and mapped by reason.
var (
	errUnknownKey = errors.New("unknown key")
	errKeyType    = errors.New("key does not fit algorithm")
	errCrit       = errors.New("critical header extension")
)

// key is the jwt.Keyfunc: the HS256 secret, or the JWKS key named by kid whose
// type matches the token's (already allowlisted) algorithm.
func (v *Verifier) key(t *jwt.Token) (any, error) {
	if _, ok := t.Header["crit"]; ok {
		// RFC 7515 §4.1.11: we understand no extensions, so none may be critical.
		return nil, errCrit
	}
	alg := t.Method.Alg()
	if alg == AlgHS256 {
		if len(v.secret) == 0 { // unreachable: the allowlist needs a secret
			return nil, errKeyType
		}
		return v.secret, nil
	}
	if v.keys == nil {
		return nil, errUnknownKey
	}
	kid, _ := t.Header["kid"].(string)
	if kid == "" {
		return nil, errUnknownKey
	}
	k, ok := v.keys.lookup(kid)
	if !ok {
		return nil, errUnknownKey
	}
	if k.alg != alg {
		return nil, errKeyType
	}
	return k.key, nil
}

// reason turns a parse error into a fixed phrase: never token contents or
// key material.
func reason(err error) string {
	switch {
	case errors.Is(err, errUnknownKey):
		return "token signed by an unknown key"
	case errors.Is(err, errCrit):
		return "token has critical header extensions"
	case errors.Is(err, errKeyType):
		return "token algorithm does not match its key"
	case errors.Is(err, jwt.ErrTokenMalformed):
		return "token is malformed"
	case errors.Is(err, jwt.ErrTokenSignatureInvalid), errors.Is(err, jwt.ErrTokenUnverifiable):
		return "token signature is invalid or its algorithm is not allowed"
	case errors.Is(err, jwt.ErrTokenExpired):
		return "token is expired"
	case errors.Is(err, jwt.ErrTokenNotValidYet):
		return "token is not valid yet"
	case errors.Is(err, jwt.ErrTokenUsedBeforeIssued):
		return "token is issued in the future"
	case errors.Is(err, jwt.ErrTokenRequiredClaimMissing):
		return "token is missing a required claim"
	case errors.Is(err, jwt.ErrTokenInvalidAudience):
		return "token audience is not accepted"
	case errors.Is(err, jwt.ErrTokenInvalidIssuer):
		return "token issuer is not accepted"
	default:
		return "token is invalid"
	}
}

// dateClaims are the registered claims RFC 7519 §2 defines as NumericDate.
var dateClaims = []string{"exp", "nbf", "iat"}

// numericDates refuses a token whose exp, nbf or iat is not a JSON number
// (the JWT library also reads a quoted number). It runs after the signature
// verified, so the payload is well-formed base64url JSON.
func numericDates(token string) error {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return fmt.Errorf("%w: token is malformed", ErrUnauthenticated)
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return fmt.Errorf("%w: token is malformed", ErrUnauthenticated)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(payload, &raw); err != nil {
		return fmt.Errorf("%w: token is malformed", ErrUnauthenticated)
	}
	for _, name := range dateClaims {
		v, ok := raw[name]
		if !ok {
			continue
		}
		if len(v) == 0 || (v[0] != '-' && (v[0] < '0' || v[0] > '9')) {
			return fmt.Errorf("%w: %s claim is not a number", ErrUnauthenticated, name)
		}
	}
	return nil
}

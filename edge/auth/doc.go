// Package auth verifies the bearer tokens (JWTs) that carry a request's tenant,
// scopes and model allowlist, and turns them into a Principal.
//
// It owns the signature check (an algorithm allowlist; keys from a JWKS file
// selected by kid and reloaded when the file changes, or an explicitly
// configured HS256 secret), the claim checks (sub, exp, nbf, iat, aud, iss,
// scope, models) and the development signing key behind `bulkhead token`.
//
// It must never: accept alg "none" or an algorithm outside the allowlist, use a
// key for an algorithm of a different key type, take a tenant from anything but
// a verified token, or put key material or token contents in an error message.
// Every refusal wraps ErrUnauthenticated (HTTP 401) or ErrForbidden (HTTP 403).
package auth

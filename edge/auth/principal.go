package auth

import (
	"errors"
	"fmt"
	"slices"

	"github.com/bulkhead-ai/bulkhead/queue"
)

// Scopes a token may grant (the space-separated "scope" claim). Unknown scope
// names are carried in Principal.Scopes but grant nothing here.
const (
	ScopeRun          = "ai:run"        // run models
	ScopeRead         = "ai:read"       // list models, read async results
	ScopeBillingRead  = "billing:read"  // read usage and billing
	ScopeBillingWrite = "billing:write" // set API key limits and budgets
	// ScopeFinetunesWrite creates, uploads and deletes the tenant's
	// finetunes (LoRA adapters); listing them also takes ai:read. Running
	// a model with one takes only ai:run.
	ScopeFinetunesWrite = "finetunes:write"
)

var (
	// ErrUnauthenticated: no credentials, or credentials that do not verify
	// (malformed, forged, expired, unknown key, wrong audience...). HTTP 401.
	ErrUnauthenticated = errors.New("auth: unauthenticated")
	// ErrForbidden: a verified token that does not grant what was asked
	// (a scope, a model). HTTP 403.
	ErrForbidden = errors.New("auth: forbidden")
)

// MaxTenantLen is the longest tenant id (the "sub" claim) accepted:
// queue.ValidTenant's rule.
const MaxTenantLen = queue.MaxTenantLen

// Principal is who a verified token speaks for.
type Principal struct {
	Tenant string   // the "sub" claim
	Key    string   // the "key" claim: which of the tenant's API keys ("" for none)
	Scopes []string // the "scope" claim, split on spaces
	Models []string // allowlist of catalog model names; empty means all
}

// HasScope reports whether the token granted scope s.
func (p Principal) HasScope(s string) bool {
	return s != "" && slices.Contains(p.Scopes, s)
}

// AllowsModel reports whether the token may use the model called name.
func (p Principal) AllowsModel(name string) bool {
	if len(p.Models) == 0 {
		return true
	}
	return slices.Contains(p.Models, name)
}

// RequireScope returns nil when the token granted scope s, and otherwise an
// error wrapping ErrForbidden that names the missing scope.
func (p Principal) RequireScope(s string) error {
	if p.HasScope(s) {
		return nil
	}
	return fmt.Errorf("%w: token lacks scope %q", ErrForbidden, s)
}

// RequireModel returns nil when the token may use the model called name, and
// otherwise an error wrapping ErrForbidden.
func (p Principal) RequireModel(name string) error {
	if p.AllowsModel(name) {
		return nil
	}
	return fmt.Errorf("%w: token does not allow model %q", ErrForbidden, name)
}

// validName reports whether a scope or model name is acceptable in a claim:
// 1 to 128 printable ASCII characters other than space.
func validName(s string) bool {
	if len(s) == 0 || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] > '~' {
			return false
		}
	}
	return true
}

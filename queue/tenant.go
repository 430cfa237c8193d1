package queue

// MaxTenantLen is the longest tenant id.
const MaxTenantLen = 64

// ValidTenant reports whether s is a well-formed tenant id: 1 to
// MaxTenantLen ASCII letters, digits, '-' or '_'. It is the platform's one
// tenant rule: the edge accepts a token's subject only if it holds, and every
// store keyed by tenant relies on it (a tenant never breaks out of its Redis
// hash tag, its usage subject or its consumer names), so every decoder of a
// job or usage event checks it again.
func ValidTenant(s string) bool {
	if len(s) == 0 || len(s) > MaxTenantLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// MaxKeyLen is the longest API key id (a token's "key" claim).
const MaxKeyLen = 64

// ValidKey reports whether s is a well-formed API key id: ValidTenant's
// rule. A key names one of a tenant's keys (its apps, its environments),
// carried from the verified token into its jobs and usage events, so spend
// can be told apart within a tenant; it never widens what the tenant may do.
func ValidKey(s string) bool { return ValidTenant(s) }

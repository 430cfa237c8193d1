package edge

import (
	"fmt"
	"slices"
	"strings"

	"github.com/bulkhead-ai/bulkhead/models/catalog"
)

// PropAllowedClasses is the catalog property that opens a model only to the
// tenant classes it names (comma-separated class names of --tenant-classes,
// "default" included): a tenant of any other class gets 403
// model_requires_plan (5035), as Workers AI answers for a model its plan
// does not include. Absent, every tenant may call the model (the token's own
// model allowlist still applies: 5018).
const PropAllowedClasses = "allowed_classes"

// allowedClasses reads m's PropAllowedClasses; nil when every class may.
func allowedClasses(m *catalog.Model) []string {
	v, ok := m.Properties[PropAllowedClasses]
	if !ok {
		return nil
	}
	out := []string{} // present, even if it names nothing
	for _, name := range strings.Split(v, ",") {
		if name = strings.TrimSpace(name); name != "" {
			out = append(out, name)
		}
	}
	return out
}

// checkEntitlements refuses a catalog whose PropAllowedClasses names no
// class, or a class the tenant classes do not define: a typo would close
// the model to every tenant without a word.
func (s *Server) checkEntitlements(m *catalog.Model) error {
	names := allowedClasses(m)
	if names == nil {
		return nil
	}
	if len(names) == 0 {
		return fmt.Errorf("%w: model %q: %s names no class", ErrConfig, m.Name, PropAllowedClasses)
	}
	defined := map[string]bool{}
	for _, cl := range s.cfg.Tenants.Classes() {
		defined[cl.Name] = true
	}
	for _, name := range names {
		if !defined[name] {
			return fmt.Errorf("%w: model %q: %s names class %q, which the tenant classes do not define", ErrConfig, m.Name, PropAllowedClasses, name)
		}
	}
	return nil
}

// entitled reports whether tenant's class may call m.
func (s *Server) entitled(tenant string, m *catalog.Model) bool {
	names := allowedClasses(m)
	return names == nil || slices.Contains(names, s.class(tenant).Name)
}

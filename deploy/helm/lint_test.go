package chart

import (
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
)

// TestLint runs `helm lint`'s rules (helm's SDK) on the chart with each
// value set: no error and no warning, but for the dependency charts that are
// absent until `helm dependency build` fetches them.
func TestLint(t *testing.T) {
	for set, vals := range valueSets(t) {
		l := lint.AllWithKubeVersion(chartDir, vals, namespace, &chartutil.KubeVersion{Version: "v1.33.0", Major: "1", Minor: "33"})
		for _, m := range l.Messages {
			if m.Severity < support.WarningSev {
				continue
			}
			if strings.Contains(m.Err.Error(), "missing in charts/ directory") || strings.Contains(m.Err.Error(), "is missing these dependencies") {
				continue
			}
			t.Errorf("%s: %s", set, m.Error())
		}
	}
}

package chart

import (
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
)

// TestLint runs `helm lint`'s rules (helm's SDK): the bulkhead chart with
// each value set (the all-in-one set as bulkhead-stack passes it) with no
// error and no warning, and bulkhead-stack itself, whose only warnings may
// be its dependencies, absent until `helm dependency build` fetches them.
func TestLint(t *testing.T) {
	kube := &chartutil.KubeVersion{Version: "v1.33.0", Major: "1", Minor: "33"}
	for set, vs := range valueSets(t) {
		vals := vs.vals
		if !vs.alone {
			vals = stackBulkheadValues(t, vals)
		}
		for _, m := range lint.AllWithKubeVersion(chartDir, vals, namespace, kube).Messages {
			if m.Severity >= support.WarningSev {
				t.Errorf("%s: %s", set, m.Error())
			}
		}
	}
	for _, m := range lint.AllWithKubeVersion(stackDir, nil, namespace, kube).Messages {
		if m.Severity < support.WarningSev || strings.Contains(m.Err.Error(), "missing in charts/ directory") || strings.Contains(m.Err.Error(), "is missing these dependencies") {
			continue
		}
		t.Errorf("%s: %s", stackDir, m.Error())
	}
}

// stackBulkheadValues are bulkhead-stack's values for its bulkhead
// subchart, with vals over them.
func stackBulkheadValues(t *testing.T, vals map[string]any) map[string]any {
	t.Helper()
	stack, err := loader.Load(stackDir)
	if err != nil {
		t.Fatal(err)
	}
	base, _ := stack.Values["bulkhead"].(map[string]any)
	if base == nil {
		t.Fatalf("%s/values.yaml has no bulkhead section", stackDir)
	}
	return chartutil.CoalesceTables(chartutil.Values(vals).AsMap(), base)
}

// TestHelmWithoutNetwork runs the helm command itself (built from the
// module's helm tool) on the bulkhead chart with external services: no
// charts/ directory, empty helm home directories, and every proxy pointed at
// a closed port, so that a dependency lookup would fail. `helm template`
// must render and `helm lint --strict` pass.
func TestHelmWithoutNetwork(t *testing.T) {
	if _, err := os.Stat(filepath.Join(chartDir, "charts")); err == nil {
		t.Fatalf("%s/charts exists: the chart must not need one", chartDir)
	}
	dir := t.TempDir()
	helm := filepath.Join(dir, "helm")
	if out, err := exec.Command("go", "build", "-o", helm, "helm.sh/helm/v3/cmd/helm").CombinedOutput(); err != nil {
		t.Fatalf("building helm: %v\n%s", err, out)
	}
	valuesFile := filepath.Join(dir, "external.yaml")
	if err := os.WriteFile(valuesFile, []byte(externalValues), 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(helm, args...)
		cmd.Env = append(os.Environ(),
			"HELM_CACHE_HOME="+filepath.Join(dir, "cache"), "HELM_CONFIG_HOME="+filepath.Join(dir, "config"),
			"HELM_DATA_HOME="+filepath.Join(dir, "data"),
			"HTTPS_PROXY=http://127.0.0.1:1", "HTTP_PROXY=http://127.0.0.1:1", "NO_PROXY=")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	out := run("template", release, chartDir, "--namespace", namespace, "--kube-version", "1.33.0",
		"--api-versions", "keda.sh/v1alpha1", "--api-versions", "monitoring.coreos.com/v1", "-f", valuesFile)
	if !strings.Contains(out, "--nats=tls://nats.bus.svc:4222") || !strings.Contains(out, "kind: ScaledObject") {
		t.Errorf("helm template rendered no worker on the external bus:\n%s", out)
	}
	run("lint", "--strict", chartDir, "--namespace", namespace, "--kube-version", "1.33.0", "-f", valuesFile)
}

// TestChartSources: the bulkhead chart has no dependency; bulkhead-stack's
// come from the projects themselves (NATS's and Valkey's official charts),
// none from Bitnami, whose free images were withdrawn in 2025.
func TestChartSources(t *testing.T) {
	app, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	if len(app.Metadata.Dependencies) != 0 {
		t.Errorf("%s depends on %v: it must render and install with no network", chartDir, app.Metadata.Dependencies)
	}
	stack, err := loader.Load(stackDir)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"bulkhead": "file://../bulkhead",
		"nats":     "https://nats-io.github.io/k8s/helm/charts/",
		"valkey":   "https://valkey.io/valkey-helm/",
	}
	got := map[string]string{}
	for _, d := range stack.Metadata.Dependencies {
		got[d.Name] = d.Repository
		if d.Name != "bulkhead" && d.Condition != d.Name+".enabled" {
			t.Errorf("%s: dependency %s has condition %q, want %s.enabled", stackDir, d.Name, d.Condition, d.Name)
		}
	}
	if !maps.Equal(got, want) {
		t.Errorf("%s dependencies %v, want %v", stackDir, got, want)
	}
	for _, dir := range []string{chartDir, stackDir} {
		err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			b, err := os.ReadFile(path)
			if err == nil && strings.Contains(strings.ToLower(string(b)), "bitnami") {
				t.Errorf("%s names Bitnami", path)
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

package chart

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"testing"

	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/releaseutil"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"
)

const (
	chartDir  = "bulkhead"       // the application chart
	stackDir  = "bulkhead-stack" // the all-in-one chart: bulkhead, NATS, Valkey
	release   = "ai"
	namespace = "inference"
)

// rendered is one `helm template` of the chart, every manifest decoded.
type rendered struct {
	deployments     map[string]*appsv1.Deployment
	services        map[string]*corev1.Service
	configMaps      map[string]*corev1.ConfigMap
	secrets         map[string]*corev1.Secret
	pdbs            map[string]*policyv1.PodDisruptionBudget
	scaledObjects   map[string]*kedav1alpha1.ScaledObject
	serviceMonitors map[string]*monitoringv1.ServiceMonitor
}

// valueSet is one install to render: the bulkhead chart's values, given to
// the bulkhead chart alone or, under bulkhead:, to bulkhead-stack.
type valueSet struct {
	alone bool
	vals  map[string]any
	stack map[string]any // bulkhead-stack's own values (nats, valkey)
}

// template renders the set as `helm template` does (helm's install action,
// client only: no cluster). bulkhead-stack gets ../bulkhead as its
// subchart, as `helm dependency build` packs it; the NATS and Valkey charts
// are not there (no network), so only what Bulkhead's charts make renders.
func (s valueSet) template() (string, error) {
	chrt, err := loader.Load(chartDir)
	if err != nil {
		return "", err
	}
	vals := s.vals
	if !s.alone {
		stack, err := loader.Load(stackDir)
		if err != nil {
			return "", err
		}
		stack.AddDependency(chrt)
		top := map[string]any{}
		maps.Copy(top, s.stack)
		if vals != nil {
			top["bulkhead"] = vals
		}
		chrt, vals = stack, top
	}
	install := action.NewInstall(&action.Configuration{Log: func(string, ...any) {}})
	install.DryRun = true
	install.ClientOnly = true
	install.Replace = true
	install.ReleaseName = release
	install.Namespace = namespace
	install.KubeVersion = &chartutil.KubeVersion{Version: "v1.33.0", Major: "1", Minor: "33"}
	install.APIVersions = chartutil.VersionSet{"keda.sh/v1alpha1", "monitoring.coreos.com/v1"}
	rel, err := install.Run(chrt, vals)
	if err != nil {
		return "", err
	}
	return rel.Manifest, nil
}

// template renders bulkhead-stack with vals as the bulkhead chart's values.
func template(vals map[string]any) (string, error) { return valueSet{vals: vals}.template() }

// render renders bulkhead-stack with vals as the bulkhead chart's values
// and decodes every manifest (valueSet.render).
func render(t *testing.T, vals map[string]any) *rendered {
	t.Helper()
	return valueSet{vals: vals}.render(t)
}

// render templates the set and decodes every manifest strictly: an
// unknown field, a duplicate key, a value of the wrong type or a kind the
// chart is not expected to make fails the test.
func (s valueSet) render(t *testing.T) *rendered {
	t.Helper()
	manifest, err := s.template()
	if err != nil {
		t.Fatalf("helm template: %v", err)
	}
	r := &rendered{
		deployments: map[string]*appsv1.Deployment{}, services: map[string]*corev1.Service{},
		configMaps: map[string]*corev1.ConfigMap{}, secrets: map[string]*corev1.Secret{}, pdbs: map[string]*policyv1.PodDisruptionBudget{},
		scaledObjects: map[string]*kedav1alpha1.ScaledObject{}, serviceMonitors: map[string]*monitoringv1.ServiceMonitor{},
	}
	docs := releaseutil.SplitManifests(manifest)
	if len(docs) == 0 {
		t.Fatal("the chart rendered no manifest")
	}
	keys := make([]string, 0, len(docs))
	for k := range docs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if err := r.decode([]byte(docs[k])); err != nil {
			t.Fatalf("%v\n--- manifest:\n%s", err, docs[k])
		}
	}
	return r
}

func (r *rendered) decode(doc []byte) error {
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal(doc, &tm); err != nil {
		return fmt.Errorf("not YAML: %w", err)
	}
	var (
		obj  metav1.Object
		into any
	)
	switch gvk := tm.APIVersion + " " + tm.Kind; gvk {
	case "apps/v1 Deployment":
		o := &appsv1.Deployment{}
		obj, into = o, o
		defer func() { r.deployments[o.Name] = o }()
	case "v1 Service":
		o := &corev1.Service{}
		obj, into = o, o
		defer func() { r.services[o.Name] = o }()
	case "v1 ConfigMap":
		o := &corev1.ConfigMap{}
		obj, into = o, o
		defer func() { r.configMaps[o.Name] = o }()
	case "v1 Secret":
		o := &corev1.Secret{}
		obj, into = o, o
		defer func() { r.secrets[o.Name] = o }()
	case "policy/v1 PodDisruptionBudget":
		o := &policyv1.PodDisruptionBudget{}
		obj, into = o, o
		defer func() { r.pdbs[o.Name] = o }()
	case "keda.sh/v1alpha1 ScaledObject":
		o := &kedav1alpha1.ScaledObject{}
		obj, into = o, o
		defer func() { r.scaledObjects[o.Name] = o }()
	case "monitoring.coreos.com/v1 ServiceMonitor":
		o := &monitoringv1.ServiceMonitor{}
		obj, into = o, o
		defer func() { r.serviceMonitors[o.Name] = o }()
	default:
		return fmt.Errorf("unexpected kind %q", gvk)
	}
	if err := yaml.UnmarshalStrict(doc, into); err != nil {
		return fmt.Errorf("%s %s does not decode strictly: %w", tm.Kind, tm.APIVersion, err)
	}
	if obj.GetName() == "" {
		return fmt.Errorf("%s without a name", tm.Kind)
	}
	if ns := obj.GetNamespace(); ns != "" && ns != namespace {
		return fmt.Errorf("%s %s in namespace %q", tm.Kind, obj.GetName(), ns)
	}
	return validNames(tm.Kind, obj)
}

// validNames checks what the API server checks of names and labels: a
// Service's name is a DNS-1035 label, every other name a DNS-1123
// subdomain, label keys qualified names and values valid label values.
func validNames(kind string, obj metav1.Object) error {
	msgs := validation.IsDNS1123Subdomain(obj.GetName())
	if kind == "Service" {
		msgs = validation.IsDNS1035Label(obj.GetName())
	}
	for k, v := range obj.GetLabels() {
		msgs = append(msgs, validation.IsQualifiedName(k)...)
		msgs = append(msgs, validation.IsValidLabelValue(v)...)
	}
	if len(msgs) > 0 {
		return fmt.Errorf("%s %s: %s", kind, obj.GetName(), strings.Join(msgs, "; "))
	}
	return nil
}

// name is an object's name in this release.
func name(component string) string { return release + "-bulkhead-" + component }

// values builds a values map from YAML (the overrides a test sets).
func values(t *testing.T, doc string) map[string]any {
	t.Helper()
	v := map[string]any{}
	if err := yaml.Unmarshal([]byte(doc), &v); err != nil {
		t.Fatalf("test values: %v", err)
	}
	return v
}

// args returns a container's --flag=value arguments as a map (a bare
// --flag maps to ""), after its subcommand.
func args(t *testing.T, c corev1.Container) (cmd string, flags map[string]string) {
	t.Helper()
	if len(c.Args) == 0 {
		t.Fatalf("container %s has no args", c.Name)
	}
	flags = map[string]string{}
	for _, a := range c.Args[1:] {
		if !strings.HasPrefix(a, "--") {
			t.Fatalf("container %s: argument %q is not a --flag", c.Name, a)
		}
		k, v, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if _, dup := flags[k]; dup {
			t.Fatalf("container %s: --%s given twice", c.Name, k)
		}
		flags[k] = v
	}
	return c.Args[0], flags
}

// externalValues point the bulkhead chart alone at a NATS cluster and a
// Redis of the operator's, with role credentials and TLS from Secrets.
const externalValues = `
bus:
  url: tls://nats.bus.svc:4222
  monitoringEndpoint: nats-headless.bus.svc.cluster.local:8222
  monitoringHttps: true
  streamReplicas: 5
  credentials: {existingSecret: bulkhead-nats-seeds}
  tls: {existingSecret: bulkhead-nats-tls, clientCertificate: true}
externalRedis: {existingSecret: bulkhead-redis, urlKey: url}
serviceMonitor: {enabled: true, labels: {release: prometheus}}
pools:
  unified: {enabled: true, autoscaling: {enabled: true}}
  prefill: {enabled: false}
`

func TestRenderDefaults(t *testing.T) {
	r := render(t, nil)
	want := []string{"edge", "prefill", "decode", "billing"}
	for _, c := range want {
		if r.deployments[name(c)] == nil || r.services[name(c)] == nil || r.pdbs[name(c)] == nil {
			t.Errorf("%s: want a Deployment, a Service and a PodDisruptionBudget", c)
		}
	}
	if len(r.deployments) != len(want) {
		t.Errorf("deployments %v, want %v", keysOf(r.deployments), want)
	}
	for _, c := range []string{"prefill", "decode"} {
		if r.scaledObjects[name(c)] == nil {
			t.Errorf("%s: no ScaledObject", c)
		}
	}
	if r.configMaps[name("catalog")] == nil {
		t.Error("no catalog ConfigMap")
	}
	if len(r.serviceMonitors) != 0 {
		t.Error("a ServiceMonitor by default")
	}
	edge := r.deployments[name("edge")].Spec.Template.Spec
	_, flags := args(t, edge.Containers[0])
	if got, want := flags["nats"], "nats://ai-nats."+namespace+".svc:4222"; got != want {
		t.Errorf("edge --nats %q, want the NATS chart's service %q", got, want)
	}
	for n, d := range r.deployments {
		if _, f := args(t, d.Spec.Template.Spec.Containers[0]); f["replicas"] != "3" {
			t.Errorf("%s --replicas %q, want the NATS chart's cluster size 3", n, f["replicas"])
		}
	}
	for _, c := range []string{"edge", "billing"} {
		env := envOf(r.deployments[name(c)].Spec.Template.Spec.Containers[0])
		if got, want := env["BULKHEAD_REDIS"].Value, "redis://:$(REDIS_PASSWORD)@ai-valkey."+namespace+".svc:6379/0"; got != want {
			t.Errorf("%s BULKHEAD_REDIS %q, want the Valkey chart's service %q", c, got, want)
		}
		if ref := env["REDIS_PASSWORD"].ValueFrom; ref == nil || ref.SecretKeyRef == nil || ref.SecretKeyRef.Name != "ai-valkey-users" || ref.SecretKeyRef.Key != "default" {
			t.Errorf("%s REDIS_PASSWORD %+v, want Secret ai-valkey-users key default", c, env["REDIS_PASSWORD"])
		}
		// Kubernetes expands $(REDIS_PASSWORD) only from variables defined
		// before it.
		if i, j := slices.IndexFunc(r.deployments[name(c)].Spec.Template.Spec.Containers[0].Env, func(e corev1.EnvVar) bool { return e.Name == "REDIS_PASSWORD" }),
			slices.IndexFunc(r.deployments[name(c)].Spec.Template.Spec.Containers[0].Env, func(e corev1.EnvVar) bool { return e.Name == "BULKHEAD_REDIS" }); i > j {
			t.Errorf("%s: REDIS_PASSWORD comes after BULKHEAD_REDIS", c)
		}
	}
	// The Valkey chart reads the default user's password from the Secret the
	// stack makes (its auth.usersExistingSecret): one random password, kept.
	users := r.secrets["ai-valkey-users"]
	if users == nil {
		t.Fatalf("no Secret ai-valkey-users (have %v)", keysOf(r.secrets))
	}
	if pw := users.Data["default"]; len(pw) != 32 || users.Annotations["helm.sh/resource-policy"] != "keep" {
		t.Errorf("Secret ai-valkey-users: password of %d bytes, annotations %v", len(pw), users.Annotations)
	}
	so := r.scaledObjects[name("decode")]
	if got := so.Spec.Triggers[0].Metadata["natsServerMonitoringEndpoint"]; got != "ai-nats-headless."+namespace+".svc.cluster.local:8222" {
		t.Errorf("decode trigger endpoint %q", got)
	}
}

func TestRenderExternal(t *testing.T) {
	r := valueSet{alone: true, vals: values(t, externalValues)}.render(t)
	for _, c := range []string{"edge", "unified", "decode", "billing"} {
		d := r.deployments[name(c)]
		if d == nil {
			t.Fatalf("no %s Deployment (have %v)", c, keysOf(r.deployments))
		}
		spec := d.Spec.Template.Spec
		role := c
		if c == "unified" || c == "decode" {
			role = "worker"
		}
		_, flags := args(t, spec.Containers[0])
		if flags["replicas"] != "5" {
			t.Errorf("%s --replicas %q, want bus.streamReplicas 5", c, flags["replicas"])
		}
		if flags["nats"] != "tls://nats.bus.svc:4222" {
			t.Errorf("%s --nats %q", c, flags["nats"])
		}
		if got, want := flags["nats-creds"], "/run/bulkhead/nats/"+role+".nk"; got != want {
			t.Errorf("%s --nats-creds %q, want %q", c, got, want)
		}
		if flags["nats-tls-ca"] == "" || flags["nats-tls-cert"] == "" || flags["nats-tls-key"] == "" {
			t.Errorf("%s: TLS flags missing: %v", c, flags)
		}
		checkSeedCopy(t, c, role, spec)
		if c == "edge" || c == "billing" {
			ref := envOf(spec.Containers[0])["BULKHEAD_REDIS"].ValueFrom
			if ref == nil || ref.SecretKeyRef == nil || ref.SecretKeyRef.Name != "bulkhead-redis" || ref.SecretKeyRef.Key != "url" {
				t.Errorf("%s BULKHEAD_REDIS from %+v, want Secret bulkhead-redis key url", c, ref)
			}
		}
	}
	if r.deployments[name("prefill")] != nil {
		t.Error("a prefill Deployment with pools.prefill.enabled=false")
	}
	sm := r.serviceMonitors[release+"-bulkhead"]
	if sm == nil {
		t.Fatalf("no ServiceMonitor (have %v)", keysOf(r.serviceMonitors))
	}
	if sm.Labels["release"] != "prometheus" || len(sm.Spec.Endpoints) != 2 {
		t.Errorf("ServiceMonitor labels %v, endpoints %d", sm.Labels, len(sm.Spec.Endpoints))
	}
	// Every Service with a metrics or http port is selected by the monitor.
	sel, err := metav1.LabelSelectorAsSelector(&sm.Spec.Selector)
	if err != nil {
		t.Fatal(err)
	}
	for n, s := range r.services {
		if !sel.Matches(labels.Set(s.Labels)) {
			t.Errorf("ServiceMonitor does not select Service %s", n)
		}
	}
	for _, so := range r.scaledObjects {
		for _, tr := range so.Spec.Triggers {
			if tr.Metadata["useHttps"] != "true" || tr.Metadata["natsServerMonitoringEndpoint"] != "nats-headless.bus.svc.cluster.local:8222" {
				t.Errorf("%s trigger metadata %v", so.Name, tr.Metadata)
			}
		}
	}
}

// checkSeedCopy checks that the role's seed reaches the container as a
// 0600 file in memory: the Secret volume holds only the role's key, the
// init container copies it, the container mounts only the copy.
func checkSeedCopy(t *testing.T, c, role string, spec corev1.PodSpec) {
	t.Helper()
	vols := map[string]corev1.Volume{}
	for _, v := range spec.Volumes {
		vols[v.Name] = v
	}
	seeds := vols["nats-seeds"].Secret
	if seeds == nil || seeds.SecretName != "bulkhead-nats-seeds" || len(seeds.Items) != 1 || seeds.Items[0].Key != role+".nk" {
		t.Errorf("%s: nats-seeds volume %+v, want only %s.nk of the Secret", c, vols["nats-seeds"], role)
	}
	if e := vols["nats-creds"].EmptyDir; e == nil || e.Medium != corev1.StorageMediumMemory {
		t.Errorf("%s: nats-creds is not an in-memory emptyDir", c)
	}
	if len(spec.InitContainers) != 1 || !strings.Contains(strings.Join(spec.InitContainers[0].Command, " "), "chmod 0600 /run/bulkhead/nats/"+role+".nk") {
		t.Errorf("%s: init containers %+v", c, spec.InitContainers)
	}
	if spec.SecurityContext.FSGroup != nil {
		t.Errorf("%s: fsGroup set: kubelet would make the seed group-readable, which the node refuses", c)
	}
	for _, m := range spec.Containers[0].VolumeMounts {
		if m.Name == "nats-seeds" {
			t.Errorf("%s: the container mounts the seeds Secret itself", c)
		}
	}
}

func envOf(c corev1.Container) map[string]corev1.EnvVar {
	m := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		m[e.Name] = e
	}
	return m
}

func keysOf[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// TestRenderRefuses: value sets that could not serve stop the render with
// an error naming the value.
func TestRenderRefuses(t *testing.T) {
	const bus = `bus: {url: "nats://x:4222", monitoringEndpoint: "x:8222"}`
	for _, tc := range []struct {
		name string
		set  valueSet
		want string
	}{
		{"pool smaller than the context", valueSet{vals: values(t, `models: [{name: m, file: m.gguf, contextWindow: 4096, kvPoolTokens: 2048, fileBytes: 1, layers: 1, kvHeads: 1, headDim: 1}]`)}, "invariant 5"},
		{"no sizing", valueSet{vals: values(t, `models: [{name: m, file: m.gguf, contextWindow: 4096}]`)}, "models[0].fileBytes"},
		{"no models", valueSet{vals: values(t, `models: []`)}, "at least one model"},
		{"pool scaled to zero", valueSet{vals: values(t, `pools: {decode: {autoscaling: {minReplicas: 0}}}`)}, "pools.decode.autoscaling.minReplicas"},
		{"no jwks", valueSet{vals: values(t, `edge: {jwks: {existingSecret: ""}}`)}, "edge.jwks.existingSecret"},
		{"webhook settings without hosts", valueSet{vals: values(t, `edge: {webhooks: {allowPrivate: true}}`)}, "edge.webhooks"},
		{"no bus", valueSet{alone: true, vals: values(t, `externalRedis: {url: "redis://x:6379/0"}`)}, "bus.url"},
		{"a bus without monitoring", valueSet{alone: true, vals: values(t, `{bus: {url: "nats://x:4222"}, externalRedis: {url: "redis://x:6379/0"}}`)}, "bus.monitoringEndpoint"},
		{"no redis", valueSet{alone: true, vals: values(t, bus)}, "externalRedis.url or externalRedis.existingSecret"},
		{"two redises", valueSet{alone: true, vals: values(t, `{`+bus+`, externalRedis: {url: "redis://x:6379/0", existingSecret: s}}`)}, "not both"},
		{"a password Secret without its key", valueSet{alone: true, vals: values(t, `{`+bus+`, externalRedis: {url: "redis://x:6379/0", passwordSecret: {name: s}}}`)}, "externalRedis.passwordSecret.key"},
		{"the stack without its NATS", valueSet{stack: values(t, `nats: {enabled: false}`)}, "bulkhead.bus.url"},
		{"the stack without its Valkey", valueSet{stack: values(t, `valkey: {enabled: false}`)}, "bulkhead.externalRedis"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.set.template()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one naming %q", err, tc.want)
			}
		})
	}
	// The stack without its own services, pointed at the operator's.
	r := valueSet{stack: values(t, `{nats: {enabled: false}, valkey: {enabled: false}}`), vals: values(t, `{`+bus+`, externalRedis: {url: "redis://r:6379/0", passwordSecret: null}}`)}.render(t)
	if len(r.secrets) != 0 {
		t.Errorf("Secrets %v without Valkey", keysOf(r.secrets))
	}
	if got := envOf(r.deployments[name("edge")].Spec.Template.Spec.Containers[0])["BULKHEAD_REDIS"].Value; got != "redis://r:6379/0" {
		t.Errorf("edge BULKHEAD_REDIS %q", got)
	}
	// The pool may be smaller with --clamp-context: the worker advertises
	// what it holds.
	r = render(t, values(t, `{workers: {clampContext: true}, models: [{name: m, file: m.gguf, contextWindow: 4096, kvPoolTokens: 2048, fileBytes: 1, layers: 1, kvHeads: 1, headDim: 1}]}`))
	_, flags := args(t, r.deployments[name("decode")].Spec.Template.Spec.Containers[0])
	if _, ok := flags["clamp-context"]; !ok {
		t.Errorf("decode flags %v: no --clamp-context", flags)
	}
}

// TestRenderWebhooks: edge.webhooks become the edge's --webhook-* flags,
// its CA Secret mounted read-only; without hosts, no flag at all.
func TestRenderWebhooks(t *testing.T) {
	_, flags := args(t, render(t, nil).deployments[name("edge")].Spec.Template.Spec.Containers[0])
	for f := range flags {
		if strings.HasPrefix(f, "webhook") {
			t.Errorf("--%s by default", f)
		}
	}
	r := render(t, values(t, `edge: {webhooks: {hosts: [hooks.example.com, "*.example.org"], allowPrivate: true, caSecret: hooks-ca}}`))
	spec := r.deployments[name("edge")].Spec.Template.Spec
	_, flags = args(t, spec.Containers[0])
	if flags["webhook-hosts"] != "hooks.example.com,*.example.org" || flags["webhook-ca"] != "/etc/bulkhead/webhook-ca/ca.crt" {
		t.Errorf("edge flags %v", flags)
	}
	if _, ok := flags["webhook-allow-private"]; !ok {
		t.Errorf("no --webhook-allow-private in %v", flags)
	}
	mounted := false
	for _, m := range spec.Containers[0].VolumeMounts {
		mounted = mounted || (m.Name == "webhook-ca" && m.MountPath == "/etc/bulkhead/webhook-ca" && m.ReadOnly)
	}
	var secret string
	for _, v := range spec.Volumes {
		if v.Name == "webhook-ca" && v.Secret != nil {
			secret = v.Secret.SecretName
		}
	}
	if !mounted || secret != "hooks-ca" {
		t.Errorf("webhook CA mounted %v from Secret %q", mounted, secret)
	}
}

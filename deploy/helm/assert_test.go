package chart

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/bulkhead-ai/bulkhead/models/catalog"
	"github.com/bulkhead-ai/bulkhead/queue"
	"github.com/bulkhead-ai/bulkhead/workers/engine"
	"github.com/bulkhead-ai/bulkhead/workers/kvcache"
)

// valueSets are the renders every structural assertion runs on: the
// all-in-one defaults, and the bulkhead chart alone on external services.
func valueSets(t *testing.T) map[string]valueSet {
	return map[string]valueSet{
		"defaults": {},
		"external": {alone: true, vals: values(t, externalValues)},
	}
}

// TestProbes: every container's readiness probe is GET /readyz and its
// liveness probe GET /healthz, on the named port that the container
// declares and that the node listens on (--listen for the edge,
// --metrics-listen for workers and billing: the only listener they have).
func TestProbes(t *testing.T) {
	for set, vs := range valueSets(t) {
		r := vs.render(t)
		for n, d := range r.deployments {
			t.Run(set+"/"+n, func(t *testing.T) {
				c := d.Spec.Template.Spec.Containers[0]
				if len(d.Spec.Template.Spec.Containers) != 1 {
					t.Fatalf("%d containers", len(d.Spec.Template.Spec.Containers))
				}
				cmd, flags := args(t, c)
				listen := flags["metrics-listen"]
				if cmd == "edge" {
					listen = flags["listen"]
				}
				_, portText, ok := strings.Cut(listen, ":")
				port, err := strconv.Atoi(portText)
				if !ok || err != nil {
					t.Fatalf("%s listens on %q", cmd, listen)
				}
				for _, p := range []struct {
					probe *corev1.Probe
					path  string
				}{{c.ReadinessProbe, "/readyz"}, {c.LivenessProbe, "/healthz"}} {
					if p.probe == nil || p.probe.HTTPGet == nil {
						t.Fatalf("no HTTP probe for %s", p.path)
					}
					g := p.probe.HTTPGet
					if g.Path != p.path {
						t.Errorf("probe path %q, want %q", g.Path, p.path)
					}
					if got := containerPort(t, c, g.Port); got != int32(port) {
						t.Errorf("%s probe on port %d, but the node listens on %d", p.path, got, port)
					}
				}
			})
		}
	}
}

func containerPort(t *testing.T, c corev1.Container, p intstr.IntOrString) int32 {
	t.Helper()
	for _, cp := range c.Ports {
		if (p.Type == intstr.String && cp.Name == p.StrVal) || (p.Type == intstr.Int && cp.ContainerPort == p.IntVal) {
			return cp.ContainerPort
		}
	}
	t.Fatalf("port %s is not a port of container %s", p.String(), c.Name)
	return 0
}

// TestGracePeriod: a pod is given at least its preStop pause plus the drain
// grace its node is told (--drain-grace) before Kubernetes kills it, so the
// drain is never cut short.
func TestGracePeriod(t *testing.T) {
	for _, grace := range []int{60, 300} {
		r := render(t, values(t, fmt.Sprintf(`{drainGraceSeconds: %d, terminationMarginSeconds: 10}`, grace)))
		for n, d := range r.deployments {
			spec := d.Spec.Template.Spec
			drain := time.Duration(grace) * time.Second
			if _, flags := args(t, spec.Containers[0]); flags["drain-grace"] != "" {
				var err error
				if drain, err = time.ParseDuration(flags["drain-grace"]); err != nil {
					t.Fatalf("%s --drain-grace: %v", n, err)
				}
			} else {
				t.Errorf("%s: no --drain-grace", n)
			}
			if drain != time.Duration(grace)*time.Second {
				t.Errorf("%s: --drain-grace %v, want drainGraceSeconds %d", n, drain, grace)
			}
			var pause time.Duration
			if l := spec.Containers[0].Lifecycle; l != nil && l.PreStop != nil && l.PreStop.Sleep != nil {
				pause = time.Duration(l.PreStop.Sleep.Seconds) * time.Second
			}
			if spec.TerminationGracePeriodSeconds == nil {
				t.Fatalf("%s: no terminationGracePeriodSeconds", n)
			}
			got := time.Duration(*spec.TerminationGracePeriodSeconds) * time.Second
			if got < pause+drain {
				t.Errorf("%s: terminationGracePeriodSeconds %v < preStop %v + drain %v", n, got, pause, drain)
			}
		}
	}
}

// TestDisruptionBudgets: each PodDisruptionBudget selects the pods of its
// own Deployment and of no other.
func TestDisruptionBudgets(t *testing.T) {
	for set, vs := range valueSets(t) {
		r := vs.render(t)
		if len(r.pdbs) != len(r.deployments) {
			t.Errorf("%s: %d budgets for %d deployments", set, len(r.pdbs), len(r.deployments))
		}
		for n, pdb := range r.pdbs {
			sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
			if err != nil || sel.Empty() {
				t.Fatalf("%s %s: selector %v (%v)", set, n, pdb.Spec.Selector, err)
			}
			var selected []string
			for dn, d := range r.deployments {
				if sel.Matches(labels.Set(d.Spec.Template.Labels)) {
					selected = append(selected, dn)
				}
				// The Deployment's own selector must match its pods, too.
				own, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
				if err != nil || !own.Matches(labels.Set(d.Spec.Template.Labels)) {
					t.Errorf("%s: Deployment %s does not select its own pods", set, dn)
				}
			}
			if len(selected) != 1 || selected[0] != n {
				t.Errorf("%s: budget %s selects %v, want only Deployment %s", set, n, selected, n)
			}
			if (pdb.Spec.MinAvailable == nil) == (pdb.Spec.MaxUnavailable == nil) {
				t.Errorf("%s: budget %s wants exactly one of minAvailable and maxUnavailable", set, n)
			}
		}
	}
}

// TestResources: a worker's memory request (and limit) is every model's
// file plus the KV pool the engine allocates for it, plus the overhead,
// rounded up to MiB; its CPU request is its kernel threads. The KV part is
// measured on the engine itself for the shared stories260K model, and
// computed with kvcache for a two-model set.
func TestResources(t *testing.T) {
	const overhead = 256 << 20
	t.Run("stories260K through the engine", func(t *testing.T) {
		path, err := filepath.Abs("../../../shared/models/stories260K.gguf")
		if err != nil {
			t.Fatal(err)
		}
		st, err := os.Stat(path)
		if err != nil {
			t.Fatalf("reference model missing (the tests read ../shared beside the repository): %v", err)
		}
		m, err := engine.Load(path)
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		h := m.Hyper
		const window, pool = 512, 1000 // a pool that is not a whole number of pages
		en, err := engine.New(nil, m, engine.Config{Threads: 1, Context: window, KVTokens: pool})
		if err != nil {
			t.Fatal(err)
		}
		en.Close()
		kv := int64(en.KV().TotalPages()) * en.KV().BytesPerPage()
		r := render(t, values(t, fmt.Sprintf(`
workers: {threads: 3, memoryOverheadBytes: %d}
models:
  - {name: "@cf/tinyllamas/stories260k", file: stories260K.gguf, contextWindow: %d, kvPoolTokens: %d,
     fileBytes: %d, layers: %d, kvHeads: %d, headDim: %d}`, overhead, window, pool, st.Size(), h.Layers, h.KVHeads, h.HeadDim)))
		checkWorkerResources(t, r, 3, st.Size()+kv+overhead)
	})
	t.Run("two models", func(t *testing.T) {
		type model struct {
			window, pool, file, layers, heads, dim int64
		}
		ms := []model{
			{8192, 32768, 1_321_083_072, 16, 8, 64},   // a llama-3.2-1b shape
			{32768, 40001, 4_920_739_232, 28, 4, 128}, // a qwen2.5-7b shape, a partial last page
		}
		want := int64(overhead)
		var doc strings.Builder
		fmt.Fprintf(&doc, "workers: {threads: 8, memoryOverheadBytes: %d}\nmodels:\n", overhead)
		for i, m := range ms {
			b, err := kvcache.Config{Layers: int(m.layers), KVHeads: int(m.heads), HeadDim: int(m.dim)}.BytesForTokens(int(m.pool))
			if err != nil {
				t.Fatal(err)
			}
			want += m.file + b
			fmt.Fprintf(&doc, "  - {name: m%d, file: m%d.gguf, contextWindow: %d, kvPoolTokens: %d, fileBytes: %d, layers: %d, kvHeads: %d, headDim: %d}\n",
				i, i, m.window, m.pool, m.file, m.layers, m.heads, m.dim)
		}
		checkWorkerResources(t, render(t, values(t, doc.String())), 8, want)
	})
}

func checkWorkerResources(t *testing.T, r *rendered, threads int64, bytes int64) {
	t.Helper()
	wantMem := resource.MustParse(fmt.Sprintf("%dMi", int64(math.Ceil(float64(bytes)/(1<<20)))))
	for _, role := range []string{"prefill", "decode"} {
		c := r.deployments[name(role)].Spec.Template.Spec.Containers[0]
		req, lim := c.Resources.Requests, c.Resources.Limits
		if got := req[corev1.ResourceMemory]; got.Cmp(wantMem) != 0 {
			t.Errorf("%s memory request %s, want %s (%d bytes)", role, got.String(), wantMem.String(), bytes)
		}
		if got := lim[corev1.ResourceMemory]; got.Cmp(wantMem) != 0 {
			t.Errorf("%s memory limit %s, want %s", role, got.String(), wantMem.String())
		}
		if got := req[corev1.ResourceCPU]; got.Value() != threads {
			t.Errorf("%s cpu request %s, want %d", role, got.String(), threads)
		}
		if _, flags := args(t, c); flags["threads"] != strconv.FormatInt(threads, 10) {
			t.Errorf("%s --threads %q, want %d", role, flags["threads"], threads)
		}
	}
}

// oddModels have names whose subject tokens need escaping and hashing.
const oddModels = `
models:
  - {name: "@cf/meta/llama-3.2-1b-instruct", file: a.gguf, contextWindow: 2048, fileBytes: 1, layers: 1, kvHeads: 1, headDim: 1}
  - {name: "@hf/Qwen/Qwen3-0.6B-GGUF/Qwen3-0.6B-Q8_0", file: b.gguf, contextWindow: 2048, fileBytes: 1, layers: 1, kvHeads: 1, headDim: 1,
     description: "with prices", prices: {prompt: 10, completion: 20.5}, properties: {default_max_tokens: "128", license: apache-2.0}}
  - {name: "__Ünïcode.Model__", file: c.gguf, contextWindow: 1024, kvPoolTokens: 4096, fileBytes: 1, layers: 1, kvHeads: 1, headDim: 1}
`

// TestCatalog: the ConfigMap is a catalog models/catalog's strict loader
// accepts, naming every model at its mounted path with its window and pool.
func TestCatalog(t *testing.T) {
	r := render(t, values(t, oddModels))
	cm := r.configMaps[name("catalog")]
	cat, err := catalog.Parse([]byte(cm.Data["catalog.yaml"]), "/etc/bulkhead/catalog")
	if err != nil {
		t.Fatalf("catalog.Parse: %v\n%s", err, cm.Data["catalog.yaml"])
	}
	want := []struct {
		name, path string
		window, kv int
	}{
		{"@cf/meta/llama-3.2-1b-instruct", "/models/a.gguf", 2048, 2048},
		{"@hf/Qwen/Qwen3-0.6B-GGUF/Qwen3-0.6B-Q8_0", "/models/b.gguf", 2048, 2048},
		{"__Ünïcode.Model__", "/models/c.gguf", 1024, 4096},
	}
	if got := len(cat.Models()); got != len(want) {
		t.Fatalf("%d models, want %d", got, len(want))
	}
	for _, w := range want {
		m, ok := cat.Lookup(w.name)
		if !ok {
			t.Fatalf("%s not in the catalog", w.name)
		}
		if m.Path != w.path || m.ContextWindow != w.window || m.KVPoolTokens != w.kv {
			t.Errorf("%s: path %s window %d kv %d, want %s %d %d", w.name, m.Path, m.ContextWindow, m.KVPoolTokens, w.path, w.window, w.kv)
		}
	}
	if m, _ := cat.Lookup(want[1].name); m.Prices.NeuronsPerMPromptTokens != 10 || m.Prices.NeuronsPerMCompletionTokens != 20.5 {
		t.Errorf("prices %+v", m.Prices)
	}
	if m, _ := cat.Lookup(want[1].name); m.Properties["default_max_tokens"] != "128" || m.Properties["license"] != "apache-2.0" {
		t.Errorf("properties %v", m.Properties)
	}
	// Every edge and worker loads this file from the mounted ConfigMap.
	for n, d := range r.deployments {
		if cmd, flags := args(t, d.Spec.Template.Spec.Containers[0]); cmd != "billing" && flags["catalog"] != "/etc/bulkhead/catalog/catalog.yaml" {
			t.Errorf("%s --catalog %q", n, flags["catalog"])
		}
	}
}

// TestScaledObjects: each autoscaled pool has a ScaledObject on its own
// Deployment (which then leaves replicas to KEDA) with one nats-jetstream
// trigger per model, on the stream and durable consumer the pool's workers
// pull from (queue's names), and KEDA's own trigger validation passes.
func TestScaledObjects(t *testing.T) {
	vals := values(t, oddModels)
	vals["pools"] = map[string]any{"unified": map[string]any{"enabled": true, "autoscaling": map[string]any{"enabled": true}}}
	r := render(t, vals)
	streams := map[string]string{"prefill": queue.JobsStream, "unified": queue.JobsStream, "decode": queue.DecodeStream}
	consumers := map[string]func(string) string{"prefill": queue.ConsumerName, "unified": queue.ConsumerName, "decode": queue.DecodeConsumerName}
	cat, err := catalog.Parse([]byte(r.configMaps[name("catalog")].Data["catalog.yaml"]), "/")
	if err != nil {
		t.Fatal(err)
	}
	for role := range streams {
		so := r.scaledObjects[name(role)]
		if so == nil {
			t.Fatalf("no ScaledObject for %s", role)
		}
		d := r.deployments[name(role)]
		if ref := so.Spec.ScaleTargetRef; ref == nil || ref.Name != d.Name || ref.Kind != "Deployment" {
			t.Errorf("%s scales %+v, want Deployment %s", role, so.Spec.ScaleTargetRef, d.Name)
		}
		if d.Spec.Replicas != nil {
			t.Errorf("%s: Deployment sets replicas %d although KEDA owns them", role, *d.Spec.Replicas)
		}
		if so.Spec.MinReplicaCount == nil || *so.Spec.MinReplicaCount < 1 {
			t.Errorf("%s: minReplicaCount %v, want >= 1", role, so.Spec.MinReplicaCount)
		}
		if err := kedav1alpha1.ValidateTriggers(so.Spec.Triggers); err != nil {
			t.Errorf("%s: KEDA refuses the triggers: %v", role, err)
		}
		var got, want []string
		for _, tr := range so.Spec.Triggers {
			if tr.Type != "nats-jetstream" {
				t.Errorf("%s: trigger type %q", role, tr.Type)
			}
			md := tr.Metadata
			for _, k := range []string{"natsServerMonitoringEndpoint", "account", "stream", "consumer", "lagThreshold", "activationLagThreshold", "useHttps"} {
				if md[k] == "" {
					t.Errorf("%s: trigger without %s", role, k)
				}
			}
			if n, err := strconv.Atoi(md["lagThreshold"]); err != nil || n <= 0 {
				t.Errorf("%s: lagThreshold %q", role, md["lagThreshold"])
			}
			if md["account"] != "$G" {
				t.Errorf("%s: account %q", role, md["account"])
			}
			got = append(got, md["stream"]+"/"+md["consumer"])
		}
		for _, m := range cat.Models() {
			want = append(want, streams[role]+"/"+consumers[role](m.Name))
		}
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("%s triggers %v, want %v", role, got, want)
		}
	}
	// Without autoscaling the Deployment keeps its replica count and no
	// ScaledObject is made.
	r = render(t, values(t, `pools: {decode: {replicas: 3, autoscaling: {enabled: false}}}`))
	if r.scaledObjects[name("decode")] != nil {
		t.Error("a decode ScaledObject with autoscaling off")
	}
	if rep := r.deployments[name("decode")].Spec.Replicas; rep == nil || *rep != 3 {
		t.Errorf("decode replicas %v, want 3", rep)
	}
}

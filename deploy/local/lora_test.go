//go:build cluster

package local

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/bulkhead-ai/bulkhead/edge/auth"
	edgeclient "github.com/bulkhead-ai/bulkhead/edge/client"
	"github.com/bulkhead-ai/bulkhead/models/builtin"
	"github.com/bulkhead-ai/bulkhead/models/lora"
	"github.com/bulkhead-ai/bulkhead/models/synth"
)

// TestAdapterOnEveryWorker: a LoRA adapter uploaded through one edge is
// served through the other by every worker of the cluster (the prefill
// worker and both decode workers fetch and load it), with one NATS server
// of three killed after the upload: the adapter's records and files are
// replicated like the streams. Every answer under the adapter is the same
// greedy text, and not the base model's.
func TestAdapterOnEveryWorker(t *testing.T) {
	ctx := context.Background()
	const tenant = "fault-lora"
	key, err := auth.LoadOrCreateDevKey(shared.State.KeyDir)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := key.Mint(tenant, []string{auth.ScopeRun, auth.ScopeFinetunesWrite}, nil, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	edges := shared.State.ByRole(RoleEdge)
	up := edgeclient.New(shared.EdgeURL(edges[0]), tok, edgeclient.WithAccount(tenant))
	down := edgeclient.New(shared.EdgeURL(edges[1]), tok)

	adapter := synthAdapter(t)
	ft, err := up.CreateFinetune(ctx, "cluster-poet", shared.State.Model, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := up.UploadFinetuneAsset(ctx, ft.ID, "adapter.gguf", bytes.NewReader(adapter)); err != nil {
		t.Fatal(err)
	}
	n := proc(t, "nats-0")
	_ = kill(t, n, syscall.SIGKILL)
	defer restart(t, n)

	zero := 0.0
	// A request in flight while the cluster replaces the dead server's
	// stream and consumer leaders, or while a worker's connection moves to
	// another server, may time out or be refused as unavailable
	// (TestKillNATSServer counts such clear errors); a client retries it,
	// pausing longer each time, as the SDKs do.
	run := func(lora string) string {
		t.Helper()
		for try := 1; ; try++ {
			res, err := down.Run(ctx, shared.State.Model, edgeclient.RunRequest{Prompt: "Once upon a time", Raw: true, MaxTokens: 24, Temperature: &zero, Lora: lora})
			var apiErr *edgeclient.APIError
			switch {
			case err == nil:
				return res.Response
			case try < 8 && errors.As(err, &apiErr) && (apiErr.Status == http.StatusRequestTimeout || apiErr.Status >= 500):
				t.Logf("lora %q, try %d: %v; retrying", lora, try, err)
				time.Sleep(time.Duration(try) * 500 * time.Millisecond)
			default:
				t.Fatalf("lora %q: %v", lora, err)
			}
		}
	}
	base, tuned := run(""), run("cluster-poet")
	if tuned == base {
		t.Fatalf("the adapter changed nothing: %q", base)
	}
	workers := append(shared.State.ByRole(RolePrefill), shared.State.ByRole(RoleDecode)...)
	for i := 0; ; i++ {
		missing := ""
		for _, w := range workers {
			if loraLoads(t, w) == 0 {
				missing = w.Name
			}
		}
		if missing == "" {
			t.Logf("every worker loaded the adapter after %d requests", i+1)
			break
		}
		if i == 150 {
			t.Fatalf("%s never loaded the adapter in %d requests", missing, i+1)
		}
		if got := run(ft.ID); got != tuned {
			t.Fatalf("request %d under the adapter: %q, the first %q", i, got, tuned)
		}
	}
}

// synthAdapter writes a random rank-8 adapter on every projection of the
// built-in model.
func synthAdapter(t *testing.T) []byte {
	t.Helper()
	path, err := builtin.WriteTo(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	a, err := synth.LoRA(synth.LoRAConfig{Base: path, Rank: 8, Targets: []lora.Target{lora.AttnQ, lora.AttnK, lora.AttnV, lora.AttnOutput, lora.FFNGate, lora.FFNUp, lora.FFNDown}, Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := lora.WriteGGUF(&b, a); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

var loadsOK = regexp.MustCompile(`(?m)^bulkhead_worker_lora_loads_total\{[^}]*outcome="ok"[^}]*\} (\d+)`)

// loraLoads reads a worker's count of adapters it loaded from its /metrics.
func loraLoads(t *testing.T, w *Proc) int {
	t.Helper()
	resp, err := http.Get(fmt.Sprintf("http://%s/metrics", w.Addr))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	total := 0
	for _, m := range loadsOK.FindAllSubmatch(b, -1) {
		n, _ := strconv.Atoi(string(m[1]))
		total += n
	}
	return total
}

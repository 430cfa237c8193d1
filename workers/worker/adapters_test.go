package worker

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bulkhead-ai/bulkhead/models/lora"
	"github.com/bulkhead-ai/bulkhead/models/refdatatest"
	"github.com/bulkhead-ai/bulkhead/models/synth"
	"github.com/bulkhead-ai/bulkhead/models/testkit"
	"github.com/bulkhead-ai/bulkhead/models/testkit/promtest"
	"github.com/bulkhead-ai/bulkhead/queue"
	"github.com/bulkhead-ai/bulkhead/workers/engine"
)

// TestAdapterFailuresEndTheJob: a job whose adapter cannot be fetched (it
// names another tenant's finetune: the worker looks among its own tenant's
// objects only) or loaded ends with a lora_failed error frame, and the
// worker goes on serving.
func TestAdapterFailuresEndTheJob(t *testing.T) {
	ev := startNATS(t)
	e := startEngine(t, engine.Config{})
	startWorker(t, ev, Config{Models: map[string]*engine.Engine{model: e}, LoRADir: t.TempDir()})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ft, err := queue.OpenFinetunes(ctx, ev.js)
	if err != nil {
		t.Fatal(err)
	}
	f, err := ft.Create(ctx, "tenant-a", queue.Finetune{Name: "a", Model: model})
	if err != nil {
		t.Fatal(err)
	}
	if f, err = ft.PutFile(ctx, "tenant-a", f.ID, "adapter.gguf", []byte("not a GGUF adapter")); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, tenant, message string
	}{
		{"another tenant's finetune", "tenant-b", "files are gone"},
		{"not an adapter", "tenant-a", "could not be loaded"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			job := newJob(t, "Once upon a time", 4)
			job.Tenant, job.LoRA = tc.tenant, f.Ref()
			r, err := ev.client.Submit(ctx, job)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			frames, err := collect(t, r)
			if !errors.Is(err, io.EOF) || len(frames) != 1 {
				t.Fatalf("%d frames then %v; want one error frame", len(frames), err)
			}
			if fe := frames[0].Error; frames[0].Kind != queue.KindError || fe.Kind != queue.ErrKindAdapter || !strings.Contains(fe.Message, tc.message) {
				t.Fatalf("frame %+v %+v, want %s mentioning %q", frames[0], fe, queue.ErrKindAdapter, tc.message)
			}
		})
	}
	job := newJob(t, "Once upon a time", 4)
	r, err := ev.client.Submit(ctx, job)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	frames, err := collect(t, r)
	if !errors.Is(err, io.EOF) || len(frames) == 0 || frames[len(frames)-1].Kind != queue.KindFinal {
		t.Fatalf("a job without adapter after the failures: %d frames, %v", len(frames), err)
	}
}

// synthAdapter is a random rank-8 attention adapter for stories260K as
// GGUF bytes, and its size once bound to e's model.
func synthAdapter(t *testing.T, e *engine.Engine, seed uint64) ([]byte, int64) {
	t.Helper()
	a, err := synth.LoRA(synth.LoRAConfig{Base: refdatatest.Path(t, "models/stories260K.gguf"), Rank: 8,
		Targets: []lora.Target{lora.AttnQ, lora.AttnK, lora.AttnV, lora.AttnOutput}, Seed: seed})
	if err != nil {
		t.Fatal(err)
	}
	bound, err := engine.BindAdapter(e.Model(), a, 1, "")
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := lora.WriteGGUF(&buf, a); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes(), bound.Bytes()
}

// TestAdaptersCachedAndEvicted: a job with an adapter runs with it (its
// greedy text differs from the base model's, and is the same each time);
// the adapter is loaded once, and a second adapter over the memory budget
// evicts the first, which is loaded again when asked for. The metrics
// count every load and eviction; usage events name the adapter.
func TestAdaptersCachedAndEvicted(t *testing.T) {
	ev := startNATS(t)
	e := startEngine(t, engine.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ft, err := queue.OpenFinetunes(ctx, ev.js)
	if err != nil {
		t.Fatal(err)
	}
	refs := map[string]*queue.LoRARef{}
	var size int64
	for i, name := range []string{"a", "b"} {
		data, n := synthAdapter(t, e, uint64(i+1))
		size = n
		f, err := ft.Create(ctx, "tenant-a", queue.Finetune{Name: name, Model: model})
		if err == nil {
			f, err = ft.PutFile(ctx, "tenant-a", f.ID, "adapter.gguf", data)
		}
		if err != nil {
			t.Fatal(err)
		}
		refs[name] = f.Ref()
	}
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	startWorker(t, ev, Config{Models: map[string]*engine.Engine{model: e}, Metrics: m, Name: "w", LoRAMemory: size * 3 / 2})
	usage := countUsage(t, ev.nc)
	text := func(ref *queue.LoRARef) string {
		t.Helper()
		job := newJob(t, "Once upon a time", 16)
		job.LoRA = ref
		defer func() {
			want := queue.UsageEvent{}
			if ref != nil {
				want.LoRA, want.LoRAName = ref.ID, ref.Name
			}
			testkit.Poll(t, 10*time.Second, testkit.Cond("the job's usage event", func() bool { return len(usage.get(job.ID)) == 1 }))
			if got := usage.get(job.ID)[0]; got.LoRA != want.LoRA || got.LoRAName != want.LoRAName {
				t.Errorf("usage event names lora %q %q, want %q %q", got.LoRA, got.LoRAName, want.LoRA, want.LoRAName)
			}
		}()
		r, err := ev.client.Submit(ctx, job)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		frames, err := collect(t, r)
		if !errors.Is(err, io.EOF) || len(frames) == 0 || frames[len(frames)-1].Kind != queue.KindFinal {
			t.Fatalf("%d frames, %v (last %+v)", len(frames), err, frames[len(frames)-1].Error)
		}
		var s strings.Builder
		for _, f := range frames {
			s.WriteString(f.Text)
		}
		return s.String()
	}
	count := func(name string, labels map[string]string) float64 { return promtest.Sum(t, reg, name, labels) }
	base, withA := text(nil), text(refs["a"])
	if base == withA {
		t.Fatalf("adapter a changed nothing: %q", base)
	}
	for _, step := range []struct {
		name                   string
		ref                    string
		loads, evictions, held float64
	}{
		{"a again: cached", "a", 1, 0, 1},
		{"b: evicts a", "b", 2, 1, 1},
		{"a: loaded again", "a", 3, 2, 1},
	} {
		got := text(refs[step.ref])
		if step.ref == "a" && got != withA {
			t.Errorf("%s: %q, want %q", step.name, got, withA)
		}
		if l, ev, held := count("bulkhead_worker_lora_loads_total", map[string]string{"outcome": "ok"}),
			count("bulkhead_worker_lora_evictions_total", nil), count("bulkhead_worker_lora_adapters", nil); l != step.loads || ev != step.evictions || held != step.held {
			t.Errorf("%s: loads %v evictions %v resident %v, want %v %v %v", step.name, l, ev, held, step.loads, step.evictions, step.held)
		}
	}
	if b := count("bulkhead_worker_lora_bytes", nil); b != float64(size) {
		t.Errorf("resident bytes %v, want %d", b, size)
	}
}

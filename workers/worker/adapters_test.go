package worker

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

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

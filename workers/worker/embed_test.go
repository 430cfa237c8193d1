package worker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bulkhead-ai/bulkhead/models/gguf"
	"github.com/bulkhead-ai/bulkhead/models/synth"
	"github.com/bulkhead-ai/bulkhead/models/testkit"
	"github.com/bulkhead-ai/bulkhead/queue"
	"github.com/bulkhead-ai/bulkhead/workers/encoder"
	"github.com/bulkhead-ai/bulkhead/workers/kernels"
)

const embedModel = "@cf/test/bert-tiny"

// startEncoder runs an encoder server on synth's shape (Q8_0) until the test
// ends.
func startEncoder(t *testing.T, shape string) (*encoder.Server, *encoder.Model) {
	t.Helper()
	path := filepath.Join(t.TempDir(), shape+".gguf")
	if err := synth.GenerateFile(synth.Config{Shape: shape, Type: gguf.TypeQ8_0}, path); err != nil {
		t.Fatal(err)
	}
	m, err := encoder.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	pool := kernels.NewPool(1)
	e := encoder.New(m, pool)
	srv, err := encoder.NewServer(e, e.Info(), encoder.ServerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { srv.Run(ctx) })
	t.Cleanup(func() { cancel(); wg.Wait(); pool.Close(); m.Close() })
	return srv, m
}

func embedJob(tenant string, e *queue.Embed) *queue.Job {
	jobSeq++
	id := fmt.Sprintf("embed-%d", jobSeq)
	return &queue.Job{ID: id, Tenant: tenant, Model: embedModel, Embed: e, Reply: queue.ReplySubject(id),
		Deadline: time.Now().Add(time.Minute)}
}

// runEmbed submits job and returns its final frame's vectors, or the error
// frame.
func runEmbed(t *testing.T, ev *env, job *queue.Job) ([][]float32, *queue.Frame) {
	t.Helper()
	r, err := ev.client.Submit(context.Background(), job)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	frames, err := collect(t, r)
	if !errors.Is(err, io.EOF) || len(frames) != 1 {
		t.Fatalf("stream ended with %v after %d frames", err, len(frames))
	}
	f := frames[0]
	if f.Kind != queue.KindFinal {
		return nil, f
	}
	v, err := f.Vectors.Unpack()
	if err != nil {
		t.Fatal(err)
	}
	return v, f
}

// TestEmbedJobs: encoder jobs of two tenants, sent at once (64 inputs), come
// back in order with the vectors of the encoder itself, normalised when
// asked, and each tenant's usage event counts its own tokens; bad jobs get
// their error kinds.
func TestEmbedJobs(t *testing.T) {
	ev := startNATS(t)
	srv, m := startEncoder(t, "bert-tiny")
	usage := countUsage(t, ev.nc)
	startWorker(t, ev, Config{Encoders: map[string]*encoder.Server{embedModel: srv}})

	texts := map[string][]string{}
	for i := range 40 {
		texts["tenant-a"] = append(texts["tenant-a"], fmt.Sprintf("alpha %d the cat sat on the mat", i))
	}
	for i := range 24 {
		texts["tenant-b"] = append(texts["tenant-b"], fmt.Sprintf("beta %d a dog ran in the park %d", i, i*i))
	}
	jobs := map[string]*queue.Job{}
	got := map[string][][]float32{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for tenant, in := range texts {
		job := embedJob(tenant, &queue.Embed{Inputs: in, Normalize: true})
		jobs[tenant] = job
		wg.Go(func() {
			v, f := runEmbed(t, ev, job)
			if v == nil {
				t.Errorf("%s: %+v", tenant, f.Error)
			}
			mu.Lock()
			got[tenant] = v
			mu.Unlock()
		})
	}
	wg.Wait()
	ref := encoder.New(m, kernels.NewPool(1))
	for tenant, in := range texts {
		tokens := 0
		for i, text := range in {
			ids := m.Tokenize(text)
			tokens += len(ids)
			want, err := ref.Encode([][]int32{ids})
			if err != nil {
				t.Fatal(err)
			}
			encoder.Normalize(want[0])
			if !slices.Equal(got[tenant][i], want[0]) {
				t.Fatalf("%s input %d: not the encoder's vector", tenant, i)
			}
		}
		job := jobs[tenant]
		testkit.Poll(t, 5*time.Second, func() error {
			evs := usage.get(job.ID)
			if len(evs) != 1 {
				return errors.New("no usage event")
			}
			if u := evs[0]; u.Tenant != tenant || u.PromptTokens != tokens || u.CompletionTokens != 0 || u.Neurons <= 0 {
				t.Fatalf("%s usage %+v, want %d prompt tokens", tenant, u, tokens)
			}
			return nil
		})
	}
	var norm float64
	for _, x := range got["tenant-b"][3] {
		norm += float64(x) * float64(x)
	}
	if math.Abs(norm-1) > 1e-5 {
		t.Errorf("a normalised vector has squared length %v", norm)
	}

	long := strings.Repeat("word ", m.Hyper.Context)
	for _, tc := range []struct {
		name string
		job  *queue.Job
		kind queue.ErrorKind
		text string
	}{
		{"over the window", embedJob("tenant-a", &queue.Embed{Inputs: []string{"ok", long}}), queue.ErrKindPromptTooLong, "input 1 of"},
		{"a query for an embedder", embedJob("tenant-a", &queue.Embed{Inputs: []string{"x"}, Query: "q"}), queue.ErrKindInvalidInput, "takes no query"},
		{"a token past the vocabulary", embedJob("tenant-a", &queue.Embed{Tokens: [][]int32{{5, int32(m.Hyper.Vocab)}}}), queue.ErrKindInvalidInput, "vocabulary"},
		{"a generation job", newJobFor(embedModel), queue.ErrKindInvalidInput, "does not generate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, f := runEmbed(t, ev, tc.job)
			if v != nil || f.Error == nil || f.Error.Kind != tc.kind || !strings.Contains(f.Error.Message, tc.text) {
				t.Fatalf("frame %+v error %+v, want %s mentioning %q", f, f.Error, tc.kind, tc.text)
			}
		})
	}
	t.Run("truncated when asked", func(t *testing.T) {
		v, f := runEmbed(t, ev, embedJob("tenant-a", &queue.Embed{Inputs: []string{long}, Truncate: true}))
		if v == nil || f.Usage.PromptTokens != m.Hyper.Context {
			t.Fatalf("frame %+v usage %+v, want %d tokens", f, f.Usage, m.Hyper.Context)
		}
	})
	t.Run("token ids", func(t *testing.T) {
		ids := m.Tokenize("hello world")
		v, _ := runEmbed(t, ev, embedJob("tenant-a", &queue.Embed{Tokens: [][]int32{ids[1 : len(ids)-1]}}))
		w, _ := runEmbed(t, ev, embedJob("tenant-a", &queue.Embed{Inputs: []string{"hello world"}}))
		if v == nil || !slices.Equal(v[0], w[0]) {
			t.Fatal("token ids without the special tokens did not give the text's vector")
		}
	})
}

// newJobFor is a generation job for model.
func newJobFor(model string) *queue.Job {
	jobSeq++
	id := fmt.Sprintf("gen-%d", jobSeq)
	return &queue.Job{ID: id, Tenant: "tenant-a", Model: model, Prompt: "hello", MaxTokens: 4,
		Reply: queue.ReplySubject(id), Deadline: time.Now().Add(time.Minute)}
}

// TestRerankJobs: a reranker scores each text against the query, as the
// encoder scores the (query, text) pair.
func TestRerankJobs(t *testing.T) {
	ev := startNATS(t)
	srv, m := startEncoder(t, "bert-rank-tiny")
	startWorker(t, ev, Config{Encoders: map[string]*encoder.Server{embedModel: srv}})
	docs := []string{"a cat is a small animal", "the sun is hot", "cats sleep a lot"}
	v, f := runEmbed(t, ev, embedJob("tenant-a", &queue.Embed{Inputs: docs, Query: "what is a cat", Normalize: true}))
	if v == nil {
		t.Fatalf("%+v", f.Error)
	}
	if f.Vectors.Pooling != "rank" {
		t.Errorf("pooling %q", f.Vectors.Pooling)
	}
	ref := encoder.New(m, kernels.NewPool(1))
	for i, d := range docs {
		want, err := ref.Encode([][]int32{m.PairTokens("what is a cat", d)})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(v[i], want[0]) {
			t.Errorf("doc %d: score %v, the encoder's %v (scores are never normalised)", i, v[i], want[0])
		}
	}
	if _, f := runEmbed(t, ev, embedJob("tenant-a", &queue.Embed{Inputs: docs})); f.Error == nil || f.Error.Kind != queue.ErrKindInvalidInput {
		t.Fatalf("no query: %+v", f)
	}
}

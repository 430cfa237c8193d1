package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"

	"github.com/bulkhead-ai/bulkhead/edge/auth"
	"github.com/bulkhead-ai/bulkhead/models/builtin"
	"github.com/bulkhead-ai/bulkhead/models/gguf"
	"github.com/bulkhead-ai/bulkhead/models/synth"
	"github.com/bulkhead-ai/bulkhead/models/testkit"
	"github.com/bulkhead-ai/bulkhead/workers/encoder"
	"github.com/bulkhead-ai/bulkhead/workers/engine"
	"github.com/bulkhead-ai/bulkhead/workers/kernels"
)

const (
	embedName  = "@cf/baai/bge-small-en-v1.5"
	rerankName = "@cf/baai/bge-reranker-base"
	qwenName   = "@cf/qwen/qwen3-embedding-0.6b"
)

// embedDev runs dev with the built-in model, a text-embeddings model, a
// reranker and a causal embedding model (synth's bert-tiny, bert-rank-tiny
// and qwen3-embed-tiny), and returns it with the files by shape.
func embedDev(t *testing.T) (*devServer, map[string]string) {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{}
	for _, shape := range []string{"bert-tiny", "bert-rank-tiny", "qwen3-embed-tiny"} {
		files[shape] = filepath.Join(dir, shape+".gguf")
		if err := synth.GenerateFile(synth.Config{Shape: shape, Type: gguf.TypeQ8_0}, files[shape]); err != nil {
			t.Fatal(err)
		}
	}
	stories, err := builtin.WriteTo(dir)
	if err != nil {
		t.Fatal(err)
	}
	d := startDev(t, "--model", builtin.Name+"="+stories, "--model", embedName+"="+files["bert-tiny"],
		"--model", rerankName+"="+files["bert-rank-tiny"], "--model", qwenName+"="+files["qwen3-embed-tiny"], "--threads", "1")
	return d, files
}

// referenceVectors encodes texts with the encoder package, each alone,
// normalised: what every API must answer.
func referenceVectors(t *testing.T, path string, texts []string) [][]float32 {
	t.Helper()
	m, err := encoder.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	pool := kernels.NewPool(1)
	defer pool.Close()
	e := encoder.New(m, pool)
	out := make([][]float32, len(texts))
	for i, text := range texts {
		v, err := e.Encode([][]int32{m.Tokenize(text)})
		if err != nil {
			t.Fatal(err)
		}
		encoder.Normalize(v[0])
		out[i] = v[0]
	}
	return out
}

// nativePost posts body to model's native route (query: the URL's query,
// "" for none) with a token of tenant.
func nativePost(t *testing.T, d *devServer, tenant, model, query string, body any) (int, map[string]json.RawMessage) {
	t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest("POST", "http://"+d.addr+"/ai/run/"+model+query, bytes.NewReader(b))
	req.Header.Set("Authorization", "Bearer "+d.token(t, tenant))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var env map[string]json.RawMessage
	if err := json.Unmarshal(raw, &env); err != nil {
		t.Fatalf("%s: %s", model, raw)
	}
	return resp.StatusCode, env
}

// causalVectors embeds texts with a causal embedding model's engine.Embedder,
// each alone, normalised.
func causalVectors(t *testing.T, path string, texts []string) [][]float32 {
	t.Helper()
	m, err := engine.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	pool := kernels.NewPool(1)
	defer pool.Close()
	e, err := engine.NewEmbedder(m, pool, 0, 512)
	if err != nil {
		t.Fatal(err)
	}
	out := make([][]float32, len(texts))
	for i, text := range texts {
		v, err := e.Encode([][]int32{m.Tokenizer.Encode(text, true, false)})
		if err != nil {
			t.Fatal(err)
		}
		encoder.Normalize(v[0])
		out[i] = v[0]
	}
	return out
}

// TestEmbeddingsAPIs: the official OpenAI Go SDK gets embeddings as floats
// and as base64, the native call answers shape, data and pooling, and a
// reranker ranks contexts; 64 inputs of two tenants at once come back in
// order, each tenant billed its own tokens; generation and embedding
// routes refuse each other's models with clear errors.
func TestEmbeddingsAPIs(t *testing.T) {
	d, files := embedDev(t)
	path := files["bert-tiny"]
	texts := []string{"the cat sat on the mat", "hello world", "a dog ran in the park"}
	want := referenceVectors(t, path, texts)
	close := func(got []float64, want []float32) bool {
		for i := range want {
			if math.Abs(got[i]-float64(want[i])) > 1e-6 {
				return false
			}
		}
		return len(got) == len(want)
	}
	ctx := context.Background()
	c := d.client(t, "tenant-a")

	res, err := c.Embeddings.New(ctx, openai.EmbeddingNewParams{Model: embedName,
		Input: openai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: texts}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Data) != len(texts) || res.Usage.PromptTokens <= 0 || res.Usage.TotalTokens != res.Usage.PromptTokens {
		t.Fatalf("response %+v", res)
	}
	for i, e := range res.Data {
		if e.Index != int64(i) || !close(e.Embedding, want[i]) {
			t.Fatalf("embedding %d differs from the encoder's", i)
		}
	}
	b64, err := c.Embeddings.New(ctx, openai.EmbeddingNewParams{Model: embedName, EncodingFormat: openai.EmbeddingNewParamsEncodingFormatBase64,
		Input: openai.EmbeddingNewParamsInputUnion{OfString: openai.String(texts[1])}})
	if err != nil {
		t.Fatal(err)
	}
	if len(b64.Data) != 1 || !close(b64.Data[0].Embedding, want[1]) {
		t.Fatalf("base64 embedding differs (%d values)", len(b64.Data[0].Embedding))
	}

	// A causal embedding model (last-token pooling) on the same route.
	qres, err := c.Embeddings.New(ctx, openai.EmbeddingNewParams{Model: qwenName,
		Input: openai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: texts}})
	if err != nil {
		t.Fatal(err)
	}
	qwant := causalVectors(t, files["qwen3-embed-tiny"], texts)
	for i, e := range qres.Data {
		if !close(e.Embedding, qwant[i]) {
			t.Fatalf("qwen3 embedding %d differs from the engine's", i)
		}
	}

	native := func(tenant, model string, body any) (int, map[string]json.RawMessage) {
		return nativePost(t, d, tenant, model, "", body)
	}
	code, env := native("tenant-a", embedName, map[string]any{"text": texts})
	var nat struct {
		Shape   [2]int      `json:"shape"`
		Data    [][]float64 `json:"data"`
		Pooling string      `json:"pooling"`
	}
	if code != 200 || json.Unmarshal(env["result"], &nat) != nil || nat.Shape != [2]int{3, 256} || nat.Pooling != "cls" {
		t.Fatalf("native: %d %s", code, env["result"])
	}
	for i := range texts {
		if !close(nat.Data[i], want[i]) {
			t.Fatalf("native vector %d differs", i)
		}
	}

	code, env = native("tenant-a", rerankName, map[string]any{"query": "what is a cat",
		"contexts": []map[string]string{{"text": "a cat is a small animal"}, {"text": "the sun is hot"}, {"text": "cats purr"}}, "top_k": 2})
	var ranked struct {
		Response []struct {
			ID    int     `json:"id"`
			Score float64 `json:"score"`
		} `json:"response"`
	}
	if code != 200 || json.Unmarshal(env["result"], &ranked) != nil || len(ranked.Response) != 2 || ranked.Response[0].Score < ranked.Response[1].Score {
		t.Fatalf("rerank: %d %s", code, env["result"])
	}

	// The OpenAI-style rerank route (llama.cpp's server, vLLM, Jina) ranks
	// the same way, documents as strings or objects.
	b, _ := json.Marshal(map[string]any{"model": rerankName, "query": "what is a cat", "top_n": 2, "return_documents": true,
		"documents": []any{"a cat is a small animal", map[string]string{"text": "the sun is hot"}, "cats purr"}})
	req, _ := http.NewRequest("POST", "http://"+d.addr+"/v1/rerank", bytes.NewReader(b))
	req.Header.Set("Authorization", "Bearer "+d.token(t, "tenant-a"))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var rr struct {
		Results []struct {
			Index          int     `json:"index"`
			RelevanceScore float64 `json:"relevance_score"`
			Document       struct {
				Text string `json:"text"`
			} `json:"document"`
		} `json:"results"`
	}
	err = json.NewDecoder(resp.Body).Decode(&rr)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 || len(rr.Results) != 2 || rr.Results[0].Index != ranked.Response[0].ID ||
		math.Abs(rr.Results[0].RelevanceScore-ranked.Response[0].Score) > 1e-6 || rr.Results[0].Document.Text == "" {
		t.Fatalf("/v1/rerank: %d %+v (native %+v)", resp.StatusCode, rr, ranked)
	}

	// 64 inputs from two tenants at once: each in order, each billed alone.
	var batch []string
	for i := range 32 {
		batch = append(batch, fmt.Sprintf("input %d of a batch about cats and dogs", i))
	}
	wantBatch := referenceVectors(t, path, batch)
	var wg sync.WaitGroup
	tokens := map[string]int64{}
	var mu sync.Mutex
	for _, tenant := range []string{"tenant-b", "tenant-c"} {
		wg.Go(func() {
			tc := d.client(t, tenant)
			res, err := tc.Embeddings.New(ctx, openai.EmbeddingNewParams{Model: embedName,
				Input: openai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: batch}})
			if err != nil {
				t.Error(err)
				return
			}
			for i, e := range res.Data {
				if !close(e.Embedding, wantBatch[i]) {
					t.Errorf("%s: embedding %d is not its input's", tenant, i)
				}
			}
			mu.Lock()
			tokens[tenant] = res.Usage.PromptTokens
			mu.Unlock()
		})
	}
	wg.Wait()
	for _, tenant := range []string{"tenant-b", "tenant-c"} {
		reader, err := d.key.Mint(tenant, []string{auth.ScopeBillingRead}, nil, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		var rep usageReport
		testkit.Poll(t, 30*time.Second, testkit.Cond(tenant+"'s usage in the ledger", func() bool {
			getUsage(t, "http://"+d.addr, "/ai/usage", reader, &rep)
			return rep.Totals.Requests == 1
		}))
		if rep.Totals.PromptTokens != tokens[tenant] || rep.Totals.CompletionTokens != 0 || rep.Totals.Neurons <= 0 {
			t.Errorf("%s billed %+v, want its %d tokens", tenant, rep.Totals, tokens[tenant])
		}
	}

	if n := d.sumBy(t, "bulkhead_encoder_inputs_total", "model")[embedName]; n < 64 {
		t.Errorf("bulkhead_encoder_inputs_total for %s is %v, want the inputs encoded (at least 64)", embedName, n)
	}
	for _, tc := range []struct {
		name string
		do   func() error
		code int
	}{
		{"chat on an embedder", func() error {
			_, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: embedName,
				Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}})
			return err
		}, 400},
		{"embeddings from a generator", func() error {
			_, err := c.Embeddings.New(ctx, openai.EmbeddingNewParams{Model: builtin.Name,
				Input: openai.EmbeddingNewParamsInputUnion{OfString: openai.String("hi")}})
			return err
		}, 400},
		{"dimensions the model cannot give", func() error {
			_, err := c.Embeddings.New(ctx, openai.EmbeddingNewParams{Model: embedName, Dimensions: openai.Int(64),
				Input: openai.EmbeddingNewParamsInputUnion{OfString: openai.String("hi")}})
			return err
		}, 400},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var apiErr *openai.Error
			if err := tc.do(); !errors.As(err, &apiErr) || apiErr.StatusCode != tc.code {
				t.Fatalf("got %v, want HTTP %d", err, tc.code)
			}
		})
	}
	// An async batch of two embedding requests, polled to its end.
	code, env = nativePost(t, d, "tenant-a", embedName, "?queueRequest=true", map[string]any{"requests": []any{
		map[string]any{"text": texts[:2]}, map[string]any{"text": texts[2]}}})
	var queued struct {
		Status    string `json:"status"`
		RequestID string `json:"request_id"`
	}
	if code != 200 || json.Unmarshal(env["result"], &queued) != nil || queued.Status != "queued" {
		t.Fatalf("async submit: %d %s", code, env["result"])
	}
	var polled struct {
		Status    string `json:"status"`
		Responses []struct {
			ID      int  `json:"id"`
			Success bool `json:"success"`
			Result  struct {
				Shape [2]int      `json:"shape"`
				Data  [][]float64 `json:"data"`
			} `json:"result"`
		} `json:"responses"`
	}
	testkit.Poll(t, 30*time.Second, testkit.Cond("the async batch to end", func() bool {
		_, env := native("tenant-a", embedName, map[string]any{"request_id": queued.RequestID})
		return json.Unmarshal(env["result"], &polled) == nil && polled.Status == "done"
	}))
	if len(polled.Responses) != 2 || !polled.Responses[0].Success || polled.Responses[0].Result.Shape != [2]int{2, 256} ||
		!close(polled.Responses[0].Result.Data[1], want[1]) || !close(polled.Responses[1].Result.Data[0], want[2]) {
		t.Fatalf("async responses %+v", polled.Responses)
	}

	long := bytes.Repeat([]byte("word "), 600)
	code, env = native("tenant-a", embedName, map[string]any{"text": []string{"ok", string(long)}})
	if code != 413 || !bytes.Contains(env["errors"], []byte("3006")) {
		t.Fatalf("over the window: %d %s", code, env["errors"])
	}
	code, _ = native("tenant-a", embedName, map[string]any{"text": string(long), "truncate_inputs": true})
	if code != 200 {
		t.Fatalf("truncated on request: %d", code)
	}
}

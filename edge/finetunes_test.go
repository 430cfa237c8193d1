package edge

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/bulkhead-ai/bulkhead/models/lora"
	"github.com/bulkhead-ai/bulkhead/queue"
)

const finetunesPath = "/client/v4/accounts/%s/ai/finetunes"

// upload posts one file as Workers AI's finetune-assets takes it.
func (h *harness) upload(path, token, fileName string, data io.Reader) (int, []byte) {
	h.t.Helper()
	pr, pw := io.Pipe()
	mw := multipart.NewWriter(pw)
	go func() {
		err := mw.WriteField("file_name", fileName)
		var fw io.Writer
		if err == nil {
			fw, err = mw.CreateFormFile("file", fileName)
		}
		if err == nil {
			_, err = io.Copy(fw, data)
		}
		if err == nil {
			err = mw.Close()
		}
		pw.CloseWithError(err)
	}()
	req, err := http.NewRequest("POST", h.http.URL+path, pr)
	if err != nil {
		h.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	resp, err := h.http.Client().Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, pr) // the writer ends if the edge stopped reading
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		h.t.Fatal(err)
	}
	return resp.StatusCode, b
}

// finetuneOf decodes a native envelope holding one finetune.
func finetuneOf(t testing.TB, b []byte) queue.Finetune {
	t.Helper()
	var env struct {
		Result  queue.Finetune `json:"result"`
		Success bool           `json:"success"`
	}
	if err := json.Unmarshal(b, &env); err != nil || !env.Success {
		t.Fatalf("not a finetune: %s (%v)", b, err)
	}
	return env.Result
}

// nativeCode is the first error code of a native envelope.
func nativeCode(t testing.TB, b []byte) int {
	t.Helper()
	var env nativeEnvelope
	if err := json.Unmarshal(b, &env); err != nil || len(env.Errors) == 0 {
		t.Fatalf("not an error envelope: %s", b)
	}
	return env.Errors[0].Code
}

// createFinetune creates a finetune of modelStories as token's tenant.
func (h *harness) createFinetune(token, tenant, name string) queue.Finetune {
	h.t.Helper()
	status, _, b := h.do("POST", fmt.Sprintf(finetunesPath, tenant), token,
		`{"name":"`+name+`","model":"`+modelStories+`","description":"test"}`)
	if status != http.StatusOK {
		h.t.Fatalf("create: %d %s", status, b)
	}
	return finetuneOf(h.t, b)
}

// readyFinetune creates a finetune and stores an adapter file in it
// directly (the store's own check of an adapter is the edge's upload
// path, tested in TestFinetuneUploadsRefused).
func (h *harness) readyFinetune(token, tenant, name string) queue.Finetune {
	h.t.Helper()
	f := h.createFinetune(token, tenant, name)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	f, err := h.ft.PutFile(ctx, tenant, f.ID, "adapter.gguf", []byte("GGUF adapter bytes of "+name))
	if err != nil {
		h.t.Fatal(err)
	}
	return f
}

// TestFinetunesAPIRoundTrip creates, lists, gets, uploads to and deletes a
// finetune through the API.
func TestFinetunesAPIRoundTrip(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	f := h.createFinetune("alice-ft", "alice", "poet")
	if f.Name != "poet" || f.Model != modelStories || f.Description != "test" || f.ID == "" {
		t.Fatalf("created %+v", f)
	}
	for _, path := range []string{"/ai/finetunes", fmt.Sprintf(finetunesPath, "alice")} {
		status, _, b := h.do("GET", path, "alice-ft", "")
		var env struct {
			Result []queue.Finetune `json:"result"`
		}
		if status != http.StatusOK || json.Unmarshal(b, &env) != nil || len(env.Result) != 1 || env.Result[0].ID != f.ID {
			t.Fatalf("list %s: %d %s", path, status, b)
		}
	}
	for _, ref := range []string{f.ID, f.Name} {
		status, _, b := h.do("GET", fmt.Sprintf(finetunesPath, "alice")+"/"+ref, "alice", "") // ai:read lists
		if status != http.StatusOK || finetuneOf(t, b).ID != f.ID {
			t.Fatalf("get %s: %d %s", ref, status, b)
		}
	}
	status, b := h.upload(fmt.Sprintf(finetunesPath, "alice")+"/"+f.ID+"/finetune-assets", "alice-ft",
		queue.PEFTConfigFile, bytes.NewReader([]byte(`{"r":8,"lora_alpha":16,"target_modules":["q_proj"]}`)))
	if status != http.StatusOK || len(finetuneOf(t, b).Files) != 1 {
		t.Fatalf("upload config: %d %s", status, b)
	}
	status, _, b = h.do("POST", fmt.Sprintf(finetunesPath, "alice"), "alice-ft", `{"name":"poet","model":"`+modelStories+`"}`)
	if status != http.StatusConflict || nativeCode(t, b) != rowFinetuneExists.Code {
		t.Fatalf("same name: %d %s", status, b)
	}
	if status, _, b = h.do("DELETE", fmt.Sprintf(finetunesPath, "alice")+"/"+f.ID, "alice-ft", ""); status != http.StatusOK {
		t.Fatalf("delete: %d %s", status, b)
	}
	if status, _, b = h.do("GET", fmt.Sprintf(finetunesPath, "alice")+"/"+f.ID, "alice-ft", ""); status != http.StatusNotFound {
		t.Fatalf("get after delete: %d %s", status, b)
	}
}

// TestFinetunesScopes: managing finetunes takes finetunes:write and the
// token's own account; running a model takes ai:run.
func TestFinetunesScopes(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	for _, tc := range []struct {
		name, method, path, token, body string
		status, code                    int
	}{
		{"create with ai:run only", "POST", fmt.Sprintf(finetunesPath, "alice"), "alice", `{"name":"x","model":"` + modelStories + `"}`, 403, 9109},
		{"another account", "POST", fmt.Sprintf(finetunesPath, "bob"), "alice-ft", `{"name":"x","model":"` + modelStories + `"}`, 403, 9109},
		{"list another account", "GET", fmt.Sprintf(finetunesPath, "bob"), "alice-ft", "", 403, 9109},
		{"unknown model", "POST", fmt.Sprintf(finetunesPath, "alice"), "alice-ft", `{"name":"x","model":"@cf/none"}`, 400, rowUnknownModel.Code},
		{"no name", "POST", fmt.Sprintf(finetunesPath, "alice"), "alice-ft", `{"model":"` + modelStories + `"}`, 400, rowInvalidInput.Code},
		{"run without ai:run", "POST", "/ai/run/" + modelStories, "alice-ft", `{"prompt":"x"}`, 403, 9109},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, _, b := h.do(tc.method, tc.path, tc.token, tc.body)
			if status != tc.status || nativeCode(t, b) != tc.code {
				t.Fatalf("%d %s, want %d with code %d", status, b, tc.status, tc.code)
			}
		})
	}
}

var requestIDField = regexp.MustCompile(`"request_id":"[^"]*"`)

// sameAnswer checks that two refusals are the same but for their request
// ids.
func sameAnswer(t *testing.T, s1 int, b1 []byte, s2 int, b2 []byte) {
	t.Helper()
	n1, n2 := requestIDField.ReplaceAll(b1, nil), requestIDField.ReplaceAll(b2, nil)
	if s1 != s2 || !bytes.Equal(n1, n2) {
		t.Fatalf("another tenant's finetune: %d %s\nnone at all:            %d %s", s1, b1, s2, b2)
	}
	if s1 != http.StatusNotFound {
		t.Fatalf("status %d %s, want 404", s1, b1)
	}
}

// TestFinetunesOtherTenant: tenant bob cannot get, delete, upload to or
// call tenant alice's finetune, by id or name, on either API; every answer
// is the one for a finetune that does not exist, and bob's list is empty.
func TestFinetunesOtherTenant(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	f := h.readyFinetune("alice-ft", "alice", "secret")
	const noID, noName = "00000000-0000-4000-8000-000000000000", "nothing-here"
	base := fmt.Sprintf(finetunesPath, "bob")
	type req struct{ method, path, token, body string }
	for _, tc := range []struct {
		name      string
		theirs    req // naming alice's finetune
		nonesuch  req // naming one nobody holds
		uploadTo  string
		uploadNon string
	}{
		{name: "get by id", theirs: req{"GET", base + "/" + f.ID, "bob-ft", ""}, nonesuch: req{"GET", base + "/" + noID, "bob-ft", ""}},
		{name: "get by name", theirs: req{"GET", base + "/secret", "bob-ft", ""}, nonesuch: req{"GET", base + "/" + noName, "bob-ft", ""}},
		{name: "delete", theirs: req{"DELETE", base + "/" + f.ID, "bob-ft", ""}, nonesuch: req{"DELETE", base + "/" + noID, "bob-ft", ""}},
		{name: "upload", uploadTo: base + "/" + f.ID + "/finetune-assets", uploadNon: base + "/" + noID + "/finetune-assets"},
		{name: "call native by id",
			theirs:   req{"POST", "/ai/run/" + modelStories, "bob", `{"prompt":"x","lora":"` + f.ID + `"}`},
			nonesuch: req{"POST", "/ai/run/" + modelStories, "bob", `{"prompt":"x","lora":"` + noID + `"}`}},
		{name: "call native by name",
			theirs:   req{"POST", "/ai/run/" + modelStories, "bob", `{"prompt":"x","lora":"secret"}`},
			nonesuch: req{"POST", "/ai/run/" + modelStories, "bob", `{"prompt":"x","lora":"` + noName + `"}`}},
		{name: "call openai lora",
			theirs:   req{"POST", "/v1/chat/completions", "bob", chatLoRA(modelStories, "secret")},
			nonesuch: req{"POST", "/v1/chat/completions", "bob", chatLoRA(modelStories, noName)}},
		{name: "call openai model suffix",
			theirs:   req{"POST", "/v1/chat/completions", "bob", chatLoRA(modelStories+":"+f.ID, "")},
			nonesuch: req{"POST", "/v1/chat/completions", "bob", chatLoRA(modelStories+":"+noID, "")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			jobs := h.jobCount()
			if tc.uploadTo != "" {
				s1, b1 := h.upload(tc.uploadTo, "bob-ft", "adapter.gguf", bytes.NewReader([]byte("GGUF")))
				s2, b2 := h.upload(tc.uploadNon, "bob-ft", "adapter.gguf", bytes.NewReader([]byte("GGUF")))
				sameAnswer(t, s1, b1, s2, b2)
				return
			}
			s1, _, b1 := h.do(tc.theirs.method, tc.theirs.path, tc.theirs.token, tc.theirs.body)
			s2, _, b2 := h.do(tc.nonesuch.method, tc.nonesuch.path, tc.nonesuch.token, tc.nonesuch.body)
			sameAnswer(t, s1, b1, s2, b2)
			if h.jobCount() != jobs {
				t.Fatal("a job was queued")
			}
		})
	}
	status, _, b := h.do("GET", base, "bob-ft", "")
	if status != http.StatusOK || !bytes.Contains(b, []byte(`"result":[]`)) {
		t.Fatalf("bob's list: %d %s", status, b)
	}
	status, _, b = h.do("GET", fmt.Sprintf(finetunesPath, "alice")+"/"+f.ID, "alice-ft", "")
	if status != http.StatusOK || len(finetuneOf(t, b).Files) != 1 {
		t.Fatalf("alice's finetune after bob's tries: %d %s", status, b)
	}
}

func chatLoRA(model, lora string) string {
	body := map[string]any{"model": model, "messages": []map[string]string{{"role": "user", "content": "x"}}, "max_tokens": 4}
	if lora != "" {
		body["lora"] = lora
	}
	b, _ := json.Marshal(body)
	return string(b)
}

// TestLoRAReachesTheJob: a request naming the caller's finetune, by name
// or id, in lora or in OpenAI's model suffix, queues a job that carries
// it; a finetune without a whole adapter is refused.
func TestLoRAReachesTheJob(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	f := h.readyFinetune("alice-ft", "alice", "poet")
	for _, tc := range []struct {
		name, path, body string
	}{
		{"native by name", "/ai/run/" + modelStories, `{"prompt":"x","max_tokens":4,"lora":"poet"}`},
		{"native by id", "/ai/run/" + modelStories, `{"prompt":"x","max_tokens":4,"lora":"` + f.ID + `"}`},
		{"openai lora", "/v1/chat/completions", chatLoRA(modelStories, "poet")},
		{"openai model suffix", "/v1/chat/completions", chatLoRA(modelStories+":poet", "")},
		{"openai both agree", "/v1/chat/completions", chatLoRA(modelStories+":poet", "poet")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, _, b := h.do("POST", tc.path, "alice", tc.body)
			if status != http.StatusOK {
				t.Fatalf("%d %s", status, b)
			}
			job := h.lastJob()
			if job.LoRA == nil || job.LoRA.ID != f.ID || job.LoRA.Name != "poet" || len(job.LoRA.Files) != 1 ||
				job.LoRA.Files[0].SHA256 != f.Files[0].SHA256 {
				t.Fatalf("job's lora %+v, want %+v", job.LoRA, f)
			}
		})
	}
	t.Run("async batch", func(t *testing.T) {
		before := h.jobCount()
		status, _, b := h.do("POST", "/ai/run/"+modelStories+"?queueRequest=true", "alice",
			`{"requests":[{"prompt":"x","max_tokens":4,"lora":"poet"},{"prompt":"y","max_tokens":4}]}`)
		if status != http.StatusOK {
			t.Fatalf("%d %s", status, b)
		}
		asyncDoneResult(t, h, "alice", b)
		h.mu.Lock()
		defer h.mu.Unlock()
		got := map[string]bool{}
		for _, j := range h.jobs[before:] {
			got[j.Prompt] = j.LoRA != nil && j.LoRA.ID == f.ID
		}
		if x, y := "user: x\nassistant:", "user: y\nassistant:"; len(got) != 2 || !got[x] || got[y] {
			t.Fatalf("lora by prompt %v, want x's only", got)
		}
	})
	status, _, b := h.do("POST", "/ai/run/"+modelStories, "alice", `{"prompt":"x","max_tokens":4}`)
	if status != http.StatusOK || h.lastJob().LoRA != nil {
		t.Fatalf("without lora: %d %s, job's lora %+v", status, b, h.lastJob().LoRA)
	}
	h.createFinetune("alice-ft", "alice", "empty")
	status, _, b = h.do("POST", "/ai/run/"+modelStories, "alice", `{"prompt":"x","lora":"empty"}`)
	if status != http.StatusBadRequest || nativeCode(t, b) != rowInvalidInput.Code {
		t.Fatalf("finetune without files: %d %s", status, b)
	}
	status, _, b = h.do("POST", "/v1/chat/completions", "alice", chatLoRA(modelStories+":poet", "other"))
	if status != http.StatusNotFound {
		t.Fatalf("model suffix and lora disagree: %d %s", status, b)
	}
}

// TestFinetuneUploadsRefused: files that are not adapters, names that are
// not adapter files and files over the bound are refused with their codes,
// and nothing is stored.
func TestFinetuneUploadsRefused(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	f := h.createFinetune("alice-ft", "alice", "bad")
	path := fmt.Sprintf(finetunesPath, "alice") + "/" + f.ID + "/finetune-assets"
	for _, tc := range []struct {
		name, file   string
		data         io.Reader
		status, code int
	}{
		{"not an adapter", "adapter.gguf", bytes.NewReader([]byte("this is no GGUF file")), 400, rowNotAdapter.Code},
		{"config not JSON", queue.PEFTConfigFile, bytes.NewReader([]byte("r = 8")), 400, rowNotAdapter.Code},
		{"unknown file name", "weights.bin", bytes.NewReader([]byte("x")), 400, rowInvalidInput.Code},
		{"over the bound", "adapter.gguf", io.LimitReader(zeros{}, queue.MaxAdapterFileBytes+1), 413, rowAdapterTooLarge.Code},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, b := h.upload(path, "alice-ft", tc.file, tc.data)
			if status != tc.status || nativeCode(t, b) != tc.code {
				t.Fatalf("%d %s, want %d with code %d", status, b, tc.status, tc.code)
			}
		})
	}
	status, _, b := h.do("GET", fmt.Sprintf(finetunesPath, "alice")+"/"+f.ID, "alice-ft", "")
	if status != http.StatusOK || len(finetuneOf(t, b).Files) != 0 {
		t.Fatalf("after refused uploads: %d %s", status, b)
	}
}

// zeros reads zero bytes forever.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// ggufAdapter is a GGUF adapter for arch with one attn_q pair of rank and
// width 64 (stories260K's), or with target.
func ggufAdapter(t *testing.T, arch string, rank int, target lora.Target) []byte {
	t.Helper()
	const width = 64
	a := &lora.Adapter{Arch: arch, Alpha: float32(rank), Pairs: []lora.Pair{{Layer: 0, Target: target, In: width, Out: width,
		A: make([]float32, rank*width), B: make([]float32, width*rank)}}}
	var buf bytes.Buffer
	if err := lora.WriteGGUF(&buf, a); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// peftAdapter is PEFT's pair for one q_proj of rank 8, its config naming
// modules.
func peftAdapter(t *testing.T, modules string) (weights, config []byte) {
	t.Helper()
	const width, rank = 64, 8
	dir := t.TempDir()
	a := &lora.Adapter{Arch: "llama", Alpha: 16, Pairs: []lora.Pair{{Layer: 0, Target: lora.AttnQ, In: width, Out: width,
		A: make([]float32, rank*width), B: make([]float32, width*rank)}}}
	if err := lora.WritePEFT(dir, a, "stories260K"); err != nil {
		t.Fatal(err)
	}
	weights, err := os.ReadFile(filepath.Join(dir, queue.PEFTModelFile))
	if err != nil {
		t.Fatal(err)
	}
	config = []byte(`{"peft_type":"LORA","r":8,"lora_alpha":16,"target_modules":` + modules + `}`)
	return weights, config
}

// TestFinetuneAdapterUploads: a GGUF adapter and PEFT's pair are taken and
// make the finetune ready; a rank over 32, an unknown target module and an
// adapter of another architecture are refused as invalid adapters (3057)
// and not stored.
func TestFinetuneAdapterUploads(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	assets := func(f queue.Finetune) string {
		return fmt.Sprintf(finetunesPath, "alice") + "/" + f.ID + "/finetune-assets"
	}
	g := h.createFinetune("alice-ft", "alice", "gguf")
	status, b := h.upload(assets(g), "alice-ft", "adapter.gguf", bytes.NewReader(ggufAdapter(t, "llama", 8, lora.AttnQ)))
	if status != http.StatusOK || !finetuneOf(t, b).Ready() {
		t.Fatalf("gguf adapter: %d %s", status, b)
	}
	weights, config := peftAdapter(t, `["q_proj"]`)
	p := h.createFinetune("alice-ft", "alice", "peft")
	if status, b = h.upload(assets(p), "alice-ft", queue.PEFTModelFile, bytes.NewReader(weights)); status != http.StatusOK {
		t.Fatalf("peft weights: %d %s", status, b)
	}
	if status, b = h.upload(assets(p), "alice-ft", queue.PEFTConfigFile, bytes.NewReader(config)); status != http.StatusOK || !finetuneOf(t, b).Ready() {
		t.Fatalf("peft config: %d %s", status, b)
	}
	_, unknownConfig := peftAdapter(t, `["q_proj","lm_head"]`)
	u := h.createFinetune("alice-ft", "alice", "unknown-target")
	if status, b = h.upload(assets(u), "alice-ft", queue.PEFTModelFile, bytes.NewReader(weights)); status != http.StatusOK {
		t.Fatalf("peft weights: %d %s", status, b)
	}
	bad := h.createFinetune("alice-ft", "alice", "bad")
	for _, tc := range []struct {
		name string
		f    queue.Finetune
		file string
		data []byte
		says string
	}{
		{"rank 64", bad, "adapter.gguf", ggufAdapter(t, "llama", 64, lora.AttnQ), "rank 64"},
		{"unknown target module", u, queue.PEFTConfigFile, unknownConfig, "unknown target module"},
		{"another architecture", bad, "adapter.gguf", ggufAdapter(t, "qwen2", 8, lora.AttnQ), "for qwen2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, b := h.upload(assets(tc.f), "alice-ft", tc.file, bytes.NewReader(tc.data))
			if status != http.StatusBadRequest || nativeCode(t, b) != rowBadAdapter.Code || !bytes.Contains(b, []byte(tc.says)) {
				t.Fatalf("%d %s, want 400 with code %d saying %q", status, b, rowBadAdapter.Code, tc.says)
			}
			status, _, b = h.do("GET", fmt.Sprintf(finetunesPath, "alice")+"/"+tc.f.ID, "alice-ft", "")
			if status != http.StatusOK || finetuneOf(t, b).Ready() {
				t.Fatalf("after the refusal: %d %s", status, b)
			}
		})
	}
}

// slowReader reads r in small pieces, pausing before each.
type slowReader struct {
	r     io.Reader
	pause time.Duration
}

func (s slowReader) Read(p []byte) (int, error) {
	time.Sleep(s.pause) // the slowness under test: a client's pace
	return s.r.Read(p[:min(len(p), 64)])
}

// TestFinetuneUploadOutlivesBodyTimeout: an upload's body may take longer
// than HTTPLimits.BodyReadTimeout (Config.UploadTimeout applies).
func TestFinetuneUploadOutlivesBodyTimeout(t *testing.T) {
	h := newHarness(t, harnessOpts{bodyTimeout: 300 * time.Millisecond})
	f := h.createFinetune("alice-ft", "alice", "slow")
	config := []byte(`{"peft_type":"LORA","r":8,"lora_alpha":16,"target_modules":["q_proj"]}`)
	start := time.Now()
	status, b := h.upload(fmt.Sprintf(finetunesPath, "alice")+"/"+f.ID+"/finetune-assets", "alice-ft", queue.PEFTConfigFile,
		slowReader{bytes.NewReader(config), 100 * time.Millisecond})
	if status != http.StatusOK || time.Since(start) < 300*time.Millisecond {
		t.Fatalf("slow upload: %d %s after %v", status, b, time.Since(start))
	}
}

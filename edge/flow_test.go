package edge

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/bulkhead-ai/bulkhead/models/catalog"
	"github.com/bulkhead-ai/bulkhead/models/chat"
	"github.com/bulkhead-ai/bulkhead/models/refdatatest"
	"github.com/bulkhead-ai/bulkhead/models/testkit"
	"github.com/bulkhead-ai/bulkhead/queue"
)

func TestAsyncQueuedToDone(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	release := make(chan struct{})
	h.setBehaviour(func(ctx context.Context, h *harness, job *queue.Job, rp *queue.Replier) {
		select {
		case <-release:
		case <-ctx.Done():
			return
		}
		if strings.Contains(job.Prompt, "fail") {
			_ = rp.Fail(ctx, queue.ErrKindPromptTooLong, "too long for this worker")
			return
		}
		reply("Once", " upon")(ctx, h, job, rp)
	})
	path := "/client/v4/accounts/alice/ai/run/" + modelStories
	status, _, b := h.do("POST", path+"?queueRequest=true", "alice",
		`{"requests":[{"prompt":"one"},{"messages":[{"role":"user","content":"two"}],"max_tokens":3},{"prompt":"fail"}]}`)
	if status != 200 {
		t.Fatalf("submit: %d %s", status, b)
	}
	var sub struct {
		Result  asyncResult `json:"result"`
		Success bool        `json:"success"`
	}
	if err := json.Unmarshal(b, &sub); err != nil {
		t.Fatal(err)
	}
	id := sub.Result.RequestID
	if !sub.Success || sub.Result.Status != "queued" || !strings.HasSuffix(id, "-3") || sub.Result.Model != modelStories {
		t.Fatalf("submit answer %s", b)
	}
	poll := func(token, id string) (int, []byte) {
		st, _, body := h.do("POST", "/ai/run/"+modelStories, token, `{"request_id":"`+id+`"}`)
		return st, body
	}
	testkit.Poll(t, 5*time.Second, testkit.Cond("three async jobs", func() bool { return h.jobCount() == 3 }))
	for _, j := range h.jobs {
		if !j.Async || j.Reply != "" || j.Tenant != "alice" {
			t.Errorf("async job %+v", j)
		}
	}
	t.Run("running", func(t *testing.T) {
		st, body := poll("alice", id)
		if st != 200 || !strings.Contains(string(body), `"status":"running"`) || strings.Contains(string(body), "responses") {
			t.Errorf("poll while running: %d %s", st, body)
		}
	})
	t.Run("other tenant", func(t *testing.T) {
		st, body := poll("bob", id)
		if code, _ := nativeErr(t, body); st != 404 || code != 3044 {
			t.Errorf("bob polled alice's request: %d %s", st, body)
		}
	})
	t.Run("forged count", func(t *testing.T) {
		st, _ := poll("alice", strings.TrimSuffix(id, "-3")+"-4")
		if st != 404 {
			t.Errorf("status %d", st)
		}
	})
	close(release)
	var done struct {
		Result asyncResult `json:"result"`
	}
	testkit.Poll(t, 5*time.Second, testkit.Cond("the batch to finish", func() bool {
		_, body := poll("alice", id)
		done = struct {
			Result asyncResult `json:"result"`
		}{}
		_ = json.Unmarshal(body, &done)
		return done.Result.Status == "done"
	}))
	r := done.Result
	if len(r.Responses) != 3 {
		t.Fatalf("responses %+v", r)
	}
	for i, one := range r.Responses[:2] {
		if one.ID != i || !one.Success || one.Result == nil || one.Result.Response != "Once upon" || one.Result.Usage.CompletionTokens != 2 {
			t.Errorf("response %d: %+v", i, one)
		}
	}
	if f := r.Responses[2]; f.Success || len(f.Errors) != 1 || f.Errors[0].Code != 3006 || f.Result != nil {
		t.Errorf("failed response %+v", f)
	}
	if want := r.Responses[0].Result.Usage.TotalTokens + r.Responses[1].Result.Usage.TotalTokens; r.Usage == nil || r.Usage.TotalTokens != want {
		t.Errorf("usage %+v, want total %d", r.Usage, want)
	}
}

func TestCancelOnDisconnect(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	cancels := make(chan string, 4)
	sub, err := h.nc.Subscribe(queue.CancelPrefix+">", func(m *nats.Msg) {
		cancels <- strings.TrimPrefix(m.Subject, queue.CancelPrefix)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	h.setBehaviour(func(ctx context.Context, h *harness, job *queue.Job, rp *queue.Replier) {
		_ = rp.Token(ctx, "Once", nil)
		<-ctx.Done() // never finishes on its own
	})
	for _, stream := range []bool{true, false} {
		name := map[bool]string{true: "stream", false: "json"}[stream]
		t.Run(name, func(t *testing.T) {
			before := h.jobCount()
			ctx, cancel := context.WithCancel(context.Background())
			body := `{"prompt":"x","stream":` + map[bool]string{true: "true", false: "false"}[stream] + `}`
			req, _ := http.NewRequestWithContext(ctx, "POST", h.http.URL+"/ai/run/"+modelStories, strings.NewReader(body))
			req.Header.Set("Authorization", "Bearer alice")
			errc := make(chan error, 1)
			go func() {
				resp, err := h.http.Client().Do(req)
				if err == nil {
					if stream {
						line, _ := bufio.NewReader(resp.Body).ReadString('\n')
						if !strings.Contains(line, "Once") {
							t.Errorf("first line %q", line)
						}
						cancel() // the client goes away mid-stream
					}
					resp.Body.Close()
				}
				errc <- err
			}()
			testkit.Poll(t, 5*time.Second, testkit.Cond("the job", func() bool { return h.jobCount() == before+1 }))
			if !stream {
				cancel()
			}
			job := h.lastJob()
			select {
			case id := <-cancels:
				if id != job.ID {
					t.Errorf("cancelled %q, want %q", id, job.ID)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("no cancel published after the client went away")
			}
			<-errc
			cancel()
		})
	}
	t.Run("finished requests are not cancelled", func(t *testing.T) {
		h.setBehaviour(reply("ok"))
		h.do("POST", "/ai/run/"+modelStories, "alice", `{"prompt":"x","stream":true}`)
		h.do("POST", "/ai/run/"+modelStories, "alice", `{"prompt":"x"}`)
		if err := h.nc.Flush(); err != nil {
			t.Fatal(err)
		}
		select {
		case id := <-cancels:
			t.Errorf("cancel published for a finished request %s", id)
		case <-time.After(100 * time.Millisecond):
		}
	})
}

func TestChatTemplateAdmission(t *testing.T) {
	path := refdatatest.Path(t, "tokenizer/ggml-vocab-qwen2.gguf")
	cat, err := catalog.FromFlags([]string{modelQwen + "=" + path})
	if err != nil {
		t.Fatalf("catalog: %v", err)
	}
	v, err := loadVocab(slog.New(slog.DiscardHandler), modelQwen, path, false)
	if err != nil {
		t.Fatal(err)
	}
	if v.tmpl == nil {
		t.Fatal("no compiled template")
	}
	m, _ := cat.Lookup(modelQwen)
	in := &genInput{messages: []chat.Message{{Role: "user", Content: "Hello"}}}
	a, err := v.admit(context.Background(), in, m.ContextWindow, 16)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(a.prompt, "<|im_start|>") || !strings.HasSuffix(a.prompt, "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n") ||
		a.parseSpecial || len(a.segments) == 0 || queue.SegmentText(a.segments) != a.prompt {
		t.Errorf("admitted %+v", a)
	}
	// The template's control tokens are tokenized as with special parsing.
	ids := v.tok.Encode(a.prompt, a.addBOS, true)
	start, _ := v.tok.TokenID("<|im_start|>")
	if got := v.encode(a); a.tokens != len(ids) || ids[0] != start || !slices.Equal(got, ids) {
		t.Errorf("tokens %d (%v), want %d starting with <|im_start|> as one token: %v", a.tokens, got, len(ids), ids[:3])
	}
	t.Run("over the window", func(t *testing.T) {
		_, err := v.admit(context.Background(), in, 10, 16)
		var le *LengthError
		if !errors.As(err, &le) || le.Context != 10 || le.MaxTokens != 16 || le.PromptTokens != a.tokens {
			t.Errorf("err %v", err)
		}
	})
}

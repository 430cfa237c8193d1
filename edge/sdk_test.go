package edge

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/bulkhead-ai/bulkhead/edge/client"
	"github.com/bulkhead-ai/bulkhead/models/testkit"
)

// TestSDKAgainstEdge runs the Go SDK against the real handlers.
func TestSDKAgainstEdge(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	ctx := context.Background()
	cl := client.New(h.http.URL, "alice", client.WithAccount("alice"))
	t.Run("run", func(t *testing.T) {
		res, err := cl.Run(ctx, modelStories, client.RunRequest{Prompt: "Once"})
		if err != nil || res.Response != "Hello world" || res.Usage == nil || res.Usage.CompletionTokens != 2 {
			t.Fatalf("res %+v err %v", res, err)
		}
	})
	t.Run("stream", func(t *testing.T) {
		s, err := cl.RunStream(ctx, modelStories, client.RunRequest{Prompt: "Once"})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		var b strings.Builder
		for {
			text, err := s.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			b.WriteString(text)
		}
		if b.String() != "Hello world" || s.Usage() == nil || s.Usage().CompletionTokens != 2 {
			t.Errorf("text %q usage %+v", b.String(), s.Usage())
		}
	})
	t.Run("error", func(t *testing.T) {
		_, err := cl.Run(ctx, modelStories, client.RunRequest{Prompt: "Once", MaxTokens: 5000})
		var ae *client.APIError
		if !errors.As(err, &ae) || ae.Status != 413 || ae.Code != 3006 || !strings.Contains(ae.Message, "context window is 2048") {
			t.Errorf("err %#v", err)
		}
	})
	t.Run("async", func(t *testing.T) {
		id, err := cl.RunAsync(ctx, modelStories, []client.RunRequest{{Prompt: "a"}, {Prompt: "b"}})
		if err != nil {
			t.Fatal(err)
		}
		var st *client.AsyncStatus
		testkit.Poll(t, 5*time.Second, testkit.Cond("the batch", func() bool {
			st, err = cl.Poll(ctx, modelStories, id)
			return err == nil && st.Status == "done"
		}))
		if len(st.Responses) != 2 || st.Responses[1].Result.Response != "Hello world" {
			t.Errorf("status %+v", st)
		}
		if _, err := client.New(h.http.URL, "bob").Poll(ctx, modelStories, id); err == nil {
			t.Error("bob polled alice's batch")
		}
	})
	t.Run("chat", func(t *testing.T) {
		res, err := cl.ChatCompletion(ctx, client.ChatRequest{Model: modelStories, Messages: []client.Message{{Role: "user", Content: "Hi"}}})
		if err != nil || len(res.Choices) != 1 || res.Choices[0].Message.Content != "Hello world" || res.Usage.TotalTokens == 0 {
			t.Fatalf("res %+v err %v", res, err)
		}
		s, err := cl.ChatCompletionStream(ctx, client.ChatRequest{Model: modelStories, Messages: []client.Message{{Role: "user", Content: "Hi"}}})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		var b strings.Builder
		for {
			text, err := s.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			b.WriteString(text)
		}
		if b.String() != "Hello world" || s.Usage() == nil || s.Usage().CompletionTokens != 2 {
			t.Errorf("text %q usage %+v", b.String(), s.Usage())
		}
		_, err = cl.ChatCompletion(ctx, client.ChatRequest{Model: "nope", Messages: []client.Message{{Role: "user", Content: "Hi"}}})
		var ae *client.APIError
		if !errors.As(err, &ae) || ae.Status != 404 || ae.OpenAI != "model_not_found" {
			t.Errorf("err %#v", err)
		}
	})
}

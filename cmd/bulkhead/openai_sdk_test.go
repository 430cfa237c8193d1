package main

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/bulkhead-ai/bulkhead/models/testkit"
)

// TestOpenAISDK drives the running cluster with OpenAI's official Go SDK,
// unmodified: only the base URL and the key are ours.
func TestOpenAISDK(t *testing.T) {
	c := startCluster(t)
	edgeURL := c.edge(t)
	base := edgeURL + "/v1/"
	client := openai.NewClient(option.WithBaseURL(base), option.WithAPIKey(c.token(t, "acme")), option.WithMaxRetries(0))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	t.Run("models", func(t *testing.T) {
		page, err := client.Models.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Data) != 1 || page.Data[0].ID != clusterModel {
			t.Fatalf("models %+v, want one: %s", page.Data, clusterModel)
		}
	})
	t.Run("chat", func(t *testing.T) {
		res, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
			Model:     clusterModel,
			Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Tell me a story")},
			MaxTokens: openai.Int(12),
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Choices) != 1 || res.Choices[0].Message.Content == "" || res.Usage.CompletionTokens != 12 {
			t.Fatalf("completion %+v", res)
		}
	})
	t.Run("chat stream with usage", func(t *testing.T) {
		stream := client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
			Model:         clusterModel,
			Messages:      []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Tell me a story")},
			MaxTokens:     openai.Int(10),
			StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
		})
		var acc openai.ChatCompletionAccumulator
		for stream.Next() {
			acc.AddChunk(stream.Current())
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		if len(acc.Choices) != 1 || acc.Choices[0].Message.Content == "" || acc.Usage.CompletionTokens != 10 {
			t.Fatalf("accumulated %+v", acc.ChatCompletion)
		}
	})
	t.Run("completions", func(t *testing.T) {
		res, err := client.Completions.New(ctx, openai.CompletionNewParams{
			Model:       clusterModel,
			Prompt:      openai.CompletionNewParamsPromptUnion{OfString: openai.String("Once upon a time")},
			MaxTokens:   openai.Int(16),
			Temperature: openai.Float(0),
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Choices) != 1 || !strings.HasPrefix(res.Choices[0].Text, ", there was a little girl") {
			t.Fatalf("completion %+v", res)
		}
	})
	t.Run("n", func(t *testing.T) {
		// Four choices sampled independently (temperature 1, seeds 7..10,
		// each reported), equal to four separate runs with those seeds;
		// the prompt prefilled once: the later choices read its full
		// pages from the prefix cache; usage summed. The choices share a
		// worker once the edge routes: an edge that has not yet heard
		// from both workers sends jobs to the shared queue, which either
		// worker takes (docs/routing.md).
		testkit.Poll(t, 30*time.Second, testkit.Cond("the edge's router to know both workers", func() bool {
			n, _ := metricSum(scrape(t, edgeURL), "bulkhead_edge_routing_workers", map[string]string{"model": clusterModel})
			return n == 2
		}))
		params := openai.ChatCompletionNewParams{
			Model:       clusterModel,
			Messages:    []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Tell me a story about a dog and a cat")},
			MaxTokens:   openai.Int(16),
			Temperature: openai.Float(1),
			Seed:        openai.Int(7),
			N:           openai.Int(4),
		}
		res, err := client.Chat.Completions.New(ctx, params)
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Choices) != 4 {
			t.Fatalf("%d choices, want 4", len(res.Choices))
		}
		distinct := map[string]bool{}
		var completion int64
		for i, c := range res.Choices {
			seed, err := strconv.ParseInt(c.JSON.ExtraFields["seed"].Raw(), 10, 64)
			if c.Index != int64(i) || err != nil || seed != int64(7+i) {
				t.Fatalf("choice %d: index %d seed %q", i, c.Index, c.JSON.ExtraFields["seed"].Raw())
			}
			one := params
			one.N, one.Seed = openai.Int(1), openai.Int(seed)
			alone, err := client.Chat.Completions.New(ctx, one)
			if err != nil {
				t.Fatal(err)
			}
			if alone.Choices[0].Message.Content != c.Message.Content || alone.Choices[0].FinishReason != c.FinishReason {
				t.Errorf("choice %d (seed %d) %q, alone %q", i, seed, c.Message.Content, alone.Choices[0].Message.Content)
			}
			completion += alone.Usage.CompletionTokens
			distinct[c.Message.Content] = true
		}
		if len(distinct) < 2 {
			t.Errorf("four choices, %d distinct texts: not sampled independently", len(distinct))
		}
		t.Logf("n 4: %d distinct texts; usage: prompt %d (cached %d), completion %d", len(distinct),
			res.Usage.PromptTokens, res.Usage.PromptTokensDetails.CachedTokens, res.Usage.CompletionTokens)
		if res.Usage.CompletionTokens != completion || res.Usage.PromptTokensDetails.CachedTokens < 3*16 {
			t.Errorf("usage %+v: want %d completion tokens, and the prompt's pages cached for choices 1-3", res.Usage, completion)
		}
		// Streamed: the same four choices, by index.
		stream := client.Chat.Completions.NewStreaming(ctx, params)
		var acc openai.ChatCompletionAccumulator
		for stream.Next() {
			acc.AddChunk(stream.Current())
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		if len(acc.Choices) != 4 {
			t.Fatalf("streamed %d choices", len(acc.Choices))
		}
		for i, c := range acc.Choices {
			if c.Message.Content != res.Choices[i].Message.Content {
				t.Errorf("streamed choice %d %q, want %q", i, c.Message.Content, res.Choices[i].Message.Content)
			}
		}
	})
	t.Run("context length exceeded", func(t *testing.T) {
		_, err := client.Completions.New(ctx, openai.CompletionNewParams{
			Model:  clusterModel,
			Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String(strings.Repeat("Once upon a time there was a dog. ", 400))},
		})
		var apiErr *openai.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || apiErr.Code != "context_length_exceeded" {
			t.Fatalf("error %v, want a 400 context_length_exceeded", err)
		}
	})
}

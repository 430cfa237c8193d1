package main

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

// TestOpenAISDK drives the running cluster with OpenAI's official Go SDK,
// unmodified: only the base URL and the key are ours.
func TestOpenAISDK(t *testing.T) {
	c := startCluster(t)
	base := c.edge(t, "edge") + "/v1/"
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

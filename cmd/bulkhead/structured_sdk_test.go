package main

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"
)

// TestOpenAISDKStructured drives the running cluster's structured output with
// the official SDK: schema-valid JSON from response_format json_schema, a
// forced tool call (plain and streamed) whose arguments fit the tool's
// schema, the tool's result sent back for a final answer, and an unsupported
// keyword refused 400/5004 by name. stories260K never writes JSON by itself.
func TestOpenAISDKStructured(t *testing.T) {
	c := startCluster(t)
	client := openai.NewClient(option.WithBaseURL(c.edge(t)+"/v1/"), option.WithAPIKey(c.token(t, "acme")), option.WithMaxRetries(0))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	person := map[string]any{
		"type": "object",
		"properties": map[string]any{
			"name": map[string]any{"type": "string", "maxLength": 12},
			"age":  map[string]any{"type": "integer", "minimum": 0, "maximum": 120},
			"pet":  map[string]any{"enum": []any{"cat", "dog"}},
		},
		"required":             []any{"name", "age", "pet"},
		"additionalProperties": false,
	}
	weather := openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
		Name: "get_weather",
		Parameters: shared.FunctionParameters{
			"type":                 "object",
			"properties":           map[string]any{"city": map[string]any{"type": "string", "maxLength": 16}, "unit": map[string]any{"enum": []any{"c", "f"}}},
			"required":             []any{"city", "unit"},
			"additionalProperties": false,
		},
	})
	checkArgs := func(t *testing.T, args string) {
		var a struct {
			City *string `json:"city"`
			Unit string  `json:"unit"`
		}
		if err := json.Unmarshal([]byte(args), &a); err != nil || a.City == nil || len([]rune(*a.City)) > 16 || (a.Unit != "c" && a.Unit != "f") {
			t.Fatalf("arguments %q do not fit the tool's schema (%v)", args, err)
		}
	}

	t.Run("json_schema", func(t *testing.T) {
		for seed := range int64(3) {
			res, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
				Model:       clusterModel,
				Messages:    []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Describe a person")},
				MaxTokens:   openai.Int(200),
				Temperature: openai.Float(1),
				Seed:        openai.Int(seed),
				ResponseFormat: openai.ChatCompletionNewParamsResponseFormatUnion{OfJSONSchema: &shared.ResponseFormatJSONSchemaParam{
					JSONSchema: shared.ResponseFormatJSONSchemaJSONSchemaParam{Name: "person", Schema: person, Strict: openai.Bool(true)},
				}},
			})
			if err != nil {
				t.Fatal(err)
			}
			ch := res.Choices[0]
			var p struct {
				Name *string `json:"name"`
				Age  *int    `json:"age"`
				Pet  string  `json:"pet"`
			}
			if ch.FinishReason != "stop" || json.Unmarshal([]byte(ch.Message.Content), &p) != nil || p.Name == nil || p.Age == nil ||
				*p.Age < 0 || *p.Age > 120 || (p.Pet != "cat" && p.Pet != "dog") {
				t.Fatalf("finish %q content %q", ch.FinishReason, ch.Message.Content)
			}
		}
	})
	t.Run("json_schema streamed", func(t *testing.T) {
		stream := client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
			Model:       clusterModel,
			Messages:    []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Describe a person")},
			MaxTokens:   openai.Int(200),
			Temperature: openai.Float(1),
			Seed:        openai.Int(11),
			ResponseFormat: openai.ChatCompletionNewParamsResponseFormatUnion{OfJSONSchema: &shared.ResponseFormatJSONSchemaParam{
				JSONSchema: shared.ResponseFormatJSONSchemaJSONSchemaParam{Name: "person", Schema: person, Strict: openai.Bool(true)},
			}},
		})
		var acc openai.ChatCompletionAccumulator
		for stream.Next() {
			acc.AddChunk(stream.Current())
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		var p map[string]any
		if ch := acc.Choices[0]; ch.FinishReason != "stop" || json.Unmarshal([]byte(ch.Message.Content), &p) != nil || len(p) != 3 {
			t.Fatalf("finish %q content %q", ch.FinishReason, ch.Message.Content)
		}
	})
	t.Run("completions json_object", func(t *testing.T) {
		comp, err := client.Completions.New(ctx, openai.CompletionNewParams{
			Model:     openai.CompletionNewParamsModel(clusterModel),
			Prompt:    openai.CompletionNewParamsPromptUnion{OfString: openai.String("Once upon a time")},
			MaxTokens: openai.Int(200),
			Seed:      openai.Int(3),
		}, option.WithJSONSet("response_format", map[string]any{"type": "json_object"}), option.WithJSONSet("temperature", 1))
		if err != nil {
			t.Fatal(err)
		}
		var obj map[string]any
		if ch := comp.Choices[0]; ch.FinishReason == "stop" && json.Unmarshal([]byte(ch.Text), &obj) != nil || ch.FinishReason != "stop" && ch.FinishReason != "length" {
			t.Fatalf("finish %q text %q", ch.FinishReason, ch.Text)
		}
	})
	t.Run("json_schema cut by max_tokens", func(t *testing.T) {
		res, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
			Model:     clusterModel,
			Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Describe a person")},
			MaxTokens: openai.Int(3),
			ResponseFormat: openai.ChatCompletionNewParamsResponseFormatUnion{OfJSONSchema: &shared.ResponseFormatJSONSchemaParam{
				JSONSchema: shared.ResponseFormatJSONSchemaJSONSchemaParam{Name: "person", Schema: person},
			}},
		})
		if err != nil {
			t.Fatal(err)
		}
		if res.Choices[0].FinishReason != "length" {
			t.Fatalf("finish %q content %q", res.Choices[0].FinishReason, res.Choices[0].Message.Content)
		}
	})
	t.Run("unsupported keyword", func(t *testing.T) {
		_, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
			Model:    clusterModel,
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Hi")},
			ResponseFormat: openai.ChatCompletionNewParamsResponseFormatUnion{OfJSONSchema: &shared.ResponseFormatJSONSchemaParam{
				JSONSchema: shared.ResponseFormatJSONSchemaJSONSchemaParam{Name: "x", Schema: map[string]any{"type": "string", "format": "email"}},
			}},
		})
		var ae *openai.Error
		if !errors.As(err, &ae) || ae.StatusCode != 400 || !strings.Contains(ae.Message, `"format"`) {
			t.Fatalf("err %v", err)
		}
	})
	t.Run("tool_choice required, result sent back", func(t *testing.T) {
		params := openai.ChatCompletionNewParams{
			Model:       clusterModel,
			Messages:    []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Weather in Paris?")},
			MaxTokens:   openai.Int(100),
			Temperature: openai.Float(1),
			Seed:        openai.Int(7),
			Tools:       []openai.ChatCompletionToolUnionParam{weather},
			ToolChoice:  openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("required")},
		}
		res, err := client.Chat.Completions.New(ctx, params)
		if err != nil {
			t.Fatal(err)
		}
		ch := res.Choices[0]
		if ch.FinishReason != "tool_calls" || len(ch.Message.ToolCalls) != 1 || ch.Message.ToolCalls[0].Function.Name != "get_weather" {
			t.Fatalf("finish %q message %+v", ch.FinishReason, ch.Message)
		}
		call := ch.Message.ToolCalls[0]
		checkArgs(t, call.Function.Arguments)
		params.Messages = append(params.Messages, ch.Message.ToParam(), openai.ToolMessage(`{"temp":18,"sky":"clear"}`, call.ID))
		params.ToolChoice = openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("auto")}
		params.MaxTokens = openai.Int(12)
		final, err := client.Chat.Completions.New(ctx, params)
		if err != nil {
			t.Fatal(err)
		}
		if len(final.Choices) != 1 || final.Choices[0].Message.Content == "" {
			t.Fatalf("final answer %+v", final)
		}
	})
	t.Run("tool_choice required, streamed", func(t *testing.T) {
		stream := client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
			Model:       clusterModel,
			Messages:    []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Weather in Paris?")},
			MaxTokens:   openai.Int(100),
			Temperature: openai.Float(1),
			Seed:        openai.Int(8),
			Tools:       []openai.ChatCompletionToolUnionParam{weather},
			ToolChoice:  openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("required")},
		})
		var acc openai.ChatCompletionAccumulator
		for stream.Next() {
			acc.AddChunk(stream.Current())
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		if len(acc.Choices) != 1 || acc.Choices[0].FinishReason != "tool_calls" || len(acc.Choices[0].Message.ToolCalls) != 1 {
			t.Fatalf("accumulated %+v", acc.ChatCompletion)
		}
		checkArgs(t, acc.Choices[0].Message.ToolCalls[0].Function.Arguments)
	})
	t.Run("logprobs", func(t *testing.T) {
		params := openai.ChatCompletionNewParams{
			Model:       clusterModel,
			Messages:    []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Tell me a story")},
			MaxTokens:   openai.Int(8),
			Logprobs:    openai.Bool(true),
			TopLogprobs: openai.Int(3),
		}
		res, err := client.Chat.Completions.New(ctx, params)
		if err != nil {
			t.Fatal(err)
		}
		lps := res.Choices[0].Logprobs.Content
		if len(lps) != 8 {
			t.Fatalf("%d logprobs for 8 tokens: %+v", len(lps), res.Choices[0].Logprobs)
		}
		var joined strings.Builder
		for _, lp := range lps {
			joined.WriteString(lp.Token)
			// Greedy: the chosen token is the most likely one.
			if lp.Logprob > 0 || len(lp.TopLogprobs) != 3 || lp.TopLogprobs[0].Logprob != lp.Logprob {
				t.Fatalf("logprob %+v", lp)
			}
		}
		if strings.TrimSpace(joined.String()) != strings.TrimSpace(res.Choices[0].Message.Content) {
			t.Errorf("tokens %q, content %q", joined.String(), res.Choices[0].Message.Content)
		}
		stream := client.Chat.Completions.NewStreaming(ctx, params)
		n := 0
		for stream.Next() {
			for _, ch := range stream.Current().Choices {
				n += len(ch.Logprobs.Content)
			}
		}
		if err := stream.Err(); err != nil || n != 8 {
			t.Fatalf("streamed %d logprobs, err %v", n, err)
		}
		comp, err := client.Completions.New(ctx, openai.CompletionNewParams{
			Model:     openai.CompletionNewParamsModel(clusterModel),
			Prompt:    openai.CompletionNewParamsPromptUnion{OfString: openai.String("Once upon a time")},
			MaxTokens: openai.Int(6),
			Logprobs:  openai.Int(2),
		})
		if err != nil {
			t.Fatal(err)
		}
		if l := comp.Choices[0].Logprobs; len(l.Tokens) != 6 || len(l.TokenLogprobs) != 6 || len(l.TopLogprobs) != 6 {
			t.Fatalf("completion logprobs %+v", l)
		}
	})
}

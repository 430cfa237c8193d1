package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/bulkhead-ai/bulkhead/models/builtin"
)

// predictAnswer is the part of an OpenAI answer these tests read.
type predictAnswer struct {
	Choices []struct {
		Message struct {
			Content string `json:"content"`
		} `json:"message"`
		Text string `json:"text"`
	} `json:"choices"`
	Usage struct {
		CompletionTokens int `json:"completion_tokens"`
		Details          *struct {
			Accepted int `json:"accepted_prediction_tokens"`
			Rejected int `json:"rejected_prediction_tokens"`
		} `json:"completion_tokens_details"`
	} `json:"usage"`
}

// TestPredictedOutputs: through dev serving the built-in model, OpenAI's
// prediction field leaves chat and text completions exactly what they are
// without it (greedy, and sampled with a seed), and usage reports how much
// of the prediction was accepted: some of a right one, none with speculate
// false (drafting off), and a wrong one mostly rejected. A prediction of another type or without content is a
// 400 naming the field.
func TestPredictedOutputs(t *testing.T) {
	if testing.Short() {
		t.Skip("starts dev")
	}
	d := startDev(t, "--threads", "1")
	tok := d.token(t, "acme")
	base := "http://" + d.addr
	story, _ := json.Marshal("Once upon a time, there was a little girl named Lily. She liked to play")
	for _, api := range []struct{ url, body string }{
		{base + "/v1/chat/completions", `{"model":"` + builtin.Name + `","messages":[{"role":"user","content":` + string(story) + `}],"max_tokens":64`},
		{base + "/v1/completions", `{"model":"` + builtin.Name + `","prompt":` + string(story) + `,"max_tokens":64`},
	} {
		for _, sampling := range []string{`,"temperature":0`, `,"temperature":0.9,"seed":11`} {
			ask := func(extra string) predictAnswer {
				t.Helper()
				status, body := post(t, tok, api.url, api.body+sampling+extra+`}`)
				var a predictAnswer
				if status != 200 || json.Unmarshal(body, &a) != nil || len(a.Choices) != 1 {
					t.Fatalf("%s %s%s: %d %s", api.url, sampling, extra, status, body)
				}
				return a
			}
			text := func(a predictAnswer) string { return a.Choices[0].Message.Content + a.Choices[0].Text }
			plain := ask("")
			if plain.Usage.Details != nil {
				t.Errorf("no prediction, yet completion_tokens_details %+v", *plain.Usage.Details)
			}
			right, _ := json.Marshal(text(plain))
			got := ask(`,"prediction":{"type":"content","content":` + string(right) + `}`)
			if text(got) != text(plain) {
				t.Errorf("%s%s: a right prediction changed the output:\n got %q\nwant %q", api.url, sampling, text(got), text(plain))
			}
			// How much is drafted depends on the engine's timing
			// (engine TestSpeculationKeepsOutputs pins it); some is.
			if d := got.Usage.Details; d == nil || d.Accepted == 0 {
				t.Errorf("%s%s: the output predicted exactly: details %+v for %d tokens", api.url, sampling, d, plain.Usage.CompletionTokens)
			}
			got = ask(`,"speculate":false,"prediction":{"type":"content","content":` + string(right) + `}`)
			if d := got.Usage.Details; text(got) != text(plain) || d == nil || d.Accepted != 0 || d.Rejected == 0 {
				t.Errorf("%s%s: speculate false: %q, details %+v; want the plain output, nothing accepted", api.url, sampling, text(got), d)
			}
			wrong, _ := json.Marshal(strings.Repeat("The big red dog ran away. ", 5))
			got = ask(`,"prediction":{"type":"content","content":[{"type":"text","text":` + string(wrong) + `}]}`)
			if text(got) != text(plain) {
				t.Errorf("%s%s: a wrong prediction changed the output:\n got %q\nwant %q", api.url, sampling, text(got), text(plain))
			}
			if d := got.Usage.Details; d == nil || d.Rejected <= d.Accepted {
				t.Errorf("%s%s: a wrong prediction: details %+v", api.url, sampling, d)
			}
		}
	}
	for _, bad := range []struct{ body, field string }{
		{`"prediction":{"type":"text","content":"x"}`, "prediction.type"},
		{`"prediction":{"type":"content"}`, "prediction.content"},
		{`"prediction":{"type":"content","content":[{"type":"image_url"}]}`, "prediction.content"},
		{`"prediction":"x"`, "prediction"},
	} {
		status, body := post(t, tok, base+"/v1/chat/completions",
			`{"model":"`+builtin.Name+`","messages":[{"role":"user","content":"Hi"}],`+bad.body+`}`)
		if status != 400 || !strings.Contains(string(body), bad.field) {
			t.Errorf("%s: %d %s, want 400 naming %s", bad.body, status, body, bad.field)
		}
	}
}

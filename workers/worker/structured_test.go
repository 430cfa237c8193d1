package worker

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"

	"github.com/bulkhead-ai/bulkhead/queue"
	"github.com/bulkhead-ai/bulkhead/workers/engine"
)

// TestStructuredJobs: a job's grammar and logprobs reach the engine, in a
// unified worker and split across prefill and decode workers (the grammar
// travels with the hand-over and the decode side resumes its matcher at the
// prefill's first token): the answers are the same valid JSON, and token
// frames carry logprobs.
func TestStructuredJobs(t *testing.T) {
	grammar := &queue.Grammar{Kind: queue.GrammarJSONSchema,
		Schema: json.RawMessage(`{"type":"object","properties":{"hero":{"type":"string","maxLength":20},"age":{"type":"integer","minimum":1,"maximum":99}},"required":["hero","age"],"additionalProperties":false}`)}
	job := func(seed uint64) *queue.Job {
		j := newJob(t, "Once upon a time", 120)
		j.Sampling = queue.Sampling{Temperature: 1, Seed: seed}
		j.Grammar = grammar
		return j
	}
	uni := startNATS(t)
	ue := startEngine(t, engine.Config{})
	startWorker(t, uni, Config{Models: map[string]*engine.Engine{model: ue}})
	ev := startNATS(t)
	startSplit(t, ev, engine.Config{}, engine.Config{}, Config{}, Config{})
	for seed := range uint64(3) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			want := submit(t, uni, job(seed))
			got := submit(t, ev, job(seed))
			if want.last.Kind != queue.KindFinal || got.last.Kind != queue.KindFinal {
				t.Fatalf("last frames %+v / %+v", want.last, got.last)
			}
			var v struct {
				Hero *string `json:"hero"`
				Age  int     `json:"age"`
			}
			if want.last.Finish == "stop" && (json.Unmarshal([]byte(want.text), &v) != nil || v.Hero == nil || v.Age < 1 || v.Age > 99) {
				t.Fatalf("unified answer %q does not fit the schema", want.text)
			}
			if got.text != want.text || !slices.Equal(got.tokens, want.tokens) {
				t.Fatalf("split %q, unified %q", got.text, want.text)
			}
		})
	}
	lj := newJob(t, "Once upon a time", 8)
	lj.Logprobs, lj.TopLogprobs = true, 2
	a := submit(t, uni, lj)
	n := 0
	for _, f := range a.frames {
		if f.Kind == queue.KindToken {
			if len(f.Logprobs) != 1 || len(f.Logprobs[0].Top) != 2 || f.Logprobs[0].Token != f.Tokens[0] {
				t.Fatalf("token frame %+v", f)
			}
			n++
		}
	}
	if n == 0 {
		t.Fatal("no token frames")
	}
	bad := newJob(t, "Once", 8)
	bad.Grammar = &queue.Grammar{Kind: queue.GrammarJSONSchema, Schema: json.RawMessage(`{"type":"string","format":"email"}`)}
	if b := submit(t, uni, bad); b.last.Kind != queue.KindError || b.last.Error.Kind != queue.ErrKindInvalidInput {
		t.Fatalf("unsupported schema: last frame %+v", b.last)
	}
}

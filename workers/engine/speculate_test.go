package engine

import (
	"context"
	"fmt"
	"reflect"
	"sync"
	"testing"

	"github.com/bulkhead-ai/bulkhead/models/grammar"
	"github.com/bulkhead-ai/bulkhead/workers/sample"
)

// TestSpeculationKeepsOutputs runs the same requests on an engine that
// drafts (the default) and on one that does not (Draft -1), alone and then
// all at once in a batch: greedy, seeded sampling with penalties, logprobs,
// stop sequences, a grammar and predictions (the plain output, and one that
// is wrong) give the same tokens, text, finish and logprobs bit for bit,
// and the drafting engine did draft and accept tokens, most of a right
// prediction (with the prior row cost, so that timing decides nothing).
func TestSpeculationKeepsOutputs(t *testing.T) {
	m := loadStories(t)
	cases := loadGolden(t)
	schema, err := grammar.CompileSchema([]byte(`{"type":"object","properties":{"name":{"type":"string"},"tags":{"type":"array","items":{"type":"string"}}},"required":["name","tags"]}`))
	if err != nil {
		t.Fatal(err)
	}
	off := startEngine(t, m, Config{Threads: 2, Draft: -1, KVTokens: 8192, Poison: true})
	on, err := New(nil, m, Config{Threads: 2, KVTokens: 8192, Poison: true})
	if err != nil {
		t.Fatal(err)
	}
	on.cost.prior = true // what is drafted depends on the tokens only, not on timing
	runEngine(t, on)

	var reqs []Request
	for i, c := range cases {
		p := c.PromptTokens
		reqs = append(reqs,
			greedy(p, 96),
			Request{Owner: own, Prompt: p, MaxTokens: 96, Sampling: sample.Params{Temperature: 0.8, TopP: 0.95, Seed: uint64(i)}},
			Request{Owner: own, Prompt: p, MaxTokens: 64, Sampling: sample.Params{Temperature: 1.1, TopK: 40, RepetitionPenalty: 1.1, Seed: 7}, Logprobs: true, TopLogprobs: 3},
			Request{Owner: own, Prompt: p, MaxTokens: 96, Stop: []string{"Lily"}},
		)
		if i < 3 {
			reqs = append(reqs, Request{Owner: own, Prompt: p, MaxTokens: 48, Grammar: schema})
		}
	}
	// Predictions: each greedy request again with its plain output, and
	// with a prediction that is another prompt's output.
	plain := make([]*Result, len(reqs))
	for i, r := range reqs {
		res, err := off.Generate(context.Background(), r)
		if err != nil {
			t.Fatalf("request %d without drafts: %v", i, err)
		}
		plain[i] = res
	}
	n := len(reqs)
	for i := range n {
		if reqs[i].Sampling.Temperature == 0 && reqs[i].Grammar == nil && reqs[i].Stop == nil {
			right, wrong := reqs[i], reqs[i]
			right.Prediction = plain[i].CompletionTokens
			wrong.Prediction = plain[(i+4)%n].CompletionTokens
			reqs = append(reqs, right, wrong)
			plain = append(plain, plain[i], plain[i])
		}
	}

	check := func(t *testing.T, i int, got *Result) {
		t.Helper()
		want := plain[i]
		if !reflect.DeepEqual(got.CompletionTokens, want.CompletionTokens) || got.Text != want.Text || got.Finish != want.Finish {
			t.Errorf("request %d: drafting changed the output:\n got %v %q (%s)\nwant %v %q (%s)", i,
				got.CompletionTokens, got.Text, got.Finish, want.CompletionTokens, want.Text, want.Finish)
		}
		if !reflect.DeepEqual(got.Logprobs, want.Logprobs) {
			t.Errorf("request %d: drafting changed the logprobs", i)
		}
	}
	total := func(rs []*Result) (drafted, accepted, predicted int) {
		for _, r := range rs {
			drafted += r.Usage.DraftedTokens
			accepted += r.Usage.AcceptedTokens
			predicted += r.Usage.AcceptedPrediction
		}
		return
	}
	t.Run("alone", func(t *testing.T) {
		got := make([]*Result, len(reqs))
		for i, r := range reqs {
			res, err := on.Generate(context.Background(), r)
			if err != nil {
				t.Fatalf("request %d: %v", i, err)
			}
			check(t, i, res)
			got[i] = res
		}
		drafted, accepted, predicted := total(got)
		t.Logf("drafted %d, accepted %d (%d from predictions)", drafted, accepted, predicted)
		if accepted == 0 || predicted == 0 || accepted >= drafted {
			t.Errorf("drafted %d, accepted %d, %d of them predicted: want drafts, some accepted, some predicted, some rejected", drafted, accepted, predicted)
		}
		for i, r := range reqs {
			if len(r.Prediction) > 0 && reflect.DeepEqual(r.Prediction, plain[i].CompletionTokens) {
				if u := got[i].Usage; u.AcceptedPrediction < len(r.Prediction)/2 {
					t.Errorf("request %d predicted its own output: %d of %d accepted from it", i, u.AcceptedPrediction, len(r.Prediction))
				}
			}
		}
	})
	t.Run("batched", func(t *testing.T) {
		var wg sync.WaitGroup
		for i, r := range reqs {
			wg.Go(func() {
				res, err := on.Generate(context.Background(), r)
				if err != nil {
					t.Error(fmt.Errorf("request %d: %w", i, err))
					return
				}
				check(t, i, res)
			})
		}
		wg.Wait()
	})
}

// TestLongestMatch: the draft's source is the latest end of the longest
// run matching the text's end, up to maxMatch tokens, within [lo, hi).
func TestLongestMatch(t *testing.T) {
	for _, tc := range []struct {
		text, h        []int32
		lo, hi         int
		wantNext, want int
	}{
		{[]int32{1, 2, 3, 9, 2, 3, 7, 1, 2, 3}, nil, 0, 9, 3, 3},         // 1 2 3 at 0..2 beats 2 3 at 4..5
		{[]int32{5, 2, 3, 9, 2, 3, 7, 1, 2, 3}, nil, 0, 9, 6, 2},         // two 2-token runs: the latest
		{[]int32{4, 5, 6, 7}, nil, 0, 3, 0, 0},                           // the last token never came before
		{[]int32{1, 1, 1, 1}, nil, 0, 3, 3, 3},                           // a run may overlap the end
		{[]int32{7, 8, 9}, []int32{0, 7, 8}, 0, 2, 2, 2},                 // another text, matched to h's end
		{[]int32{7, 8, 9, 7, 8, 5}, []int32{0, 7, 8}, 2, 5, 5, 2},        // only ends in [lo, hi)
		{append(make([]int32, 40), 3), make([]int32, 40), 0, 40, 40, 16}, // at most maxMatch: the latest stops the search
	} {
		h := tc.h
		if h == nil {
			h = tc.text
		}
		next, n := longestMatch(tc.text, h, tc.lo, tc.hi)
		if next != tc.wantNext || n != tc.want {
			t.Errorf("longestMatch(%v, %v, %d, %d) = %d, %d; want %d, %d", tc.text, h, tc.lo, tc.hi, next, n, tc.wantNext, tc.want)
		}
	}
}

// TestDraftCost: the measured cost of a drafted row follows what steps
// take, one slow drafted step is bounded and fades as steps without drafts
// run, and what is drafted follows cost and acceptance.
func TestDraftCost(t *testing.T) {
	var d draftCost
	if got := d.ratio(2); got != priorRowCost/2 {
		t.Fatalf("unmeasured ratio %v, want the prior over the batch, %v", got, priorRowCost/2)
	}
	for range 50 {
		d.observe(1, 1, 0.040) // one sequence, no drafts: 40 ms
		d.observe(1, 5, 0.080) // four drafts add 40 ms: 10 ms a row
	}
	if got := d.ratio(1); got < 0.2 || got > 0.3 {
		t.Fatalf("ratio %v after steady steps, want about 0.25", got)
	}
	d.observe(1, 2, 10) // a drafted step stalled for 10 s
	if got := d.ratio(1); got > 0.3+costEMA*2 {
		t.Fatalf("ratio %v after one stalled step, want it bounded by two steps a row", got)
	}
	for range 200 {
		d.observe(1, 1, 0.040)
	}
	if got := d.ratio(1); got > priorRowCost+0.05 {
		t.Fatalf("ratio %v after 200 steps without drafts, want it back near the prior %v", got, priorRowCost)
	}
	var sp speculation
	if k := sp.length(8, 1, 0.25, 0.9); k < 4 {
		t.Errorf("acceptance 0.9 at a quarter step a row drafts %d, want several", k)
	}
	if k := sp.length(8, 1, 0.5, 0.2); k != 0 {
		t.Errorf("acceptance 0.2 at half a step a row drafts %d, want none", k)
	}
	if k := sp.length(8, 4, 0.25, 0.9); k >= sp.length(8, 1, 0.25, 0.9) {
		t.Errorf("one of 4 sequences, a row a quarter of their step, drafts %d: no fewer than alone", k)
	}
}

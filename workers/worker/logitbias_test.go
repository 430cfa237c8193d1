package worker

import (
	"context"
	"errors"
	"io"
	"testing"

	"github.com/bulkhead-ai/bulkhead/queue"
	"github.com/bulkhead-ai/bulkhead/workers/engine"
)

// TestLogitBiasBans: a job's logit_bias of -100 on a token keeps it out of
// 200 sampled tokens, though the same job without the bias draws it often;
// a bias naming a token outside the vocabulary is refused as invalid input.
func TestLogitBiasBans(t *testing.T) {
	ev := startNATS(t)
	e := startEngine(t, engine.Config{})
	startWorker(t, ev, Config{Models: map[string]*engine.Engine{model: e}})
	run := func(bias []queue.TokenBias) (map[int32]int, []*queue.Frame, error) {
		job := newJob(t, "Once upon a time", 200)
		job.Sampling = queue.Sampling{Temperature: 1, Seed: 11}
		job.Stop = nil
		job.LogitBias = bias
		r, err := ev.client.Submit(context.Background(), job)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		frames, err := collect(t, r)
		counts := map[int32]int{}
		for _, f := range frames {
			for _, tok := range f.Tokens {
				counts[tok]++
			}
		}
		return counts, frames, err
	}
	free, _, err := run(nil)
	if !errors.Is(err, io.EOF) {
		t.Fatal(err)
	}
	var common int32
	for tok, n := range free {
		if n > free[common] {
			common = tok
		}
	}
	if free[common] < 5 {
		t.Fatalf("no token drawn five times in %v: pick a longer run", free)
	}
	banned, frames, err := run([]queue.TokenBias{{Token: common, Bias: -100}})
	if !errors.Is(err, io.EOF) {
		t.Fatal(err)
	}
	total := 0
	for _, n := range banned {
		total += n
	}
	if banned[common] != 0 || total < 100 {
		t.Fatalf("with token %d banned: drawn %d times in %d tokens (%d frames)", common, banned[common], total, len(frames))
	}
	t.Logf("token %d: drawn %d times unbiased (%d distinct tokens), 0 times in %d tokens banned", common, free[common], len(free), total)

	_, frames, _ = run([]queue.TokenBias{{Token: int32(e.Model().Tokenizer.VocabSize()), Bias: 1}})
	if last := frames[len(frames)-1]; last.Kind != queue.KindError || last.Error.Kind != queue.ErrKindInvalidInput {
		t.Fatalf("a bias outside the vocabulary: last frame %+v, want an invalid_input error", last)
	}
}

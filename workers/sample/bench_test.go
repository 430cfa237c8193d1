package sample

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// benchLogits returns logits shaped roughly like a language model's: a broad
// normal body and a handful of clear favourites.
func benchLogits(n int) []float32 {
	r := rand.New(rand.NewPCG(11, 12))
	l := make([]float32, n)
	for i := range l {
		l[i] = float32(r.NormFloat64() * 2)
	}
	for range 8 {
		l[r.IntN(n)] = 12 + float32(r.NormFloat64())
	}
	return l
}

func BenchmarkSample(b *testing.B) {
	configs := []struct {
		name string
		p    Params
	}{
		{"greedy", Params{}},
		{"greedy_rep1.1", Params{RepetitionPenalty: 1.1}},
		{"topk40_topp0.9", Params{Temperature: 0.8, TopK: 40, TopP: 0.9}},
		{"topp0.9", Params{Temperature: 0.8, TopP: 0.9}},
		{"minp0.05", Params{Temperature: 0.8, MinP: 0.05}},
		{"temp1", Params{Temperature: 1}},
	}
	for _, n := range []int{49152, 151936} {
		logits := benchLogits(n)
		history := make([]int32, 64)
		for i := range history {
			history[i] = int32(i * 97 % n)
		}
		for _, c := range configs {
			b.Run(fmt.Sprintf("vocab=%d/%s", n, c.name), func(b *testing.B) {
				s, err := New(c.p)
				if err != nil {
					b.Fatal(err)
				}
				for b.Loop() {
					s.Sample(logits, history)
				}
			})
		}
	}
}

func BenchmarkStopMatcher(b *testing.B) {
	pieces := []string{"The", " quick", " brown", " fox", " <", "|", "im", "_", "start", " jumps", " over", " 你好"}
	for b.Loop() {
		m := NewStopMatcher([]string{"<|im_end|>", "\n\nUser:"})
		for _, p := range pieces {
			m.Push(p)
		}
		m.Flush()
	}
}

package sample

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

var negInf = float32(math.Inf(-1))

// logitsOf returns natural-log logits for the given probabilities.
func logitsOf(probs ...float64) []float32 {
	l := make([]float32, len(probs))
	for i, p := range probs {
		l[i] = float32(math.Log(p))
	}
	return l
}

func mustNew(t testing.TB, p Params) *Sampler {
	t.Helper()
	s, err := New(p)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// ids returns the candidate ids in order.
func ids(c []cand) []int32 {
	out := make([]int32, len(c))
	for i, x := range c {
		out[i] = x.id
	}
	return out
}

// filterOf runs the chain up to the draw, as Sample does.
func filterOf(s *Sampler, logits []float32, history []int32) []cand {
	vals := s.penalized(logits, history)
	return s.filter(vals, vals[argmax(vals)])
}

func TestGreedy(t *testing.T) {
	tests := []struct {
		name    string
		p       Params
		logits  []float32
		history []int32
		want    int32
	}{
		{"largest wins", Params{}, []float32{0.1, 3, -2, 2.9}, nil, 1},
		{"first of a tie", Params{}, []float32{1, 5, 5, 2}, nil, 1},
		{"NaN never wins", Params{}, []float32{float32(math.NaN()), -1, -3}, nil, 1},
		{"all -Inf gives 0", Params{}, []float32{negInf, negInf}, nil, 0},
		{"+Inf wins", Params{}, []float32{3, float32(math.Inf(1)), 2}, nil, 1},
		{"filters do not change the argmax", Params{TopK: 1, TopP: 0.1, MinP: 0.9}, []float32{0, 4, 1}, nil, 1},
		// 4/2 = 2 < 3: the repeated token loses to token 2.
		{"repetition penalty flips", Params{RepetitionPenalty: 2}, []float32{0, 4, 3}, []int32{1}, 2},
		// 4 - 2*0.6 - 0.1 = 2.7 < 3.
		{"frequency and presence flip", Params{FrequencyPenalty: 0.6, PresencePenalty: 0.1}, []float32{0, 4, 3}, []int32{1, 0, 1}, 2},
		{"out of vocabulary history ignored", Params{RepetitionPenalty: 2}, []float32{0, 4, 3}, []int32{-1, 7, 99}, 1},
		{"token outside window not penalized", Params{RepetitionPenalty: 2, PenaltyLastN: 2}, []float32{0, 4, 3}, []int32{1, 0, 0}, 1},
		{"window -1 sees everything", Params{RepetitionPenalty: 2, PenaltyLastN: -1}, []float32{0, 4, 3}, []int32{1, 0, 0}, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := mustNew(t, tt.p)
			logits := slices.Clone(tt.logits)
			if got := s.Sample(logits, tt.history); got != tt.want {
				t.Errorf("Sample() = %d, want %d", got, tt.want)
			}
			if !slices.EqualFunc(logits, tt.logits, func(a, b float32) bool { return a == b || a != a && b != b }) {
				t.Errorf("Sample modified logits: %v, was %v", logits, tt.logits)
			}
		})
	}
}

func TestGreedyDoesNotDraw(t *testing.T) {
	s := mustNew(t, Params{Seed: 42, RepetitionPenalty: 1.3})
	for range 10 {
		s.Sample([]float32{1, 2, 3}, []int32{2})
	}
	fresh := rand.New(rand.NewPCG(42, pcgStream))
	if got, want := s.rng.Uint64(), fresh.Uint64(); got != want {
		t.Errorf("greedy sampling advanced the generator: next = %d, fresh = %d", got, want)
	}
}

func TestPenalties(t *testing.T) {
	logits := []float32{4, -4, 2, 1, 0.5, 3}
	history := []int32{0, 1, 0, 2, 0, 5, 1}
	tests := []struct {
		name string
		p    Params
		want []float32
	}{
		{
			// counts: 0×3, 1×2, 2×1, 5×1
			name: "repetition divides positive, multiplies negative",
			p:    Params{RepetitionPenalty: 2, PenaltyLastN: -1},
			want: []float32{2, -8, 1, 1, 0.5, 1.5},
		},
		{
			name: "frequency per count, presence once",
			p:    Params{FrequencyPenalty: 0.5, PresencePenalty: 0.25, PenaltyLastN: -1},
			want: []float32{4 - 1.5 - 0.25, -4 - 1 - 0.25, 2 - 0.5 - 0.25, 1, 0.5, 3 - 0.5 - 0.25},
		},
		{
			name: "repetition then frequency and presence",
			p:    Params{RepetitionPenalty: 2, FrequencyPenalty: 1, PresencePenalty: 1, PenaltyLastN: -1},
			want: []float32{2 - 3 - 1, -8 - 2 - 1, -1 /* 1 - 1 - 1 */, 1, 0.5, 1.5 - 1 - 1},
		},
		{
			// last 3: 0, 5, 1
			name: "window of 3",
			p:    Params{RepetitionPenalty: 2, PenaltyLastN: 3},
			want: []float32{2, -8, 2, 1, 0.5, 1.5},
		},
		{
			name: "negative penalties reward",
			p:    Params{FrequencyPenalty: -1, PresencePenalty: -2, PenaltyLastN: -1},
			want: []float32{4 + 3 + 2, -4 + 2 + 2, 2 + 1 + 2, 1, 0.5, 3 + 1 + 2},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name+"/greedy", func(t *testing.T) {
			s := mustNew(t, tt.p)
			s.Sample(logits, history)
			if got := s.work[:len(logits)]; !slices.Equal(got, tt.want) {
				t.Errorf("penalized = %v, want %v", got, tt.want)
			}
			assertCountsZero(t, s)
		})
		t.Run(tt.name+"/sampled", func(t *testing.T) {
			p := tt.p
			p.Temperature = 1
			s := mustNew(t, p)
			c := filterOf(s, logits, history)
			got := make([]float32, len(c))
			for _, x := range c {
				got[x.id] = x.logit
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("penalized = %v, want %v", got, tt.want)
			}
			assertCountsZero(t, s)
		})
	}
}

func assertCountsZero(t *testing.T, s *Sampler) {
	t.Helper()
	for i, c := range s.counts {
		if c != 0 {
			t.Fatalf("counts[%d] = %d after a call, want all zero", i, c)
		}
	}
}

func TestFilters(t *testing.T) {
	// Probabilities 0.1, 0.5, 0.25, 0.15: sorted ids 1, 2, 3, 0.
	four := logitsOf(0.1, 0.5, 0.25, 0.15)
	tests := []struct {
		name   string
		p      Params
		logits []float32
		want   []int32 // kept ids, in the order the chain leaves them
	}{
		{"nothing set keeps all in id order", Params{}, four, []int32{0, 1, 2, 3}},
		{"top_k 1", Params{TopK: 1}, four, []int32{1}},
		{"top_k 3", Params{TopK: 3}, four, []int32{1, 2, 3}},
		{"top_k beyond vocabulary", Params{TopK: 10}, four, []int32{0, 1, 2, 3}},
		{"top_k ties keep the lower id", Params{TopK: 2}, []float32{1, 5, 3, 5, 5}, []int32{1, 3}},
		{"top_p below the first", Params{TopP: 0.45}, four, []int32{1}},
		{"top_p keeps the token that crosses", Params{TopP: 0.7}, four, []int32{1, 2}},
		{"top_p 0.8", Params{TopP: 0.8}, four, []int32{1, 2, 3}},
		{"top_p 0.95", Params{TopP: 0.95}, four, []int32{1, 2, 3, 0}},
		{"min_p 0.19 keeps p >= 0.095", Params{MinP: 0.19}, four, []int32{0, 1, 2, 3}},
		{"min_p 0.25 keeps id order", Params{MinP: 0.25}, four, []int32{1, 2, 3}},
		{"min_p 0.35", Params{MinP: 0.35}, four, []int32{1, 2}},
		{"min_p 0.6", Params{MinP: 0.6}, four, []int32{1}},
		{"min_p 1 keeps the maximum", Params{MinP: 1}, four, []int32{1}},
		// Top-k first: renormalized 0.5/0.75 = 0.67 >= 0.6 keeps one token.
		// Top-p on the full set would have kept two.
		{"top_k before top_p", Params{TopK: 2, TopP: 0.6}, four, []int32{1}},
		// Top-p keeps 1, 2, 3; min-p 0.4 relative to 0.5 drops 3 (0.15 < 0.2).
		{"top_p before min_p", Params{TopP: 0.8, MinP: 0.4}, four, []int32{1, 2}},
		{"-Inf logits are dropped by min_p", Params{MinP: 0.01}, []float32{negInf, 0, negInf}, []int32{1}},
		{"NaN is -Inf", Params{TopK: 2}, []float32{float32(math.NaN()), -3, -4}, []int32{1, 2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := tt.p
			p.Temperature = 1
			s := mustNew(t, p)
			c := filterOf(s, tt.logits, nil)
			if got := ids(c); !slices.Equal(got, tt.want) {
				t.Errorf("kept %v, want %v", got, tt.want)
			}
		})
	}
}

func TestDegenerate(t *testing.T) {
	inf := float32(math.Inf(1))
	tests := []struct {
		name   string
		logits []float32
		want   int32
	}{
		{"all -Inf gives the first", []float32{negInf, negInf, negInf}, 0},
		{"+Inf is certain", []float32{1, inf, 2, inf}, 1},
		{"all NaN gives the first", []float32{float32(math.NaN()), float32(math.NaN())}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := mustNew(t, Params{Temperature: 1, TopK: 2, TopP: 0.5})
			if got := s.Sample(tt.logits, nil); got != tt.want {
				t.Errorf("Sample() = %d, want %d", got, tt.want)
			}
		})
	}
}

// refTopP is the obvious full-sort implementation of top-p, as an oracle.
func refTopP(logits []float32, p float64) []int32 {
	c := make([]cand, len(logits))
	for i, l := range logits {
		c[i] = cand{id: int32(i), logit: l}
	}
	sortDesc(c)
	m := float64(c[0].logit)
	var z float64
	for _, x := range c {
		z += math.Exp(float64(x.logit) - m)
	}
	var cum float64
	for i, x := range c {
		cum += math.Exp(float64(x.logit)-m) / z
		if cum >= p {
			return ids(c[:i+1])
		}
	}
	return ids(c)
}

func TestTopPMatchesFullSort(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	flat := make([]float32, 1000)
	tests := []struct {
		name   string
		logits []float32
		p      float32
		want   int // expected kept count, 0 = compare with the oracle only
	}{
		// 1000 equal tokens: 0.5005 needs 501 of them, all in one histogram bucket,
		// and ties keep the lowest ids.
		{"flat: ties keep the lowest ids", flat, 0.5005, 501},
	}
	for i := range 6 {
		l := make([]float32, 5000)
		for j := range l {
			l[j] = float32(r.NormFloat64() * float64(i+1) * 0.5)
		}
		tests = append(tests, struct {
			name   string
			logits []float32
			p      float32
			want   int
		}{fmt.Sprintf("random scale %.1f", float64(i+1)*0.5), l, []float32{0.1, 0.5, 0.9, 0.95, 0.99, 0.999}[i], 0})
	}
	wide := make([]float32, 3000)
	for j := range wide {
		switch j % 10 {
		case 0:
			wide[j] = negInf
		case 1:
			wide[j] = -100 + float32(r.NormFloat64())
		default:
			wide[j] = float32(r.NormFloat64() * 8)
		}
	}
	for _, p := range []float32{0.3, 0.9, 0.99999, 1 - 1e-7} {
		tests = append(tests, struct {
			name   string
			logits []float32
			p      float32
			want   int
		}{fmt.Sprintf("wide spread with -Inf, p=%g", p), wide, p, 0})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := mustNew(t, Params{Temperature: 1, TopP: tt.p})
			c := filterOf(s, tt.logits, nil)
			// The unsorted path keeps the right set in its own order.
			got := ids(c)
			want := refTopP(tt.logits, float64(tt.p))
			slices.Sort(got)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Fatalf("kept %d tokens, oracle kept %d (first diff near %v vs %v)", len(got), len(want), head(got), head(want))
			}
			if tt.want != 0 && len(got) != tt.want {
				t.Errorf("kept %d, want %d", len(got), tt.want)
			}
			if tt.want != 0 && !slices.Equal(got, seq(int32(tt.want))) {
				t.Errorf("kept %v..., want ids 0..%d", head(got), tt.want-1)
			}
		})
	}
}

func head(v []int32) []int32 { return v[:min(len(v), 8)] }

func seq(n int32) []int32 {
	out := make([]int32, n)
	for i := range out {
		out[i] = int32(i)
	}
	return out
}

func TestTopK(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	inputs := map[string][]float32{}
	for _, n := range []int{2, 17, 100, 1000} {
		asc := make([]float32, n)
		desc := make([]float32, n)
		rnd := make([]float32, n)
		few := make([]float32, n) // many ties
		for i := range n {
			asc[i], desc[i] = float32(i), float32(n-i)
			rnd[i] = float32(r.NormFloat64())
			few[i] = float32(r.IntN(4))
		}
		for name, v := range map[string][]float32{"ascending": asc, "descending": desc, "random": rnd, "ties": few, "equal": make([]float32, n)} {
			inputs[fmt.Sprintf("%s/n=%d", name, n)] = v
		}
	}
	for name, v := range inputs {
		t.Run(name, func(t *testing.T) {
			want := make([]cand, len(v))
			for i, l := range v {
				want[i] = cand{id: int32(i), logit: l}
			}
			sortDesc(want)
			for _, k := range []int{1, 2, len(v) / 3, len(v) / 2, len(v) - 1} {
				if k < 1 {
					continue
				}
				top := topK(make([]cand, k), v)
				sortDesc(top)
				if !slices.Equal(top, want[:k]) {
					t.Fatalf("k=%d: top %v, want %v", k, ids(top)[:min(k, 8)], ids(want[:k])[:min(k, 8)])
				}
			}
		})
	}
}

func TestExp32(t *testing.T) {
	tests := []struct {
		name   string
		lo, hi float32
	}{
		{"near zero", -1, 0},
		{"moderate", -20, -1},
		{"deep", -87, -20},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			const steps = 100000
			for i := range steps + 1 {
				x := tt.lo + (tt.hi-tt.lo)*float32(i)/steps
				got, want := float64(exp32(x)), math.Exp(float64(x))
				if rel := math.Abs(got-want) / want; rel > 4e-7 {
					t.Fatalf("exp32(%g) = %g, want %g (relative error %.2g)", x, got, want, rel)
				}
			}
		})
	}
	t.Run("underflow", func(t *testing.T) {
		for _, x := range []float32{-88, -1000, float32(math.Inf(-1)), float32(math.NaN())} {
			if got := exp32(x); got != 0 {
				t.Errorf("exp32(%g) = %g, want 0", x, got)
			}
		}
	})
}

func TestSeedDeterminism(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	rows := make([][]float32, 200)
	for i := range rows {
		rows[i] = make([]float32, 300)
		for j := range rows[i] {
			rows[i][j] = float32(r.NormFloat64())
		}
	}
	run := func(seed uint64) []int32 {
		s := mustNew(t, Params{Temperature: 0.9, TopK: 50, TopP: 0.95, MinP: 0.01, RepetitionPenalty: 1.1, Seed: seed})
		var out []int32
		for _, row := range rows {
			out = append(out, s.Sample(row, out))
		}
		return out
	}
	tests := []struct {
		name      string
		a, b      uint64
		wantEqual bool
	}{
		{"same seed same tokens", 17, 17, true},
		{"seed zero is a seed", 0, 0, true},
		{"different seeds differ", 17, 18, false},
		{"zero and one differ", 0, 1, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, b := run(tt.a), run(tt.b)
			if slices.Equal(a, b) != tt.wantEqual {
				t.Errorf("seeds %d and %d: equal = %v, want %v", tt.a, tt.b, !tt.wantEqual, tt.wantEqual)
			}
		})
	}
}

func TestDistribution(t *testing.T) {
	const draws = 40000
	logits := []float32{0, 1, 2, -1, 0.5}
	softmax := func(l []float32, temp float64, keep []int) []float64 {
		p := make([]float64, len(l))
		var z float64
		for _, i := range keep {
			p[i] = math.Exp(float64(l[i]) / temp)
			z += p[i]
		}
		for i := range p {
			p[i] /= z
		}
		return p
	}
	tests := []struct {
		name string
		p    Params
		want []float64
	}{
		{"temperature 1", Params{Temperature: 1}, softmax(logits, 1, []int{0, 1, 2, 3, 4})},
		{"temperature 0.5", Params{Temperature: 0.5}, softmax(logits, 0.5, []int{0, 1, 2, 3, 4})},
		{"temperature 2", Params{Temperature: 2}, softmax(logits, 2, []int{0, 1, 2, 3, 4})},
		{"top_k 3 at 0.7", Params{Temperature: 0.7, TopK: 3}, softmax(logits, 0.7, []int{1, 2, 4})},
		// Probabilities 0.076, 0.207, 0.563, 0.028, 0.126: 0.85 needs 2, 1, 4.
		{"top_p 0.85 at 1.5", Params{Temperature: 1.5, TopP: 0.85}, softmax(logits, 1.5, []int{1, 2, 4})},
		// Floor 2 + ln 0.3 = 0.80 keeps 1 and 2.
		{"min_p 0.3", Params{Temperature: 1, MinP: 0.3}, softmax(logits, 1, []int{1, 2})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.p.Seed = 99
			s := mustNew(t, tt.p)
			counts := make([]int, len(logits))
			for range draws {
				counts[s.Sample(logits, nil)]++
			}
			for i, want := range tt.want {
				got := float64(counts[i]) / draws
				// Five binomial standard deviations, plus a hair for p = 0.
				tol := 5*math.Sqrt(want*(1-want)/draws) + 1e-9
				if math.Abs(got-want) > tol {
					t.Errorf("token %d: frequency %.4f, softmax %.4f (tolerance %.4f)", i, got, want, tol)
				}
			}
		})
	}
}

func TestNoAllocations(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	logits := make([]float32, 32000)
	for i := range logits {
		logits[i] = float32(r.NormFloat64() * 2)
	}
	history := make([]int32, 100)
	for i := range history {
		history[i] = int32(r.IntN(len(logits)))
	}
	tests := []struct {
		name string
		p    Params
	}{
		{"greedy", Params{}},
		{"greedy with penalties", Params{RepetitionPenalty: 1.2, FrequencyPenalty: 0.3}},
		{"top_k and top_p", Params{Temperature: 0.8, TopK: 40, TopP: 0.9}},
		{"top_p only", Params{Temperature: 0.8, TopP: 0.9}},
		{"min_p and penalties", Params{Temperature: 1, MinP: 0.05, PresencePenalty: 0.5, PenaltyLastN: -1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := mustNew(t, tt.p)
			s.Sample(logits, history) // grow the scratch once
			if n := testing.AllocsPerRun(20, func() { s.Sample(logits, history) }); n != 0 {
				t.Errorf("Sample allocates %.1f times per call, want 0", n)
			}
		})
	}
}

func TestEmptyLogitsPanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("Sample(nil) did not panic")
		}
	}()
	mustNew(t, Params{}).Sample(nil, nil)
}

func TestSampleAllowedFlatRow(t *testing.T) {
	inf := float32(math.Inf(-1))
	logits := []float32{5, inf, inf, 3}
	allow := []uint64{1<<1 | 1<<2}
	for _, temp := range []float32{0, 1} {
		s, _ := New(Params{Temperature: temp})
		if got := s.SampleAllowed(logits, nil, allow); got != 1 {
			t.Errorf("temperature %v: token %d, want the first allowed (1)", temp, got)
		}
	}
	allow = []uint64{1 << 3}
	s, _ := New(Params{Temperature: 1})
	if got := s.SampleAllowed(logits, nil, allow); got != 3 {
		t.Errorf("token %d, want 3, the only allowed", got)
	}
	lp, top := s.Logprobs(3, 2)
	if len(top) != 2 || top[0].ID != 0 || lp >= top[0].Logprob {
		t.Errorf("logprobs before the mask: %v %+v", lp, top)
	}
}

// TestLogitBias: a bias of -100 bans its token (never drawn, greedy or
// sampled, with or without a grammar mask), others add to the logit, and
// ids outside the vocabulary are ignored.
func TestLogitBias(t *testing.T) {
	logits := []float32{1, 4, 3.5, 0}
	greedy := func(p Params) int32 {
		s, err := New(p)
		if err != nil {
			t.Fatal(err)
		}
		return s.Sample(logits, nil)
	}
	if got := greedy(Params{LogitBias: []TokenBias{{1, -100}}}); got != 2 {
		t.Errorf("greedy with the best token banned: %d, want 2", got)
	}
	if got := greedy(Params{LogitBias: []TokenBias{{3, 5}}}); got != 3 {
		t.Errorf("greedy with token 3 raised by 5: %d, want 3", got)
	}
	if got := greedy(Params{LogitBias: []TokenBias{{99, 100}}}); got != 1 {
		t.Errorf("a bias outside the vocabulary changed the pick: %d, want 1", got)
	}
	s, err := New(Params{Temperature: 2, Seed: 1, LogitBias: []TokenBias{{1, -100}, {2, -100}}})
	if err != nil {
		t.Fatal(err)
	}
	allow := []uint64{0b1110} // tokens 1, 2 and 3
	seen := map[int32]int{}
	for range 2000 {
		seen[s.Sample(logits, nil)]++
		if got := s.SampleAllowed(logits, nil, allow); got != 3 {
			t.Fatalf("under a mask allowing 1-3 with 1 and 2 banned: drew %d", got)
		}
	}
	if seen[1] != 0 || seen[2] != 0 || seen[0] == 0 || seen[3] == 0 {
		t.Errorf("2000 draws with 1 and 2 banned: %v", seen)
	}
}

package queue

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestEmbedJobValidate: an encoder job carries inputs (texts or token ids,
// not both, at most MaxEmbedInputs) and no max_tokens; a job without Embed
// still needs max_tokens.
func TestEmbedJobValidate(t *testing.T) {
	base := func() *Job {
		return &Job{ID: "j", Tenant: "t", Model: "m", Reply: "r", Deadline: time.Now(), Embed: &Embed{Inputs: []string{"a"}}}
	}
	if err := base().Validate(); err != nil {
		t.Fatalf("a valid embed job: %v", err)
	}
	for name, mod := range map[string]func(*Job){
		"no inputs":       func(j *Job) { j.Embed.Inputs = nil },
		"too many inputs": func(j *Job) { j.Embed.Inputs = make([]string, MaxEmbedInputs+1) },
		"texts and ids":   func(j *Job) { j.Embed.Tokens = [][]int32{{1}} },
		"max_tokens":      func(j *Job) { j.MaxTokens = 5 },
		"no embed":        func(j *Job) { j.Embed = nil },
	} {
		j := base()
		mod(j)
		if err := j.Validate(); !errors.Is(err, ErrBadMessage) {
			t.Errorf("%s: %v, want ErrBadMessage", name, err)
		}
	}
	b, err := EncodeJob(base())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := DecodeJob(b); err != nil {
		t.Fatal(err)
	}
}

// TestVectorsRoundTrip: packed vectors come back bit for bit through a
// frame's JSON, and malformed ones are refused.
func TestVectorsRoundTrip(t *testing.T) {
	vs := [][]float32{{1, -2.5, float32(math.Pi)}, {0, float32(math.Copysign(0, -1)), 1e-38}}
	f := &Frame{Seq: 1, Kind: KindFinal, Usage: &Usage{PromptTokens: 9}, Vectors: PackVectors(vs, "cls")}
	b, err := EncodeFrame(f)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"pooling":"cls"`) {
		t.Fatalf("frame %s", b)
	}
	g, err := DecodeFrame(b)
	if err != nil {
		t.Fatal(err)
	}
	got, err := g.Vectors.Unpack()
	if err != nil {
		t.Fatal(err)
	}
	for i := range vs {
		for d := range vs[i] {
			if math.Float32bits(got[i][d]) != math.Float32bits(vs[i][d]) {
				t.Fatalf("vector %d: %v, want %v", i, got[i], vs[i])
			}
		}
	}
	for _, bad := range []*Vectors{{Dims: 0, Data: []byte{1, 2, 3, 4}}, {Dims: 3, Data: make([]byte, 13)}, {Dims: MaxEmbedDims + 1, Data: make([]byte, 4*(MaxEmbedDims+1))}} {
		if _, err := bad.Unpack(); !errors.Is(err, ErrBadMessage) {
			t.Errorf("%d dims of %d bytes: %v", bad.Dims, len(bad.Data), err)
		}
	}
	if v := PackVectors(nil, "mean"); v.Dims != 0 || !slices.Equal(v.Data, []byte{}) {
		t.Errorf("no vectors: %+v", v)
	}
}

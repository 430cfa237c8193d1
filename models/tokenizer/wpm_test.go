package tokenizer

import (
	"slices"
	"testing"
)

// TestWordPiece: BERT's special tokens as llama.cpp adds them ([CLS] first,
// [SEP] last), a word no piece covers as one [UNK], control tokens matched
// only with special parsing, and the normalization (case, accents, CJK and
// punctuation split, control characters dropped).
func TestWordPiece(t *testing.T) {
	tk := loadVocab(t, "ggml-vocab-bert-bge")
	if tk.Model() != "bert" || tk.VocabSize() != 30522 || tk.BOS() != 101 || tk.EOS() != 102 || !tk.AddBOS() || !tk.AddEOS() {
		t.Fatalf("model %q size %d bos %d eos %d addBOS %v addEOS %v", tk.Model(), tk.VocabSize(), tk.BOS(), tk.EOS(), tk.AddBOS(), tk.AddEOS())
	}
	for _, c := range []struct {
		text          string
		special, pars bool
		want          []int32
	}{
		{"Hello world", true, false, []int32{101, 7592, 2088, 102}},
		{"Hello world", false, false, []int32{7592, 2088}},
		{"HÉLLO wörld", false, false, []int32{7592, 2088}},           // lowercased, accents dropped
		{"hello\u200bworld\x00", false, false, []int32{7592, 11108}}, // a zero-width space is dropped, not a split: "##world"
		{"🦙 hello", false, false, []int32{100, 7592}},
		{"[CLS] hello", false, true, []int32{101, 7592}},
		{"[CLS] hello", false, false, []int32{1031, 18856, 2015, 1033, 7592}},
	} {
		if got := tk.Encode(c.text, c.special, c.pars); !slices.Equal(got, c.want) {
			t.Errorf("Encode(%q, %v, %v) = %v, want %v", c.text, c.special, c.pars, got, c.want)
		}
	}
	if got, want := wpmWords("Ça, 我想!x\ty"), []string{"ca", ",", "我", "想", "!", "x", "y"}; !slices.Equal(got, want) {
		t.Errorf("wpmWords = %q, want %q", got, want)
	}
}

package tokenizer

import (
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// unigramVocab is llama.cpp's XLM-RoBERTa Unigram vocabulary
// (models/ggml-vocab-nomic-bert-moe.gguf of llama.cpp, MIT; see
// testdata/unigram/README.md), with cases made by llama-tokenize --no-bos
// --no-parse-special: 50 of ours, then llama.cpp's 46 standard inputs, then two of
// ours with runs of unknown code points.
const unigramVocab = "testdata/unigram/ggml-vocab-nomic-bert-moe.gguf"

// TestUnigram checks every case gives llama.cpp's ids.
func TestUnigram(t *testing.T) {
	tk := load(t, unigramVocab)
	if tk.Model() != "t5" || tk.VocabSize() != 250048 || tk.BOS() != 0 || tk.EOS() != 2 || !tk.AddBOS() || !tk.AddEOS() {
		t.Fatalf("model %q size %d bos %d eos %d addBOS %v addEOS %v", tk.Model(), tk.VocabSize(), tk.BOS(), tk.EOS(), tk.AddBOS(), tk.AddEOS())
	}
	cases := readUnigramCases(t)
	if len(cases) < 90 {
		t.Fatalf("%d cases, want at least 90", len(cases))
	}
	for i, c := range cases {
		t.Run(strconv.Itoa(i)+"_"+caseName(c.text), func(t *testing.T) {
			if got := tk.Encode(c.text, false, false); !slices.Equal(got, c.ids) {
				t.Errorf("Encode(%q)\n got %v\nwant %v", c.text, got, c.ids)
			}
		})
	}
	// The file adds <s> first and </s> last; <s> in text is only parsed
	// when asked.
	if got, want := tk.Encode("Hello world", true, false), []int32{0, 35378, 8999, 2}; !slices.Equal(got, want) {
		t.Errorf("with specials: %v, want %v", got, want)
	}
	if got := tk.Encode("<s>", false, true); !slices.Equal(got, []int32{0}) {
		t.Errorf("<s> parsed: %v, want [0]", got)
	}
	if got := tk.Decode(tk.Encode("Hello   world café", false, false)); got != "Hello world café" {
		t.Errorf("decoded %q", got)
	}
}

func readUnigramCases(t *testing.T) []conformanceCase {
	t.Helper()
	inp, err := os.ReadFile(unigramVocab + ".inp")
	if err != nil {
		t.Fatal(err)
	}
	outp, err := os.ReadFile(unigramVocab + ".out")
	if err != nil {
		t.Fatal(err)
	}
	texts := strings.Split(string(inp), "\n__ggml_vocab_test__\n")
	texts = texts[:len(texts)-1]
	lines := strings.Split(strings.TrimSuffix(string(outp), "\n"), "\n")
	if len(lines) != len(texts) {
		t.Fatalf("%d inputs but %d output lines", len(texts), len(lines))
	}
	cases := make([]conformanceCase, len(texts))
	for i, txt := range texts {
		cases[i].text = txt
		for _, f := range strings.Fields(lines[i]) {
			v, err := strconv.ParseInt(f, 10, 32)
			if err != nil {
				t.Fatal(err)
			}
			cases[i].ids = append(cases[i].ids, int32(v))
		}
	}
	return cases
}

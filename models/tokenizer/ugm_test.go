package tokenizer

import (
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
)

// unigramVocab is llama.cpp's XLM-RoBERTa Unigram vocabulary
// (models/ggml-vocab-nomic-bert-moe.gguf of llama.cpp, MIT; see
// testdata/unigram/README.md; kept gzipped, unigramFile unpacks it), with
// cases made by llama-tokenize --no-bos
// --no-parse-special: 50 of ours, then llama.cpp's 46 standard inputs, then two of
// ours with runs of unknown code points.
const unigramVocab = "testdata/unigram/ggml-vocab-nomic-bert-moe.gguf"

// TestUnigram checks every case gives llama.cpp's ids.
func TestUnigram(t *testing.T) {
	tk := load(t, unigramFile(t))
	if tk.Model() != "t5" || tk.VocabSize() != 250048 || tk.BOS() != 0 || tk.EOS() != 2 || !tk.AddBOS() || !tk.AddEOS() {
		t.Fatalf("model %q size %d bos %d eos %d addBOS %v addEOS %v", tk.Model(), tk.VocabSize(), tk.BOS(), tk.EOS(), tk.AddBOS(), tk.AddEOS())
	}
	cases := readCasesAt(t, unigramVocab)
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

// unigramFile unpacks the gzipped vocabulary into the test's directory and
// returns its path.
func unigramFile(t *testing.T) string {
	t.Helper()
	in, err := os.Open(unigramVocab + ".gz")
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	zr, err := gzip.NewReader(in)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), filepath.Base(unigramVocab))
	out, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, zr); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

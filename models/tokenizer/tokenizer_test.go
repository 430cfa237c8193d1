package tokenizer

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/bulkhead-ai/bulkhead/models/gguf"
	"github.com/bulkhead-ai/bulkhead/models/refdatatest"
)

// vocabFiles are the conformance vocabularies in shared/tokenizer.
var vocabFiles = []string{"ggml-vocab-llama-spm", "ggml-vocab-llama-bpe", "ggml-vocab-qwen2", "ggml-vocab-gpt-2", "ggml-vocab-bert-bge"}

var loaded sync.Map // path -> *Tokenizer; loading a 280k-merge vocabulary takes a while

func load(t testing.TB, path string) *Tokenizer {
	t.Helper()
	if tk, ok := loaded.Load(path); ok {
		return tk.(*Tokenizer)
	}
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	defer f.Close()
	tk, err := FromGGUF(f)
	if err != nil {
		t.Fatalf("FromGGUF %s: %v", path, err)
	}
	loaded.Store(path, tk)
	return tk
}

func loadVocab(t testing.TB, name string) *Tokenizer {
	t.Helper()
	return load(t, refdatatest.Path(t, "tokenizer/"+name+".gguf"))
}

type conformanceCase struct {
	text string
	ids  []int32
}

// readCases parses a .inp/.out pair: each input is followed by
// "\n__ggml_vocab_test__\n"; each output line holds the ids of one input.
func readCases(t testing.TB, name string) []conformanceCase {
	t.Helper()
	return readCasesAt(t, refdatatest.Path(t, "tokenizer/"+name+".gguf"))
}

// readCasesAt is readCases for the vocabulary file at base.
func readCasesAt(t testing.TB, base string) []conformanceCase {
	t.Helper()
	name := filepath.Base(base)
	inp, err := os.ReadFile(base + ".inp")
	if err != nil {
		t.Fatalf("read inputs: %v", err)
	}
	outp, err := os.ReadFile(base + ".out")
	if err != nil {
		t.Fatalf("read outputs: %v", err)
	}
	texts := strings.Split(string(inp), "\n__ggml_vocab_test__\n")
	if texts[len(texts)-1] != "" {
		t.Fatalf("%s.inp does not end with a separator", name)
	}
	texts = texts[:len(texts)-1]
	lines := strings.Split(strings.TrimSuffix(string(outp), "\n"), "\n")
	if len(lines) != len(texts) {
		t.Fatalf("%s: %d inputs but %d output lines", name, len(texts), len(lines))
	}
	cases := make([]conformanceCase, len(texts))
	for i, txt := range texts {
		cases[i].text = txt
		for _, f := range strings.Fields(lines[i]) {
			v, err := strconv.ParseInt(f, 10, 32)
			if err != nil {
				t.Fatalf("%s line %d: %v", name, i+1, err)
			}
			cases[i].ids = append(cases[i].ids, int32(v))
		}
	}
	return cases
}

func TestConformance(t *testing.T) {
	for _, name := range vocabFiles {
		t.Run(name, func(t *testing.T) {
			tk := loadVocab(t, name)
			cases := readCases(t, name)
			if len(cases) != 46 {
				t.Errorf("%d cases, want 46", len(cases))
			}
			for i, c := range cases {
				t.Run(strconv.Itoa(i)+"_"+caseName(c.text), func(t *testing.T) {
					got := tk.Encode(c.text, false, false)
					if !slices.Equal(got, c.ids) {
						t.Errorf("Encode(%q)\n got %v\nwant %v", c.text, got, c.ids)
					}
				})
			}
		})
	}
}

// caseName makes a short, readable subtest name from a case's text.
func caseName(s string) string {
	r := []rune(s)
	if len(r) > 20 {
		r = r[:20]
	}
	return strconv.Quote(string(r))
}

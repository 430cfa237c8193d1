package tokenizer

import (
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzEncode encodes arbitrary text with every reference vocabulary and checks
// that ids stay in range, that the stream decoder agrees with Decode and yields
// valid UTF-8, and that valid text round-trips where llama.cpp's rules allow.
func FuzzEncode(f *testing.F) {
	for _, s := range []string{"", " ", "Hello world", "it's 'RE  ok ?\r\n\t x", "🦙.cpp 我想 ½ ៉", "\xff\xe2\x82"} {
		f.Add(s)
	}
	var toks []*Tokenizer
	for _, name := range vocabFiles {
		toks = append(toks, loadVocab(f, name))
	}
	toks = append(toks, load(f, filepath.Join(sharedDir(f), "models", "stories260K.gguf")))
	f.Fuzz(func(t *testing.T, s string) {
		for _, tk := range toks {
			for _, special := range []bool{false, true} {
				ids := tk.Encode(s, special, special)
				plain := true
				for _, id := range ids {
					if id < 0 || int(id) >= tk.VocabSize() {
						t.Fatalf("%s: id %d out of range for %q", tk.pre, id, s)
					}
					if tk.attrs[id]&(attrControl|attrUnknown) != 0 {
						plain = false
					}
				}
				got := tk.Decode(ids)
				if streamed := streamAll(t, tk, ids); streamed != got {
					t.Fatalf("%s: stream %q != Decode %q", tk.model, streamed, got)
				}
				if special || !plain || !utf8.ValidString(s) || (tk.kind == kindSPM && strings.Contains(s, "▁")) {
					continue
				}
				want := s
				if tk.cleanSpaces {
					want = referenceClean(s)
				}
				if got != want {
					t.Fatalf("%s %s: Decode(Encode(%q)) = %q, want %q (ids %v)", tk.model, tk.pre, s, got, want, ids)
				}
			}
		}
	})
}

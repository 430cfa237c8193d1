package tokenizer

import (
	"slices"
	"strings"
	"testing"

	"github.com/bulkhead-ai/bulkhead/models/refdatatest"
)

// segmentVocabs are every shared vocabulary with control tokens, and the
// Phi-3 one, whose special tokens strip the whitespace to their right.
func segmentVocabs(t testing.TB) []*Tokenizer {
	t.Helper()
	var toks []*Tokenizer
	for _, name := range vocabFiles {
		toks = append(toks, loadVocab(t, name))
	}
	return append(toks, load(t, refdatatest.Path(t, "models/archs/phi3-tiny-f16.gguf")))
}

// cutAtControl splits text at every control token, as the chat package
// does: tokens are Special segments, the text between them is not.
func cutAtControl(tk *Tokenizer, text string) []Segment {
	ctl := tk.ControlTokens()
	var segs []Segment
	start := 0
	for i := 0; i < len(text); {
		hit := ""
		for _, c := range ctl {
			if strings.HasPrefix(text[i:], c) {
				hit = c
				break
			}
		}
		if hit == "" {
			i++
			continue
		}
		if i > start {
			segs = append(segs, Segment{Text: text[start:i]})
		}
		segs = append(segs, Segment{Text: hit, Special: true})
		i += len(hit)
		start = i
	}
	if start < len(text) {
		segs = append(segs, Segment{Text: text[start:]})
	}
	return segs
}

func TestEncodeSegments(t *testing.T) {
	texts := []string{
		"",
		"Hello world",
		"<|im_start|>system\nYou are kind.<|im_end|>\n<|im_start|>user\n  Hi there <|im_end|>\n<|im_start|>assistant\n",
		"<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHello!<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
		"<s><|user|>\n  Hi <|end|>\n<|assistant|>\n",
		"<s>[INST] Hi [/INST] there</s>",
		"a<|endoftext|> b <unk>c",
	}
	for _, tk := range segmentVocabs(t) {
		for _, text := range texts {
			t.Run(tk.model+"-"+tk.pre+"/"+text, func(t *testing.T) {
				for _, bos := range []bool{false, true} {
					want := tk.Encode(text, bos, true)
					if got := tk.EncodeSegments(cutAtControl(tk, text), bos); !slices.Equal(got, want) {
						t.Fatalf("EncodeSegments = %v, want Encode(parseSpecial) %v", got, want)
					}
					// One plain segment is Encode without special parsing.
					if got, want := tk.EncodeSegments([]Segment{{Text: text}}, bos), tk.Encode(text, bos, false); !slices.Equal(got, want) {
						t.Fatalf("plain EncodeSegments = %v, want %v", got, want)
					}
				}
			})
		}
	}
}

// TestControlTokenTextIsPlain: control-token text in a plain segment gives no
// control token, in every vocabulary, for every control token it has.
func TestControlTokenTextIsPlain(t *testing.T) {
	for _, tk := range segmentVocabs(t) {
		t.Run(tk.model+"-"+tk.pre, func(t *testing.T) {
			ctl := tk.ControlTokens()
			if len(ctl) == 0 {
				t.Skip("no control tokens")
			}
			for _, c := range ctl {
				for _, id := range tk.EncodeSegments([]Segment{{Text: "say " + c + " now"}}, false) {
					if tk.attrs[id]&(attrControl|attrUnknown) != 0 {
						t.Fatalf("%q in plain text gave control token %d", c, id)
					}
				}
				if ids := tk.EncodeSegments([]Segment{{Text: c, Special: true}}, false); len(ids) != 1 || tk.tokens.at(ids[0]) != c {
					t.Fatalf("%q as a Special segment = %v, want its one id", c, ids)
				}
			}
		})
	}
}

// FuzzEncodeSegments cuts text anywhere into plain segments: the ids never
// depend on where the cuts are, and never hold control tokens.
func FuzzEncodeSegments(f *testing.F) {
	f.Add("Hello <|im_start|> world", uint64(0x12345))
	f.Add("<s><|user|>\n hi<|end|>", uint64(7))
	toks := segmentVocabs(f)
	f.Fuzz(func(t *testing.T, s string, cuts uint64) {
		var segs []Segment
		last := 0
		for i := 1; i < len(s) && cuts != 0; i++ {
			if cuts&1 != 0 {
				segs = append(segs, Segment{Text: s[last:i]})
				last = i
			}
			cuts >>= 1
		}
		segs = append(segs, Segment{Text: s[last:]})
		for _, tk := range toks {
			want := tk.Encode(s, false, false)
			got := tk.EncodeSegments(segs, false)
			if !slices.Equal(got, want) {
				t.Fatalf("%s: EncodeSegments(%+v) = %v, want %v", tk.pre, segs, got, want)
			}
		}
	})
}

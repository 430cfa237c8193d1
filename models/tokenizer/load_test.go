package tokenizer

import (
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/bulkhead-ai/bulkhead/models/gguf"
)

func strs(a ...string) gguf.Value { return gguf.Value{Type: gguf.ValArray, Elem: gguf.ValString, V: a} }
func i32s(a ...int32) gguf.Value  { return gguf.Value{Type: gguf.ValArray, Elem: gguf.ValInt32, V: a} }
func f32s(a ...float32) gguf.Value {
	return gguf.Value{Type: gguf.ValArray, Elem: gguf.ValFloat32, V: a}
}
func str(s string) gguf.Value { return gguf.Value{Type: gguf.ValString, V: s} }
func u32(v uint32) gguf.Value { return gguf.Value{Type: gguf.ValUint32, V: v} }
func boolv(b bool) gguf.Value { return gguf.Value{Type: gguf.ValBool, V: b} }
func file(kv map[string]gguf.Value) *gguf.File {
	return &gguf.File{Keys: slices.Sorted(maps.Keys(kv)), KV: kv}
}

// tinySPM is a valid five-token SentencePiece vocabulary without byte tokens:
// "▁a" merges, a lone "▁" does not exist and falls back to three unknowns.
func tinySPM() map[string]gguf.Value {
	return map[string]gguf.Value{
		keyModel:     str("llama"),
		keyTokens:    strs("<unk>", "<s>", "</s>", "▁a", "b"),
		keyScores:    f32s(0, 0, 0, -1, -2),
		keyTokenType: i32s(typeUnknown, typeControl, typeControl, typeNormal, typeNormal),
	}
}

// tinyBPE is a valid byte-level BPE vocabulary with one merge.
func tinyBPE() map[string]gguf.Value {
	return map[string]gguf.Value{
		keyModel:                      str("gpt2"),
		keyPre:                        str("gpt-2"),
		keyTokens:                     strs("a", "b", "ab", "<|endoftext|>"),
		keyMerges:                     strs("a b"),
		"tokenizer.ggml.bos_token_id": u32(3),
		"tokenizer.ggml.eos_token_id": u32(3),
	}
}

func with(kv map[string]gguf.Value, key string, v gguf.Value) map[string]gguf.Value {
	kv[key] = v
	return kv
}

func without(kv map[string]gguf.Value, key string) map[string]gguf.Value {
	delete(kv, key)
	return kv
}

func TestFromGGUFRejects(t *testing.T) {
	for _, tc := range []struct {
		name    string
		kv      map[string]gguf.Value
		want    error
		mention string
	}{
		{"no model", without(tinySPM(), keyModel), ErrMissing, keyModel},
		{"unknown model", with(tinySPM(), keyModel, str("rwkv")), ErrUnsupportedModel, "rwkv"},
		{"unknown pre", with(tinyBPE(), keyPre, str("tekken")), ErrUnsupportedPre, "tekken"},
		{"no tokens", without(tinySPM(), keyTokens), ErrMissing, keyTokens},
		{"tokens not strings", with(tinySPM(), keyTokens, i32s(1, 2)), ErrMissing, keyTokens},
		{"empty vocabulary", with(tinySPM(), keyTokens, strs()), ErrCorrupt, "0 tokens"},
		{"short scores", with(tinySPM(), keyScores, f32s(0, 0)), ErrCorrupt, "2 scores"},
		{"scores not numbers", with(tinySPM(), keyScores, strs("x")), ErrCorrupt, keyScores},
		{"short token types", with(tinySPM(), keyTokenType, i32s(1)), ErrCorrupt, keyTokenType},
		{"duplicate token", with(tinySPM(), keyTokens, strs("<unk>", "<s>", "</s>", "b", "b")), ErrCorrupt, `"b"`},
		{"bos out of range", with(tinySPM(), "tokenizer.ggml.bos_token_id", u32(5)), ErrCorrupt, "bos_token_id"},
		{"eos not an integer", with(tinySPM(), "tokenizer.ggml.eos_token_id", str("2")), ErrCorrupt, "eos_token_id"},
		{"add bos without bos", with(tinySPM(), "tokenizer.ggml.bos_token_id", u32(0xFFFFFFFF)), ErrCorrupt, keyAddBOS},
		{"bad byte token", with(tinySPM(), keyTokenType, i32s(typeUnknown, typeControl, typeControl, typeNormal, typeByte)), ErrCorrupt, "byte token"},
		{"bpe without merges", without(tinyBPE(), keyMerges), ErrMissing, keyMerges},
		{"bpe add eos without eos", with(with(tinyBPE(), "tokenizer.ggml.eos_token_id", u32(0xFFFFFFFF)), keyAddEOS, boolv(true)), ErrCorrupt, keyAddEOS},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tk, err := FromGGUF(file(tc.kv))
			if !errors.Is(err, tc.want) {
				t.Fatalf("FromGGUF = %v, %v; want %v", tk, err, tc.want)
			}
			if !strings.Contains(err.Error(), tc.mention) {
				t.Errorf("error %q does not mention %q", err, tc.mention)
			}
		})
	}
	t.Run("nil file", func(t *testing.T) {
		if _, err := FromGGUF(nil); !errors.Is(err, ErrMissing) {
			t.Errorf("FromGGUF(nil) = %v", err)
		}
	})
}

func TestFromGGUFTolerates(t *testing.T) {
	t.Run("unset and out of range hint ids", func(t *testing.T) {
		kv := tinySPM()
		kv["tokenizer.ggml.padding_token_id"] = u32(0xFFFFFFFF)
		kv["tokenizer.ggml.eot_token_id"] = u32(99)
		tk, err := FromGGUF(file(kv))
		if err != nil {
			t.Fatal(err)
		}
		if !tk.IsEOG(2) || tk.IsEOG(99) {
			t.Errorf("EOG set %v", tk.eog)
		}
	})
	t.Run("spm without byte tokens falls back to unk", func(t *testing.T) {
		tk, err := FromGGUF(file(tinySPM()))
		if err != nil {
			t.Fatal(err)
		}
		if got, want := tk.Encode("a b€", true, false), []int32{1, 3, 0, 0, 0, 4, 0, 0, 0}; !slices.Equal(got, want) {
			t.Errorf("Encode = %v, want %v", got, want)
		}
	})
	t.Run("bpe merges and missing pre", func(t *testing.T) {
		tk, err := FromGGUF(file(without(tinyBPE(), keyPre)))
		if err != nil {
			t.Fatal(err)
		}
		if got, want := tk.Encode("abba", true, false), []int32{2, 1, 0}; !slices.Equal(got, want) {
			t.Errorf("Encode = %v, want %v", got, want)
		}
		if tk.AddBOS() || !tk.IsEOG(3) {
			t.Errorf("addBOS %v eog %v", tk.AddBOS(), tk.eog)
		}
	})
	t.Run("empty token renamed", func(t *testing.T) {
		tk, err := FromGGUF(file(with(tinySPM(), keyTokens, strs("<unk>", "<s>", "</s>", "", "b"))))
		if err != nil {
			t.Fatal(err)
		}
		if id, ok := tk.TokenID("[EMPTY_3]"); !ok || id != 3 {
			t.Errorf("TokenID([EMPTY_3]) = %d, %v", id, ok)
		}
	})
}

func TestPreTokenizers(t *testing.T) {
	for _, tc := range []struct {
		name string
		kind preKind
		in   string
		want []string
	}{
		{"default words", preDefault, "Hello world", []string{"Hello", " world"}},
		{"default symbols", preDefault, "a+b==c", []string{"a", "+", "b", "==", "c"}},
		{"default digit triples", preDefault, "x 1234567 y", []string{"x", " ", "123", "456", "7", " y"}},
		{"default apostrophe", preDefault, "it's  ok", []string{"it", "'", "s", " ", " ok"}},
		{"gpt2 contractions are case sensitive", preGPT2, "it's IT'S", []string{"it", "'s", " IT", "'", "S"}},
		{"gpt2 numbers and spaces", preGPT2, "a  12345 !?\n", []string{"a", " ", " 12345", " !?", "\n"}},
		{"llama3 digits in threes", preLlama3, "1234567", []string{"123", "456", "7"}},
		{"llama3 contractions fold case", preLlama3, "IT'S we'Ve", []string{"IT", "'S", " we", "'Ve"}},
		{"llama3 newlines", preLlama3, "a \n\n  b!\n", []string{"a", " \n\n", " ", " b", "!\n"}},
		{"qwen2 single digits", preQwen2, "x123", []string{"x", "1", "2", "3"}},
		{"qwen2 punctuation prefix", preQwen2, "(hi) ...", []string{"(hi", ")", " ..."}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := decodeRunes(tc.in, nil)
			cls := make([]uint8, len(r))
			for i, c := range r {
				cls[i] = classify(c)
			}
			var sp splitter
			var got []string
			for _, p := range pretokenize(tc.kind, r, cls, &sp) {
				got = append(got, string(r[p.lo:p.hi]))
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("split %q, want %q", got, tc.want)
			}
		})
	}
}

func TestGGUFImageLoads(t *testing.T) {
	for _, tc := range []struct {
		name, text string
		kv         map[string]gguf.Value
		want       []int32
	}{
		{"spm", "a", tinySPM(), []int32{1, 3}},
		{"bpe", "ab", tinyBPE(), []int32{2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := gguf.Parse(ggufImage(tc.kv))
			if err != nil {
				t.Fatal(err)
			}
			tk, err := FromGGUF(f)
			if err != nil {
				t.Fatal(err)
			}
			if got := tk.Encode(tc.text, true, false); !slices.Equal(got, tc.want) {
				t.Errorf("Encode = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestMergesThroughNonTokens: merges are looked up by their sides' token
// ids, but a merge list may name a side that is no token (an intermediate
// that only a further merge turns into one); those still merge, as
// llama.cpp's string-keyed ranks have them.
func TestMergesThroughNonTokens(t *testing.T) {
	kv := tinyBPE()
	kv[keyTokens] = strs("a", "b", "c", "abc", "<|endoftext|>")
	kv[keyMerges] = strs("a b", "ab c", "b c")
	tk, err := FromGGUF(file(kv))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		text string
		want []int32
	}{
		{"abc", []int32{3}},   // a+b (rank 0, "ab" is no token), then ab+c (rank 1)
		{"ab", []int32{0, 1}}, // "ab" is no token: its bytes, as llama.cpp emits them
		{"bc", []int32{1, 2}}, // b+c merges to "bc", no token either
		{"cab", []int32{2, 0, 1}},
	} {
		if got := tk.Encode(tc.text, false, false); !slices.Equal(got, tc.want) {
			t.Errorf("Encode(%q) = %v, want %v", tc.text, got, tc.want)
		}
	}
}

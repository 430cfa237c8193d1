package tokenizer

import (
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/bulkhead-ai/bulkhead/models/refdatatest"
)

func TestStories260K(t *testing.T) {
	tk := load(t, refdatatest.Path(t, "models/stories260K.gguf"))
	if tk.VocabSize() != 512 || tk.Model() != "llama" {
		t.Fatalf("vocab %d model %q, want 512 llama", tk.VocabSize(), tk.Model())
	}
	for _, tc := range []struct {
		name string
		text string
		want []int32
	}{
		{"once upon a time", "Once upon a time", []int32{1, 403, 407, 261, 378}},
		{"lily wanted to", "Lily wanted to", []int32{1, 317, 391, 266, 267}},
		{"empty gets only BOS", "", []int32{1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := tk.Encode(tc.text, true, false)
			if !slices.Equal(got, tc.want) {
				t.Fatalf("Encode(%q) = %v, want %v", tc.text, got, tc.want)
			}
			// llama.cpp: a leading BOS takes the first-piece strip, so the
			// text comes back with the SentencePiece space in front.
			want := tc.text
			if want != "" {
				want = " " + want
			}
			if got := tk.Decode(got); got != want {
				t.Errorf("Decode = %q, want %q", got, want)
			}
			if got := tk.Decode(got[1:]); got != tc.text {
				t.Errorf("Decode without BOS = %q, want %q", got, tc.text)
			}
		})
	}
}

func TestAccessors(t *testing.T) {
	for _, tc := range []struct {
		vocab            string
		model, pre       string
		size             int
		bos, eos         int32
		addBOS, template bool
	}{
		{"ggml-vocab-llama-spm", "llama", "", 32000, 1, 2, true, false},
		{"ggml-vocab-llama-bpe", "gpt2", "llama-bpe", 128256, 128000, 128001, true, false},
		{"ggml-vocab-qwen2", "gpt2", "qwen2", 151936, 151643, 151643, false, true},
		{"ggml-vocab-gpt-2", "gpt2", "gpt-2", 50257, 50256, 50256, false, false},
	} {
		t.Run(tc.vocab, func(t *testing.T) {
			tk := loadVocab(t, tc.vocab)
			if tk.Model() != tc.model || tk.Pre() != tc.pre || tk.VocabSize() != tc.size {
				t.Errorf("model %q pre %q size %d, want %q %q %d", tk.Model(), tk.Pre(), tk.VocabSize(), tc.model, tc.pre, tc.size)
			}
			if tk.BOS() != tc.bos || tk.EOS() != tc.eos || tk.AddBOS() != tc.addBOS || tk.AddEOS() {
				t.Errorf("bos %d eos %d addBOS %v addEOS %v", tk.BOS(), tk.EOS(), tk.AddBOS(), tk.AddEOS())
			}
			if (tk.ChatTemplate() != "") != tc.template {
				t.Errorf("chat template %q", tk.ChatTemplate())
			}
			got := tk.Encode("Hi", true, false)
			if tc.addBOS != (len(got) > 0 && got[0] == tc.bos) {
				t.Errorf("Encode with addSpecial = %v (addBOS %v)", got, tc.addBOS)
			}
		})
	}
}

func TestEOG(t *testing.T) {
	for _, tc := range []struct {
		vocab string
		eog   []string
		not   []string
	}{
		{"ggml-vocab-llama-spm", []string{"</s>"}, []string{"<s>", "<unk>", "▁Hello"}},
		{"ggml-vocab-llama-bpe", []string{"<|eot_id|>", "<|end_of_text|>"}, []string{"<|begin_of_text|>", "<|start_header_id|>", "Hello"}},
		{"ggml-vocab-qwen2", []string{"<|im_end|>", "<|endoftext|>"}, []string{"<|im_start|>", "Hello"}},
		{"ggml-vocab-gpt-2", []string{"<|endoftext|>"}, []string{"Hello"}},
	} {
		t.Run(tc.vocab, func(t *testing.T) {
			tk := loadVocab(t, tc.vocab)
			for _, s := range tc.eog {
				id, ok := tk.TokenID(s)
				if !ok || !tk.IsEOG(id) {
					t.Errorf("%q (id %d, found %v) is not end of generation", s, id, ok)
				}
			}
			for _, s := range tc.not {
				id, ok := tk.TokenID(s)
				if !ok {
					t.Fatalf("no token %q", s)
				}
				if tk.IsEOG(id) {
					t.Errorf("%q (id %d) is end of generation", s, id)
				}
			}
			if tk.IsEOG(-1) || tk.IsEOG(int32(tk.VocabSize())) {
				t.Error("ids outside the vocabulary are end of generation")
			}
		})
	}
}

func TestParseSpecial(t *testing.T) {
	for _, tc := range []struct {
		name, vocab string
		text        string
		parse       bool
		want        []string // token texts
	}{
		{"qwen2 chat markers", "ggml-vocab-qwen2", "<|im_start|>user\nhi<|im_end|>", true,
			[]string{"<|im_start|>", "user", "Ċ", "hi", "<|im_end|>"}},
		{"qwen2 user-defined always split", "ggml-vocab-qwen2", "a[PAD151646]b", false,
			[]string{"a", "[PAD151646]", "b"}},
		{"llama3 header", "ggml-vocab-llama-bpe", "<|begin_of_text|><|start_header_id|>user<|end_header_id|>", true,
			[]string{"<|begin_of_text|>", "<|start_header_id|>", "user", "<|end_header_id|>"}},
		{"spm bos then space prefix", "ggml-vocab-llama-spm", "<s>Hello</s>", true,
			[]string{"<s>", "▁Hello", "</s>"}},
		{"spm bos as text", "ggml-vocab-llama-spm", "<s>", false,
			[]string{"▁<", "s", ">"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tk := loadVocab(t, tc.vocab)
			got := tk.Encode(tc.text, false, tc.parse)
			var texts []string
			for _, id := range got {
				texts = append(texts, tk.tokens.at(id))
			}
			if !slices.Equal(texts, tc.want) {
				t.Errorf("Encode(%q, parse %v) = %q (%v), want %q", tc.text, tc.parse, texts, got, tc.want)
			}
		})
	}
}

func TestSpecialAsText(t *testing.T) {
	for _, tc := range []struct {
		vocab, text string
	}{
		{"ggml-vocab-qwen2", "<|im_start|>user<|im_end|>"},
		{"ggml-vocab-llama-bpe", "<|begin_of_text|>x<|eot_id|>"},
		{"ggml-vocab-llama-spm", "<s>x</s>"},
	} {
		t.Run(tc.vocab, func(t *testing.T) {
			tk := loadVocab(t, tc.vocab)
			ids := tk.Encode(tc.text, false, false)
			for _, id := range ids {
				if tk.attrs[id]&attrControl != 0 {
					t.Errorf("control token %q (id %d) matched without parseSpecial", tk.tokens.at(id), id)
				}
			}
			if got := tk.Decode(ids); got != tc.text {
				t.Errorf("Decode(Encode(%q)) = %q", tc.text, got)
			}
			if parsed := tk.Encode(tc.text, false, true); len(parsed) >= len(ids) {
				t.Errorf("parseSpecial gave %v, no shorter than %v", parsed, ids)
			}
		})
	}
}

func TestDecodeSpecial(t *testing.T) {
	tk := loadVocab(t, "ggml-vocab-qwen2")
	ids := tk.Encode("<|im_start|>assistant\nHello!<|im_end|>", false, true)
	for _, tc := range []struct {
		name string
		opts []DecodeOption
		want string
	}{
		{"control tokens hidden", nil, "assistant\nHello!"},
		{"control tokens shown", []DecodeOption{WithSpecial()}, "<|im_start|>assistant\nHello!<|im_end|>"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tk.Decode(ids, tc.opts...); got != tc.want {
				t.Errorf("Decode = %q, want %q", got, tc.want)
			}
		})
	}
	t.Run("piece", func(t *testing.T) {
		id, _ := tk.TokenID("<|im_end|>")
		if got := tk.Piece(id); got != "<|im_end|>" {
			t.Errorf("Piece(im_end) = %q", got)
		}
		id, _ = tk.TokenID("ĠHello")
		if got := tk.Piece(id); got != " Hello" {
			t.Errorf("Piece(ĠHello) = %q", got)
		}
		if tk.Piece(-1) != "" || tk.Piece(1<<30) != "" {
			t.Error("Piece of an id outside the vocabulary is not empty")
		}
	})
}

func TestSPMPieces(t *testing.T) {
	tk := loadVocab(t, "ggml-vocab-llama-spm")
	for _, tc := range []struct {
		piece, want string
	}{
		{"▁Hello", " Hello"},
		{"<0x0A>", "\n"},
		{"<0xE2>", "\xe2"},
		{"<s>", "<s>"},
	} {
		t.Run(tc.piece, func(t *testing.T) {
			id, ok := tk.TokenID(tc.piece)
			if !ok {
				t.Fatalf("no token %q", tc.piece)
			}
			if got := tk.Piece(id); got != tc.want {
				t.Errorf("Piece = %q, want %q", got, tc.want)
			}
		})
	}
	t.Run("keep leading space", func(t *testing.T) {
		ids := tk.Encode("Hello world", false, false)
		if got := tk.Decode(ids, KeepLeadingSpace()); got != " Hello world" {
			t.Errorf("Decode(KeepLeadingSpace) = %q", got)
		}
		if got := tk.Decode(ids); got != "Hello world" {
			t.Errorf("Decode = %q", got)
		}
	})
	t.Run("bos eos with specials shown", func(t *testing.T) {
		ids := tk.Encode("Hi", true, false)
		ids = append(ids, tk.EOS())
		if got := tk.Decode(ids, WithSpecial()); !strings.HasPrefix(got, "<s> Hi") || !strings.HasSuffix(got, "</s>") {
			t.Errorf("Decode(WithSpecial) = %q", got)
		}
	})
}

func TestConcurrentUse(t *testing.T) {
	for _, name := range vocabFiles {
		t.Run(name, func(t *testing.T) {
			tk := loadVocab(t, name)
			text := "Hello, y'all! How are you 😁 ?我想在apple工作1314151天～ <|im_start|>"
			want := tk.Encode(text, true, true)
			wantText := tk.Decode(want)
			errs := make(chan string, 8)
			var wg sync.WaitGroup
			for range 4 {
				wg.Go(func() {
					for range 20 {
						got := tk.Encode(text, true, true)
						if !slices.Equal(got, want) {
							errs <- "Encode differs"
							return
						}
						if tk.Decode(got) != wantText {
							errs <- "Decode differs"
							return
						}
					}
				})
			}
			wg.Wait()
			close(errs)
			for e := range errs {
				t.Error(e)
			}
		})
	}
}

package tokenizer

import (
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/bulkhead-ai/bulkhead/models/refdatatest"
)

// referenceClean is llama.cpp's clean_up_tokenization_spaces written as its
// three in-place passes over one buffer, kept separate from the streaming
// version in decode.go so each checks the other.
func referenceClean(s string) string {
	text := []byte(s)
	total := len(text)
	// pass 1: " ?", " !", " .", " ,"
	t1 := total
	total = min(total, 1)
	for i := 1; i < t1; i++ {
		x := text[i]
		if text[i-1] == ' ' && (x == '?' || x == '!' || x == '.' || x == ',') {
			total--
		}
		text[total] = x
		total++
	}
	// pass 2: " ' "
	t2 := total
	total = min(total, 1)
	for i := 1; i < t2; i++ {
		x := text[i]
		if x == '\'' && i+1 < t2 && text[i-1] == ' ' && text[i+1] == ' ' {
			total--
			i++
			text[i] = 0
		}
		text[total] = x
		total++
	}
	// pass 3: " 's", " 'm", " 're", " 've"
	t3 := total
	total = min(total, 1)
	for i := 1; i < t3; i++ {
		x := text[i]
		if text[i-1] == ' ' && x == '\'' && i+1 < t3 {
			x1 := text[i+1]
			if x1 == 's' || x1 == 'm' {
				total--
			} else if x1 != 't' && x1 != 'd' && i+2 < t3 {
				x2 := text[i+2]
				if (x1 == 'r' && x2 == 'e') || (x1 == 'v' && x2 == 'e') {
					total--
				}
			}
		}
		text[total] = x
		total++
	}
	return string(text[:total])
}

func streamClean(s string, chunk int) string {
	c := cleaner{on: true}
	var out []byte
	for len(s) > 0 {
		n := min(chunk, len(s))
		out = c.write(out, s[:n])
		s = s[n:]
	}
	return string(c.flush(out))
}

func TestCleanerMatchesReference(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"Hello , world !", "Hello, world!"},
		{"a ' b", "a'b"},
		{"it 's , he 'll , we 're , I 'm , they 've , I 'd", "it's, he 'll, we're, I'm, they've, I 'd"},
		{" ' ' ' '", "''''"},
		{"  ,", " ,"},
		{" 's", "'s"},
		{"x '", "x '"},
	} {
		t.Run(strconv.Quote(tc.in), func(t *testing.T) {
			if got := referenceClean(tc.in); got != tc.want {
				t.Fatalf("referenceClean = %q, want %q", got, tc.want)
			}
			for _, chunk := range []int{1, 2, 3, 100} {
				if got := streamClean(tc.in, chunk); got != tc.want {
					t.Errorf("stream (chunks of %d) = %q, want %q", chunk, got, tc.want)
				}
			}
		})
	}
	t.Run("random", func(t *testing.T) {
		rng := rand.New(rand.NewPCG(1, 2))
		const alphabet = " ' 'smrevtdl?!.,x"
		for range 20000 {
			b := make([]byte, rng.IntN(12))
			for i := range b {
				b[i] = alphabet[rng.IntN(len(alphabet))]
			}
			s := string(b)
			want := referenceClean(s)
			if got := streamClean(s, 1+rng.IntN(4)); got != want {
				t.Fatalf("stream clean of %q = %q, want %q", s, got, want)
			}
		}
	})
}

func TestRoundTrip(t *testing.T) {
	for _, name := range vocabFiles {
		t.Run(name, func(t *testing.T) {
			tk := loadVocab(t, name)
			for i, c := range readCases(t, name) {
				t.Run(strconv.Itoa(i)+"_"+caseName(c.text), func(t *testing.T) {
					want := c.text
					if tk.cleanSpaces {
						want = referenceClean(want)
					}
					ids := tk.Encode(c.text, false, false)
					if tk.kind == kindWPM {
						if slices.Contains(ids, tk.unk) {
							return // WordPiece drops what it does not know
						}
						want = wpmJoined(c.text)
					}
					if got := tk.Decode(ids); got != want {
						t.Errorf("Decode(Encode(%q)) = %q, want %q", c.text, got, want)
					}
				})
			}
		})
	}
}

// streamAll feeds ids one at a time and checks every chunk is valid UTF-8.
func streamAll(t *testing.T, tk *Tokenizer, ids []int32, opts ...DecodeOption) string {
	t.Helper()
	d := tk.NewStreamDecoder(opts...)
	var sb strings.Builder
	for i, id := range ids {
		chunk := d.Next(id)
		if !utf8.ValidString(chunk) {
			t.Fatalf("chunk %d (id %d) is not valid UTF-8: %q", i, id, chunk)
		}
		sb.WriteString(chunk)
	}
	chunk := d.Flush()
	if !utf8.ValidString(chunk) {
		t.Fatalf("flush is not valid UTF-8: %q", chunk)
	}
	sb.WriteString(chunk)
	return sb.String()
}

func TestStreamDecoder(t *testing.T) {
	texts := []string{
		"🚀 (normal) 😶‍🌫️ (multiple emojis concatenated) ✅ (only emoji that has its own token)",
		"Hello, y'all! How are you 😁 ?我想在apple工作1314151天～",
		"ស្វាគមន៍ нещо на Български 🦙.cpp",
		"it 's fine , isn 't it ? ' quoted ' text",
		"  leading spaces and trailing   ",
	}
	for _, name := range append(vocabFiles, "stories260K") {
		t.Run(name, func(t *testing.T) {
			var tk *Tokenizer
			if name == "stories260K" {
				tk = load(t, refdatatest.Path(t, "models/stories260K.gguf"))
			} else {
				tk = loadVocab(t, name)
			}
			for i, text := range texts {
				ids := tk.Encode(text, true, false)
				for _, opts := range [][]DecodeOption{nil, {WithSpecial()}, {KeepLeadingSpace()}} {
					want := tk.Decode(ids, opts...)
					if got := streamAll(t, tk, ids, opts...); got != want {
						t.Errorf("text %d: stream = %q, Decode = %q", i, got, want)
					}
				}
			}
		})
	}
	t.Run("holds back split sequences", func(t *testing.T) {
		tk := loadVocab(t, "ggml-vocab-llama-spm")
		var ids []int32
		for _, b := range []byte("é🦙") {
			id, ok := tk.TokenID("<0x" + strings.ToUpper(strconv.FormatUint(uint64(b)|0x100, 16)[1:]) + ">")
			if !ok {
				t.Fatalf("no byte token for %#x", b)
			}
			ids = append(ids, id)
		}
		d := tk.NewStreamDecoder()
		var chunks []string
		for _, id := range ids {
			chunks = append(chunks, d.Next(id))
		}
		chunks = append(chunks, d.Flush())
		want := []string{"", "é", "", "", "", "🦙", ""}
		if strings.Join(chunks, "|") != strings.Join(want, "|") {
			t.Errorf("chunks %q, want %q", chunks, want)
		}
	})
	t.Run("invalid bytes become replacement characters", func(t *testing.T) {
		tk := loadVocab(t, "ggml-vocab-llama-spm")
		ff, _ := tk.TokenID("<0xFF>")
		e2, _ := tk.TokenID("<0xE2>")
		a, _ := tk.TokenID("a")
		ids := []int32{a, ff, e2, a, e2}
		got := streamAll(t, tk, ids)
		if want := "a\uFFFD\uFFFDa\uFFFD"; got != want || tk.Decode(ids) != want {
			t.Errorf("stream %q, Decode %q, want %q", got, tk.Decode(ids), want)
		}
	})
	t.Run("random ids", func(t *testing.T) {
		rng := rand.New(rand.NewPCG(3, 4))
		for _, name := range vocabFiles {
			tk := loadVocab(t, name)
			for range 200 {
				ids := make([]int32, rng.IntN(40))
				for i := range ids {
					if rng.IntN(2) == 0 {
						ids[i] = int32(rng.IntN(300)) // byte tokens live low in these vocabularies
					} else {
						ids[i] = int32(rng.IntN(tk.VocabSize()+2)) - 1
					}
				}
				if got, want := streamAll(t, tk, ids), tk.Decode(ids); got != want {
					t.Fatalf("%s: ids %v: stream %q, Decode %q", name, ids, got, want)
				}
			}
		}
	})
}

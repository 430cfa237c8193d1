package tokenizer

import (
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/bulkhead-ai/bulkhead/models/gguf"
	"github.com/bulkhead-ai/bulkhead/models/refdatatest"
)

// FuzzEncode encodes arbitrary text with every reference vocabulary and checks
// that ids stay in range, that the stream decoder agrees with Decode and yields
// valid UTF-8, and that valid text round-trips where llama.cpp's rules allow
// (WordPiece: to its normalized words).
func FuzzEncode(f *testing.F) {
	for _, s := range []string{"", " ", "Hello world", "it's 'RE  ok ?\r\n\t x", "🦙.cpp 我想 ½ ៉", "\xff\xe2\x82"} {
		f.Add(s)
	}
	var toks []*Tokenizer
	for _, name := range vocabFiles {
		toks = append(toks, loadVocab(f, name))
	}
	toks = append(toks, load(f, refdatatest.Path(f, "models/stories260K.gguf")))
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
				if special || !plain || !utf8.ValidString(s) || (tk.kind != kindBPE && strings.Contains(s, "▁")) {
					continue
				}
				want := s
				if tk.kind == kindWPM {
					want = wpmJoined(s)
				}
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

// wpmJoined is what WordPiece's ids of s decode to when none is unknown:
// its normalized words, each after a space.
func wpmJoined(s string) string {
	var b strings.Builder
	for _, w := range wpmWords(s) {
		b.WriteString(" " + w)
	}
	return b.String()
}

// ggufImage encodes metadata as a tensor-less GGUF v3 file.
func ggufImage(kv map[string]gguf.Value) []byte {
	le := binary.LittleEndian
	b := le.AppendUint32(nil, gguf.Magic)
	b = le.AppendUint32(b, 3)
	b = le.AppendUint64(b, 0)
	b = le.AppendUint64(b, uint64(len(kv)))
	str := func(s string) { b = le.AppendUint64(b, uint64(len(s))); b = append(b, s...) }
	for _, k := range slices.Sorted(maps.Keys(kv)) {
		str(k)
		switch v := kv[k].V.(type) {
		case string:
			b = le.AppendUint32(b, uint32(gguf.ValString))
			str(v)
		case uint32:
			b = le.AppendUint32(b, uint32(gguf.ValUint32))
			b = le.AppendUint32(b, v)
		case bool:
			b = le.AppendUint32(b, uint32(gguf.ValBool))
			if v {
				b = append(b, 1)
			} else {
				b = append(b, 0)
			}
		case []string:
			b = le.AppendUint32(b, uint32(gguf.ValArray))
			b = le.AppendUint32(b, uint32(gguf.ValString))
			b = le.AppendUint64(b, uint64(len(v)))
			for _, s := range v {
				str(s)
			}
		case []int32:
			b = le.AppendUint32(b, uint32(gguf.ValArray))
			b = le.AppendUint32(b, uint32(gguf.ValInt32))
			b = le.AppendUint64(b, uint64(len(v)))
			for _, x := range v {
				b = le.AppendUint32(b, uint32(x))
			}
		case []float32:
			b = le.AppendUint32(b, uint32(gguf.ValArray))
			b = le.AppendUint32(b, uint32(gguf.ValFloat32))
			b = le.AppendUint64(b, uint64(len(v)))
			for _, x := range v {
				b = le.AppendUint32(b, math.Float32bits(x))
			}
		default:
			panic(fmt.Sprintf("ggufImage: %T", v))
		}
	}
	return b
}

// FuzzFromGGUF feeds arbitrary GGUF images to FromGGUF: a corrupt vocabulary
// must be an error, and an accepted one must encode and decode without panic.
func FuzzFromGGUF(f *testing.F) {
	f.Add(ggufImage(tinySPM()))
	f.Add(ggufImage(tinyBPE()))
	f.Add(ggufImage(with(tinyBPE(), keyPre, str("qwen2"))))
	f.Add(ggufImage(with(tinySPM(), keyTokenType, i32s(typeUnknown, typeControl, typeControl, typeUserDefined, typeByte))))
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := gguf.Parse(data)
		if err != nil {
			return
		}
		tk, err := FromGGUF(file)
		if err != nil {
			if !errors.Is(err, ErrMissing) && !errors.Is(err, ErrCorrupt) &&
				!errors.Is(err, ErrUnsupportedModel) && !errors.Is(err, ErrUnsupportedPre) {
				t.Fatalf("error %v wraps no sentinel", err)
			}
			return
		}
		for _, s := range []string{"", "a b", "ab ba\n\xff", "<s>x</s>"} {
			ids := tk.Encode(s, true, true)
			for _, id := range ids {
				if id < 0 || int(id) >= tk.VocabSize() {
					t.Fatalf("id %d outside a vocabulary of %d", id, tk.VocabSize())
				}
			}
			if got := streamAll(t, tk, ids); got != tk.Decode(ids) {
				t.Fatalf("stream %q != Decode %q", got, tk.Decode(ids))
			}
		}
	})
}

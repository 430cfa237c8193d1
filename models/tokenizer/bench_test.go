package tokenizer

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bulkhead-ai/bulkhead/models/refdatatest"
)

func benchVocabs() []string {
	return append([]string{"stories260K"}, vocabFiles...)
}

func benchLoad(b *testing.B, name string) *Tokenizer {
	if name == "stories260K" {
		return load(b, refdatatest.Path(b, "models/stories260K.gguf"))
	}
	return loadVocab(b, name)
}

// BenchmarkEncode encodes a 3.9 KB English text.
func BenchmarkEncode(b *testing.B) {
	text, err := os.ReadFile(filepath.Join("testdata", "english.txt"))
	if err != nil {
		b.Fatal(err)
	}
	for _, name := range benchVocabs() {
		b.Run(name, func(b *testing.B) {
			tk := benchLoad(b, name)
			b.SetBytes(int64(len(text)))
			b.ReportAllocs()
			for b.Loop() {
				tk.Encode(string(text), true, false)
			}
		})
	}
}

// BenchmarkEncodeRepeated encodes 100 KB of one repeated character, the input
// that makes a naive merge loop quadratic.
func BenchmarkEncodeRepeated(b *testing.B) {
	for _, rep := range []struct{ name, s string }{{"a", "a"}, {"space", " "}} {
		text := strings.Repeat(rep.s, 100<<10)
		for _, name := range benchVocabs() {
			b.Run(rep.name+"/"+name, func(b *testing.B) {
				tk := benchLoad(b, name)
				b.SetBytes(int64(len(text)))
				for b.Loop() {
					tk.Encode(text, false, false)
				}
			})
		}
	}
}

// BenchmarkDecode decodes the English text's ids one stream chunk at a time.
func BenchmarkDecode(b *testing.B) {
	text, err := os.ReadFile(filepath.Join("testdata", "english.txt"))
	if err != nil {
		b.Fatal(err)
	}
	for _, name := range benchVocabs() {
		b.Run(name, func(b *testing.B) {
			tk := benchLoad(b, name)
			ids := tk.Encode(string(text), false, false)
			b.SetBytes(int64(len(text)))
			b.ReportAllocs()
			for b.Loop() {
				d := tk.NewStreamDecoder()
				for _, id := range ids {
					d.Next(id)
				}
				d.Flush()
			}
		})
	}
}

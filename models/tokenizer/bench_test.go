package tokenizer

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/bulkhead-ai/bulkhead/models/gguf"
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

// BenchmarkLoad loads each vocabulary from its file and reports the heap the
// tokenizer keeps once the file is closed (MB-kept): a serving process holds
// it for the model's life, beside the weights.
func BenchmarkLoad(b *testing.B) {
	for _, name := range benchVocabs() {
		path := "models/stories260K.gguf"
		if name != "stories260K" {
			path = "tokenizer/" + name + ".gguf"
		}
		path = refdatatest.Path(b, path)
		b.Run(name, func(b *testing.B) {
			var kept uint64
			for b.Loop() {
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				tk := loadFresh(b, path)
				runtime.GC()
				runtime.ReadMemStats(&after)
				kept = after.HeapAlloc - before.HeapAlloc
				runtime.KeepAlive(tk)
			}
			b.ReportMetric(float64(kept)/1e6, "MB-kept")
		})
	}
}

// loadFresh reads path's tokenizer and closes the file.
func loadFresh(b *testing.B, path string) *Tokenizer {
	f, err := gguf.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	tk, err := FromGGUF(f)
	if err != nil {
		b.Fatal(err)
	}
	return tk
}

package edge

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/bulkhead-ai/bulkhead/models/refdatatest"
)

// BenchmarkAdmission is the edge's per-request CPU work before enqueue:
// decode and validate the body, render the prompt, count its tokens.
func BenchmarkAdmission(b *testing.B) {
	v, err := loadVocab(slog.New(slog.DiscardHandler), modelQwen, refdatatest.Path(b, "tokenizer/ggml-vocab-qwen2.gguf"), false)
	if err != nil {
		b.Fatal(err)
	}
	text := strings.Repeat("Once upon a time there was a little fox who lived in the woods. ", 16)
	body := []byte(`{"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"` + text + `"}],"max_tokens":128}`)
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		var req nativeRequest
		if err := decodeJSON(bytes.NewReader(body), &req); err != nil {
			b.Fatal(err)
		}
		in, err := nativeInput(&req, "")
		if err != nil {
			b.Fatal(err)
		}
		if _, err := v.admit(in, 32768, DefaultMaxTokens); err != nil {
			b.Fatal(err)
		}
	}
}

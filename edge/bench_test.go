package edge

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/bulkhead-ai/bulkhead/models/chat"
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
		if _, err := v.admit(context.Background(), in, 32768, DefaultMaxTokens); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkWorstCaseTools is 16 concurrent OpenAI chat requests whose tools
// sit at chat.MaxToolDepth and chat.MaxToolNodes, rendered by Llama 3.1's
// template (tojson(indent=4): a line per leaf), each through the edge's
// admission: decode, validate, render. Every one is refused by the render
// budget. It reports the process's peak RSS growth over the burst
// (peak-MB; /proc/self/clear_refs resets the peak first) and the refusals.
func BenchmarkWorstCaseTools(b *testing.B) {
	v, err := loadVocab(nil, modelLlama, withTemplate(b, "meta-llama-Llama-3.1-8B-Instruct.jinja"), false)
	if err != nil {
		b.Fatal(err)
	}
	body := []byte(worstCaseTools(chat.MaxToolDepth-6, chat.MaxToolNodes-100))
	const concurrent = 16
	var peak float64
	for b.Loop() {
		runtime.GC()
		base := resetPeakRSS(b)
		var wg sync.WaitGroup
		refused := make(chan error, concurrent)
		for range concurrent {
			wg.Go(func() {
				var req chatRequest
				if err := decodeJSON(bytes.NewReader(body), &req); err != nil {
					refused <- err
					return
				}
				_, in, err := chatInput(&req)
				if err == nil {
					_, err = v.admit(context.Background(), in, 1<<20, DefaultMaxTokens)
				}
				refused <- err
			})
		}
		wg.Wait()
		close(refused)
		for err := range refused {
			if !errors.Is(err, chat.ErrRender) {
				b.Fatalf("a worst-case request was not refused by its render budget: %v", err)
			}
		}
		peak = max(peak, float64(peakRSS(b)-base)/(1<<20))
	}
	b.ReportMetric(peak, "peak-MB")
	b.SetBytes(int64(len(body)) * concurrent)
}

// resetPeakRSS resets the process's peak RSS to its current RSS and returns
// it, in bytes.
func resetPeakRSS(b *testing.B) int64 {
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		b.Skipf("cannot reset the peak RSS: %v", err)
	}
	return procStatus(b, "VmRSS:")
}

// peakRSS is the process's peak RSS since the last reset, in bytes.
func peakRSS(b *testing.B) int64 { return procStatus(b, "VmHWM:") }

func procStatus(b *testing.B, field string) int64 {
	raw, err := os.ReadFile("/proc/self/status")
	if err != nil {
		b.Skip(err)
	}
	for line := range strings.SplitSeq(string(raw), "\n") {
		if rest, ok := strings.CutPrefix(line, field); ok {
			var kb int64
			if _, err := fmt.Sscanf(strings.TrimSpace(rest), "%d kB", &kb); err != nil {
				b.Fatal(err)
			}
			return kb << 10
		}
	}
	b.Fatalf("no %s in /proc/self/status", field)
	return 0
}

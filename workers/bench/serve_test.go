package bench

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// sse streams like the edge's native API: texts as events, then the usage
// and [DONE].
func sse(texts ...string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer tok" {
			http.Error(w, "no", http.StatusUnauthorized)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for _, s := range texts {
			fmt.Fprintf(w, "data: {\"response\":%q}\n\n", s)
			w.(http.Flusher).Flush()
		}
		fmt.Fprintf(w, "data: {\"response\":\"\",\"usage\":{\"completion_tokens\":%d}}\n\ndata: [DONE]\n\n", len(texts))
	}
}

func TestServe(t *testing.T) {
	srv := httptest.NewServer(sse("a", "b", "c"))
	defer srv.Close()
	cfg := ServeConfig{Edge: srv.URL, Token: "tok", Model: "m", Streams: 3, PromptTokens: 4, GenTokens: 3}
	res, err := Serve(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.CompletionTokens != 9 || !(res.Aggregate > 0) || res.Streams != 3 {
		t.Fatalf("result %+v, want 9 tokens over 3 streams", res)
	}
	for _, p := range []string{"p50", "p90", "p99"} {
		if _, ok := res.TTFT[p]; !ok {
			t.Errorf("ttft has no %s: %v", p, res.TTFT)
		}
	}
	t.Run("refused", func(t *testing.T) {
		bad := cfg
		bad.Token = "wrong"
		if _, err := Serve(context.Background(), bad); err == nil || !strings.Contains(err.Error(), "HTTP 401") {
			t.Fatalf("error %v, want one naming HTTP 401", err)
		}
	})
	t.Run("invalid", func(t *testing.T) {
		bad := cfg
		bad.Streams = 0
		if _, err := Serve(context.Background(), bad); !errors.Is(err, ErrConfig) {
			t.Fatalf("error %v, want ErrConfig", err)
		}
	})
}

func TestPercentiles(t *testing.T) {
	var ds []time.Duration
	for i := 100; i >= 1; i-- {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	got := percentiles(ds, func(d time.Duration) float64 { return float64(d) / 1e6 })
	if got["p50"] != 51 || got["p90"] != 91 || got["p99"] != 100 {
		t.Fatalf("percentiles %v, want nearest-rank p50 51, p90 91, p99 100", got)
	}
	if got := percentiles(nil, nil); got["p50"] != 0 || len(got) != 3 {
		t.Fatalf("no samples: %v", got)
	}
}

package queue

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestJobRoundTrip(t *testing.T) {
	dl := time.Date(2030, 1, 2, 3, 4, 5, 6, time.UTC)
	for _, tc := range []struct {
		name string
		job  Job
	}{
		{"minimal", Job{ID: "a", Tenant: "t", Model: "m", MaxTokens: 1, Reply: "r", Deadline: dl}},
		{"async without reply", Job{ID: "a", Tenant: "t", Model: "m", MaxTokens: 1, Async: true, Deadline: dl}},
		{"everything", Job{
			ID: "req-1", Tenant: "tenant", Model: "@cf/meta/llama-3.2-1b-instruct", Prompt: "héllo\x00<|eot|>",
			ParseSpecial: true, AddBOS: true, PromptTokens: 7, MaxTokens: 99,
			Sampling: Sampling{Temperature: 0.7, TopK: 40, TopP: 0.9, MinP: 0.05, RepetitionPenalty: 1.1,
				FrequencyPenalty: -0.5, PresencePenalty: 0.5, Seed: 1<<64 - 1},
			Stop: []string{"\n\n", "END"}, RejectIfBusy: true, Async: true, Reply: "bulkhead.reply.req-1", Deadline: dl,
			Weight: 2.5,
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := EncodeJob(&tc.job)
			if err != nil {
				t.Fatal(err)
			}
			got, err := DecodeJob(b)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(*got, tc.job) {
				t.Errorf("round trip\n got %+v\nwant %+v", *got, tc.job)
			}
		})
	}
}

func TestDecodeJobRefuses(t *testing.T) {
	for _, tc := range []struct{ name, in string }{
		{"not json", "{"},
		{"wrong type", `{"id":1}`},
		{"no id", `{"tenant":"t","model":"m","max_tokens":1,"reply":"r","deadline":"2030-01-01T00:00:00Z"}`},
		{"no tenant", `{"id":"a","model":"m","max_tokens":1,"reply":"r","deadline":"2030-01-01T00:00:00Z"}`},
		{"no model", `{"id":"a","tenant":"t","max_tokens":1,"reply":"r","deadline":"2030-01-01T00:00:00Z"}`},
		{"zero max tokens", `{"id":"a","tenant":"t","model":"m","max_tokens":0,"reply":"r","deadline":"2030-01-01T00:00:00Z"}`},
		{"no reply, not async", `{"id":"a","tenant":"t","model":"m","max_tokens":1,"deadline":"2030-01-01T00:00:00Z"}`},
		{"no deadline", `{"id":"a","tenant":"t","model":"m","max_tokens":1,"reply":"r"}`},
		{"negative weight", `{"id":"a","tenant":"t","model":"m","max_tokens":1,"reply":"r","deadline":"2030-01-01T00:00:00Z","weight":-1}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := DecodeJob([]byte(tc.in)); !errors.Is(err, ErrBadMessage) {
				t.Errorf("DecodeJob(%s) = %v, want ErrBadMessage", tc.in, err)
			}
		})
	}
}

func TestSchedWeight(t *testing.T) {
	for _, tc := range []struct{ weight, want float64 }{{0, 1}, {1, 1}, {0.5, 0.5}, {3, 3}} {
		if got := (&Job{Weight: tc.weight}).SchedWeight(); got != tc.want {
			t.Errorf("Weight %v: SchedWeight %v, want %v", tc.weight, got, tc.want)
		}
	}
}

func TestFrameRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name  string
		frame Frame
	}{
		{"token", Frame{Seq: 1, Kind: KindToken, Text: " the", Tokens: []int32{278}}},
		{"empty token", Frame{Seq: 2, Kind: KindToken, Tokens: []int32{2}}},
		{"final", Frame{Seq: 3, Kind: KindFinal, Text: "tail", Finish: "length", Usage: &Usage{PromptTokens: 4, CompletionTokens: 2}}},
		{"error", Frame{Seq: TerminalSeq, Kind: KindError, Error: &FrameError{Kind: ErrKindInternal, Message: "worker lost mid-stream"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := EncodeFrame(&tc.frame)
			if err != nil {
				t.Fatal(err)
			}
			got, err := DecodeFrame(b)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(*got, tc.frame) {
				t.Errorf("round trip\n got %+v\nwant %+v", *got, tc.frame)
			}
		})
	}
}

func TestDecodeFrameRefuses(t *testing.T) {
	for _, tc := range []struct{ name, in string }{
		{"not json", "nope"},
		{"no seq", `{"kind":"token"}`},
		{"unknown kind", `{"seq":1,"kind":"bogus"}`},
		{"no kind", `{"seq":1}`},
		{"final without usage", `{"seq":1,"kind":"final","finish":"stop"}`},
		{"error without error", `{"seq":1,"kind":"error"}`},
		{"negative seq", `{"seq":-1,"kind":"token"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := DecodeFrame([]byte(tc.in)); !errors.Is(err, ErrBadMessage) {
				t.Errorf("DecodeFrame(%s) = %v, want ErrBadMessage", tc.in, err)
			}
		})
	}
}

// TestFuzzSeeds: the fuzz targets whose seeds are message files find them in
// Go's corpus layout (testdata/fuzz/FuzzX/, "go test fuzz v1" files), which
// every go test runs as FuzzX/<file> subtests; a seed folder that vanished
// would otherwise leave its target unseeded without a word.
func TestFuzzSeeds(t *testing.T) {
	for _, name := range []string{"FuzzDecodeJob", "FuzzDecodeFrame", "FuzzDecodeHandover"} {
		files, _ := filepath.Glob(filepath.Join("testdata", "fuzz", name, "*"))
		if len(files) == 0 {
			t.Errorf("no seeds in testdata/fuzz/%s", name)
		}
		for _, p := range files {
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(string(b), "go test fuzz v1\n") {
				t.Errorf("%s is not in Go's corpus format (first line \"go test fuzz v1\")", p)
			}
		}
	}
}

func FuzzDecodeJob(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) {
		j, err := DecodeJob(b)
		if err != nil {
			if !errors.Is(err, ErrBadMessage) {
				t.Fatalf("error %v does not wrap ErrBadMessage", err)
			}
			return
		}
		if err := j.Validate(); err != nil {
			t.Fatalf("decoded job does not validate: %v", err)
		}
		again, err := EncodeJob(j)
		if err != nil {
			t.Fatal(err)
		}
		j2, err := DecodeJob(again)
		if err != nil {
			t.Fatalf("re-encoded job does not decode: %v", err)
		}
		if !reflect.DeepEqual(normJob(j), normJob(j2)) {
			t.Fatalf("re-decoded job differs:\n%+v\n%+v", j, j2)
		}
	})
}

// normJob strips what JSON cannot carry exactly through a second round trip
// (monotonic clock readings, invalid UTF-8 replaced on the first pass).
func normJob(j *Job) Job {
	c := *j
	c.Deadline = c.Deadline.UTC().Round(0)
	if len(c.Stop) == 0 {
		c.Stop = nil
	}
	return c
}

func FuzzDecodeFrame(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) {
		fr, err := DecodeFrame(b)
		if err != nil {
			if !errors.Is(err, ErrBadMessage) {
				t.Fatalf("error %v does not wrap ErrBadMessage", err)
			}
			return
		}
		if fr.Kind == KindHeartbeat {
			if fr.Seq != 0 || fr.Text != "" || fr.Usage != nil || fr.Error != nil || fr.Tokens != nil {
				t.Fatalf("accepted a heartbeat with content %+v", fr)
			}
			return
		}
		if fr.Seq == 0 || (fr.Kind == KindFinal && fr.Usage == nil) || (fr.Kind == KindError && fr.Error == nil) {
			t.Fatalf("accepted an incomplete frame %+v", fr)
		}
		again, err := EncodeFrame(fr)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := DecodeFrame(again); err != nil {
			t.Fatalf("re-encoded frame does not decode: %v", err)
		}
	})
}

func TestModelToken(t *testing.T) {
	a, b := ModelToken("@cf/meta/llama-3.2-1b-instruct"), ModelToken("@cf/meta/llama-3_2-1b-instruct")
	if a == b {
		t.Errorf("distinct names share token %q", a)
	}
	for _, tok := range []string{a, b, ModelToken("..."), ModelToken("Ünïcode *>")} {
		if strings.ContainsAny(tok, ".*> \t") || tok == "" {
			t.Errorf("token %q is not one subject token", tok)
		}
	}
	if !strings.HasPrefix(a, "cf_meta_llama-3_2-1b-instruct-") {
		t.Errorf("token %q lost the readable name", a)
	}
}

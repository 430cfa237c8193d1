package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"slices"
	"testing"

	"github.com/bulkhead-ai/bulkhead/models/refdatatest"
	"github.com/bulkhead-ai/bulkhead/workers/engine"
)

func TestValidate(t *testing.T) {
	ok := Config{PromptTokens: 1, GenTokens: 2, Batch: 1, DecodePromptTokens: 1}
	if err := ok.Validate(); err != nil {
		t.Fatalf("smallest config refused: %v", err)
	}
	for name, mutate := range map[string]func(*Config){
		"no prompt":        func(c *Config) { c.PromptTokens = 0 },
		"one token":        func(c *Config) { c.GenTokens = 1 },
		"no batch":         func(c *Config) { c.Batch = 0 },
		"no decode prompt": func(c *Config) { c.DecodePromptTokens = 0 },
		"negative threads": func(c *Config) { c.Threads = -1 },
	} {
		t.Run(name, func(t *testing.T) {
			c := ok
			mutate(&c)
			if err := c.Validate(); !errors.Is(err, ErrConfig) {
				t.Fatalf("error %v, want ErrConfig", err)
			}
		})
	}
}

// TestEngine runs the method on stories260K and checks every figure is
// there and positive, the JSON keys are the command's, and the aggregate
// appears only for a batch.
func TestEngine(t *testing.T) {
	m, err := engine.Load(refdatatest.Path(t, "models/stories260K.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	for _, batch := range []int{1, 2} {
		res, err := Engine(context.Background(), nil, m, Config{Threads: 1, PromptTokens: 16, GenTokens: 4, Batch: batch, DecodePromptTokens: 8})
		if err != nil {
			t.Fatal(err)
		}
		b, err := json.Marshal(res)
		if err != nil {
			t.Fatal(err)
		}
		var got map[string]any
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{"prefill_tokens_per_s", "decode_tokens_per_s", "read_bandwidth_gb_per_s", "decode_bound_tokens_per_s", "decode_share_of_bound"} {
			if v, ok := got[k].(float64); !ok || !(v > 0) {
				t.Errorf("batch %d: %s = %v, want a positive number", batch, k, got[k])
			}
		}
		if res.ModelFileBytes <= 0 || res.KVPoolBytes <= 0 || res.PeakResident < 0 {
			t.Errorf("batch %d: file %d, KV pool %d, peak resident %d bytes", batch, res.ModelFileBytes, res.KVPoolBytes, res.PeakResident)
		}
		if _, err := os.Stat("/proc/self/status"); err == nil && !(res.PeakResident > res.ModelFileBytes && res.ResidentRatio > 1) {
			t.Errorf("batch %d: peak resident %d bytes (ratio %g) for a %d-byte model", batch, res.PeakResident, res.ResidentRatio, res.ModelFileBytes)
		}
		if _, has := got["aggregate_tokens_per_s"]; has != (batch > 1) {
			t.Errorf("batch %d: aggregate_tokens_per_s present %v", batch, has)
		}
		// The command printed a map before: its keys came sorted.
		if keys := jsonKeys(t, b); !slices.IsSorted(keys) {
			t.Errorf("batch %d: keys not in name order: %v", batch, keys)
		}
		// The pool holds what the run needs (the longest sequence is the
		// warm-up's 16+2 tokens: two 16-token pages a sequence), not the
		// model's trained context.
		if want := batch * 32; res.KVPoolTokens != want {
			t.Errorf("batch %d: KV pool of %d tokens, want %d", batch, res.KVPoolTokens, want)
		}
		if res.Batch != batch || res.PromptTokens != 16 || res.GenTokens != 4 || res.DecodePromptTokens != 8 || res.Threads != 1 {
			t.Errorf("batch %d: figures echo the wrong config: %+v", batch, res)
		}
	}
}

// jsonKeys returns an object's keys in the order they appear.
func jsonKeys(t *testing.T, b []byte) []string {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(b))
	if _, err := dec.Token(); err != nil {
		t.Fatal(err)
	}
	var keys []string
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k.(string))
		var v any
		if err := dec.Decode(&v); err != nil {
			t.Fatal(err)
		}
	}
	return keys
}

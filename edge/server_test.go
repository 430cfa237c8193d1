package edge

import (
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/bulkhead-ai/bulkhead/models/catalog"
	"github.com/bulkhead-ai/bulkhead/models/refdatatest"
	"github.com/bulkhead-ai/bulkhead/queue"
)

func TestNewValidatesConfig(t *testing.T) {
	stories := refdatatest.Path(t, "models/stories260K.gguf")
	cat, err := catalog.FromFlags([]string{modelStories + "=" + stories})
	if err != nil {
		t.Fatal(err)
	}
	good := func() Config {
		return Config{Catalog: cat, Auth: testAuth, Quota: &fakeLimiter{}, Queue: &queue.Client{}}
	}
	cases := []struct {
		name   string
		mutate func(*Config)
	}{
		{"no catalog", func(c *Config) { c.Catalog = nil }},
		{"no auth", func(c *Config) { c.Auth = nil }},
		{"no quota", func(c *Config) { c.Quota = nil }},
		{"no queue", func(c *Config) { c.Queue = nil }},
		{"negative timeout", func(c *Config) { c.RequestTimeout = -time.Second }},
		{"negative body", func(c *Config) { c.MaxBodyBytes = -1 }},
		{"negative max tokens", func(c *Config) { c.DefaultMaxTokens = -1 }},
		{"negative batch", func(c *Config) { c.MaxBatchRequests = -1 }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := good()
			c.mutate(&cfg)
			if _, err := New(nil, cfg); !errors.Is(err, ErrConfig) {
				t.Errorf("err %v, want ErrConfig", err)
			}
		})
	}
	t.Run("defaults", func(t *testing.T) {
		s, err := New(nil, good())
		if err != nil {
			t.Fatal(err)
		}
		if s.cfg.RequestTimeout != DefaultRequestTimeout || s.cfg.MaxBodyBytes != DefaultMaxBodyBytes ||
			s.cfg.DefaultMaxTokens != DefaultMaxTokens || s.cfg.MaxBatchRequests != DefaultMaxBatchRequests {
			t.Errorf("defaults %+v", s.cfg)
		}
	})
	t.Run("unreadable model file", func(t *testing.T) {
		if _, err := loadVocab(nil, "x", filepath.Join(t.TempDir(), "missing.gguf"), false); !errors.Is(err, ErrConfig) {
			t.Errorf("err %v", err)
		}
	})
}

package catalog

import (
	"errors"
	"strings"
	"testing"
)

func TestCheckName(t *testing.T) {
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"@cf/meta/llama-3.1-8b-instruct", true},
		{"@hf/qwen/qwen3-0.6b-gguf/qwen3-0.6b-q8_0", true},
		{"名前", true},
		{"", false},
		{"has space", false},
		{"tab\there", false},
		{"bad\xffutf8", false},
		{strings.Repeat("n", MaxNameBytes), true},
		{strings.Repeat("n", MaxNameBytes+1), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckName(tc.name)
			if tc.ok != (err == nil) || err != nil && !errors.Is(err, ErrInvalid) {
				t.Fatalf("CheckName(%q) = %v, want ok %v", tc.name, err, tc.ok)
			}
		})
	}
}

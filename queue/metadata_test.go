package queue

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestMetadataBounds: metadata within OpenAI's bounds passes; too many keys,
// an empty or long key, a long value or invalid UTF-8 is refused, by the
// job and usage-event decoders too.
func TestMetadataBounds(t *testing.T) {
	many := map[string]string{}
	for i := range MaxMetadataPairs + 1 {
		many[fmt.Sprint("k", i)] = "v"
	}
	for _, tc := range []struct {
		name string
		m    map[string]string
		ok   bool
	}{
		{"none", nil, true},
		{"at the bounds", map[string]string{strings.Repeat("k", MaxMetadataKey): strings.Repeat("v", MaxMetadataValue)}, true},
		{"too many keys", many, false},
		{"empty key", map[string]string{"": "v"}, false},
		{"long key", map[string]string{strings.Repeat("k", MaxMetadataKey+1): "v"}, false},
		{"long value", map[string]string{"k": strings.Repeat("v", MaxMetadataValue+1)}, false},
		{"invalid UTF-8", map[string]string{"k": "\xff"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := ValidateMetadata(tc.m); (err == nil) != tc.ok {
				t.Fatalf("ValidateMetadata = %v", err)
			}
			job := &Job{ID: "j", Tenant: "acme", Model: "m", MaxTokens: 1, Reply: "r", Deadline: time.Now(), Metadata: tc.m}
			b, err := EncodeJob(job)
			if err != nil {
				t.Fatal(err)
			}
			// JSON carries no invalid UTF-8 (encoding replaces it), so that
			// row is checked by ValidateMetadata alone.
			if _, err := DecodeJob(b); tc.name != "invalid UTF-8" && ((err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrBadMessage))) {
				t.Fatalf("DecodeJob = %v", err)
			}
			ev := &UsageEvent{RequestID: "j", Tenant: "acme", Model: "m", Time: time.Now(), Metadata: tc.m}
			if err := ev.Validate(); (err == nil) != tc.ok {
				t.Fatalf("usage event Validate = %v", err)
			}
		})
	}
	long := strings.Repeat("u", MaxUserLen+1)
	if ValidateUser(strings.Repeat("u", MaxUserLen)) != nil || ValidateUser(long) == nil || ValidateUser("\xff") == nil {
		t.Error("ValidateUser does not hold its bounds")
	}
	if err := (&UsageEvent{RequestID: "j", Tenant: "acme", Model: "m", Time: time.Now(), User: long}).Validate(); !errors.Is(err, ErrBadMessage) {
		t.Errorf("a usage event with a long user: %v", err)
	}
}

package jinja_test

import (
	"testing"

	"github.com/bulkhead-ai/bulkhead/models/chat/internal/jinja"
)

// TestFromJSONKeepsIntegers: from_json keeps JSON integers as integers and
// refuses data after the value (Bulkhead patch).
func TestFromJSONKeepsIntegers(t *testing.T) {
	for src, want := range map[string]string{
		`{{ ('{"a":42,"b":1.5,"c":9007199254740993}'|from_json)|tojson }}`: `{"a": 42, "b": 1.5, "c": 9007199254740993}`,
		`{{ ('[1, 2.0]'|from_json)[0] }}`:                                  `1`,
	} {
		tmpl, err := jinja.Compile(src)
		if err != nil {
			t.Fatal(err)
		}
		got, err := tmpl.Render(nil)
		if err != nil || got != want {
			t.Errorf("%s = %q, %v; want %q", src, got, err, want)
		}
	}
	tmpl, err := jinja.Compile(`{{ ('{"a":1} x'|from_json) }}`)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tmpl.Render(nil); err == nil {
		t.Error("from_json accepted data after the value")
	}
}

package chat

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/bulkhead-ai/bulkhead/models/refdatatest"
)

// bombs are templates that build values without bound: each must end in a
// clear render error from the memory budget, before its value is allocated.
var bombs = map[string]string{
	"string doubling": `{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s | length }}`,
	"join of repeats": `{{ range(65536) | join('a' * 1048576) }}`,
	"list doubling":   `{% set ns = namespace(l=[1]) %}{% for i in range(64) %}{% set ns.l = ns.l + ns.l %}{% endfor %}{{ ns.l | length }}`,
	"chained replace": `{{ 'a'` + strings.Repeat(` | replace('a', 'aaaaaaaaaa')`, 12) + ` }}`,
	"string plus":     `{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s + ns.s %}{% endfor %}{{ ns.s }}`,
	"append loop":     `{% set l = [] %}{% for i in range(65536) %}{% for j in range(65536) %}{{ l.append('x' * 1048576) }}{% endfor %}{% endfor %}`,
	"format":          `{% set ns = namespace(s='{0}{0}') %}{% for i in range(64) %}{% set ns.s = ns.s.format(ns.s) %}{% endfor %}{{ ns.s }}`,
	"indent":          `{% set ns = namespace(s='a\n' * 1000) %}{% for i in range(64) %}{% set ns.s = ns.s | indent(1000, true) %}{% endfor %}{{ ns.s }}`,
	"tojson indent":   `{% set ns = namespace(l=[1]) %}{% for i in range(200) %}{% set ns.l = [ns.l, ns.l] %}{% endfor %}{{ ns.l | tojson(indent=64) }}`,
	"self print":      `{% set l = [] %}{{ l.append(l) }}{{ l }}`,
	"repeat cap":      `{{ ('ab' * 1000000) | length }}`,
	"range overflow":  `{{ range(-9223372036854775807, 9223372036854775807) | length }}`,
	"split":           `{% set ns = namespace(l=[]) %}{% for i in range(65536) %}{% set ns.l = ns.l + ('x' * 1048576).split('') %}{% endfor %}`,
	"output":          `{% for i in range(65536) %}{% for j in range(65536) %}xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx{% endfor %}{% endfor %}`,
}

// TestRenderBudget: every bomb is refused with ErrRender naming the render
// budget, and the process lives on; a list that holds itself compares equal
// to itself, as in Python, without recursing forever.
func TestRenderBudget(t *testing.T) {
	in := Input{Messages: []Message{{Role: RoleUser, Content: "hi"}}}
	for name, src := range bombs {
		t.Run(name, func(t *testing.T) {
			tmpl, err := Compile(src, Config{})
			if err != nil {
				t.Fatal(err)
			}
			p, err := tmpl.Render(context.Background(), in)
			if !errors.Is(err, ErrRender) || !strings.Contains(err.Error(), "budget") {
				t.Fatalf("render gave %d bytes, error %v; want a render budget error", len(p.Text()), err)
			}
		})
	}
	tmpl, err := Compile(`{% set l = [] %}{{ l.append(l) }}{{ l == l }} {{ l | length }}`, Config{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := tmpl.Render(context.Background(), in)
	if err != nil || p.Text() != "NoneTrue 1" && p.Text() != "True 1" {
		t.Fatalf("self-holding list: %q, %v", p.Text(), err)
	}
}

// TestToolBounds: a request's tools nested deeper than MaxToolDepth, or
// holding more than MaxToolNodes values together, are refused with
// ErrInvalidTool before the template runs; tools at the bounds render.
func TestToolBounds(t *testing.T) {
	tmpl := mustCompile(t, "meta-llama-Llama-3.1-8B-Instruct.jinja", Config{})
	msgs := []Message{{Role: RoleUser, Content: "hi"}}
	tool := func(params string) json.RawMessage {
		return json.RawMessage(`{"type":"function","function":{"name":"f","parameters":` + params + `}}`)
	}
	nested := func(depth int) string { return strings.Repeat("[", depth) + "0" + strings.Repeat("]", depth) }
	wide := func(n int) string { return "[" + strings.TrimSuffix(strings.Repeat("0,", n), ",") + "]" }
	for _, tc := range []struct {
		name  string
		tools []json.RawMessage
		ok    bool
	}{
		{"deepest", []json.RawMessage{tool(nested(MaxToolDepth - 2))}, true},
		{"too deep", []json.RawMessage{tool(nested(MaxToolDepth - 1))}, false},
		{"120 deep", []json.RawMessage{tool(nested(120))}, false},
		{"widest", []json.RawMessage{tool(wide(MaxToolNodes - 5))}, true},
		{"too wide together", []json.RawMessage{tool(wide(MaxToolNodes / 2)), tool(wide(MaxToolNodes / 2))}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tmpl.Render(context.Background(), Input{Messages: msgs, Tools: tc.tools})
			switch {
			case tc.ok && err != nil:
				t.Fatalf("refused: %v", err)
			case !tc.ok && !errors.Is(err, ErrInvalidTool):
				t.Fatalf("error %v, want ErrInvalidTool", err)
			}
		})
	}
}

// TestProbe: every shared template renders the largest conversation a
// 1 MiB request carries within the default limits; a template that copies
// the conversation once per message does not, and Probe says so.
func TestProbe(t *testing.T) {
	ents, err := os.ReadDir(refdatatest.Path(t, "chat/templates"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		t.Run(e.Name(), func(t *testing.T) {
			if err := mustCompile(t, e.Name(), Config{}).Probe(context.Background(), 1<<20); err != nil {
				t.Fatal(err)
			}
		})
	}
	quadratic, err := Compile(`{% set ns = namespace(all='') %}{% for m in messages %}{% set ns.all = ns.all ~ m.content %}{{ ns.all }}{% endfor %}`, Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := quadratic.Probe(context.Background(), 1<<20); !errors.Is(err, ErrRender) {
		t.Fatalf("quadratic template: probe %v, want ErrRender", err)
	}
}

// BenchmarkBombs reports what each bomb allocates before the budget stops
// it (B/op): about the default Memory limit, not the bomb's size.
func BenchmarkBombs(b *testing.B) {
	in := Input{Messages: []Message{{Role: RoleUser, Content: "hi"}}}
	for name, src := range bombs {
		tmpl, err := Compile(src, Config{})
		if err != nil {
			b.Fatal(err)
		}
		b.Run(strings.ReplaceAll(name, " ", "_"), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := tmpl.Render(context.Background(), in); err == nil {
					b.Fatal(fmt.Errorf("bomb rendered"))
				}
			}
		})
	}
}

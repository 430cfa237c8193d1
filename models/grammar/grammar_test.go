package grammar

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// schemaCase is one entry of testdata/schemas.json; a null schema stands for
// json_object mode.
type schemaCase struct {
	Name   string          `json:"name"`
	Schema json.RawMessage `json:"schema"`
}

// LoadSchemaCases reads the shared schema table.
func loadSchemaCases(t testing.TB) []schemaCase {
	t.Helper()
	b, err := os.ReadFile("testdata/schemas.json")
	if err != nil {
		t.Fatal(err)
	}
	var cs []schemaCase
	if err := json.Unmarshal(b, &cs); err != nil {
		t.Fatal(err)
	}
	return cs
}

// grammarFor compiles a case's grammar.
func grammarFor(t testing.TB, c schemaCase) *Grammar {
	t.Helper()
	if string(c.Schema) == "null" {
		return JSONObject()
	}
	g, err := CompileSchema(c.Schema)
	if err != nil {
		t.Fatalf("CompileSchema: %v", err)
	}
	return g
}

// validator compiles a case's schema with a real JSON Schema library.
func validator(t testing.TB, c schemaCase) *jsonschema.Schema {
	t.Helper()
	raw := c.Schema
	if string(raw) == "null" {
		raw = []byte(`{"type":"object"}`)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	comp := jsonschema.NewCompiler()
	if err := comp.AddResource("schema.json", doc); err != nil {
		t.Fatal(err)
	}
	s, err := comp.Compile("schema.json")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// testVocab is a small byte-level vocabulary with JSON-ish merges, split
// UTF-8 and an end token (id 0).
func testVocab() ([]string, *Vocab) {
	pieces := []string{""}
	for b := 1; b < 256; b++ {
		pieces = append(pieces, string([]byte{byte(b)}))
	}
	pieces = append(pieces, `{"`, `":`, `",`, `"}`, `":"`, `","`, `"]`, `["`, `},{"`, `true`, `null`, `false`,
		`12`, `-3`, `0.`, `ab`, ` the`, `é`, `日本`, `\n`, `\"`, `\u00e9`, `"name`, `age`, `":[`, `]}`, `}}`, `{}`, `[]`,
		"cat", "dog", "red", "foo", "bar", "abc", "-0", "99", "celsius", "1e5", "..")
	return pieces, NewVocab(pieces, []int32{0})
}

// generate samples a constrained output from random logits; it returns the
// text and whether the grammar's value completed within maxTokens.
func generate(t testing.TB, g *Grammar, pieces []string, v *Vocab, seed uint64, maxTokens int) (string, bool) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 99))
	m := g.NewMatcher()
	allow := make([]uint64, (v.Size()+63)/64)
	logits := make([]float32, v.Size())
	var out strings.Builder
	for range maxTokens {
		for i := range logits {
			logits[i] = float32(rng.NormFloat64() * 2)
		}
		if !m.Mask(v, allow) {
			t.Fatalf("no token allowed after %q", out.String())
		}
		tok := drawAllowed(rng, logits, allow)
		if tok == 0 {
			if !m.Complete() {
				t.Fatalf("end token allowed in incomplete output %q", out.String())
			}
			return out.String(), true
		}
		if err := m.Accept([]byte(pieces[tok])); err != nil {
			t.Fatalf("sampled token %q outside the mask after %q", pieces[tok], out.String())
		}
		out.WriteString(pieces[tok])
		if m.Done() {
			return out.String(), true
		}
	}
	return out.String(), false
}

// TestSchemaOutputs samples 20 outputs per schema at temperature 1 from
// random logits and validates every completed one with a JSON Schema library.
func TestSchemaOutputs(t *testing.T) {
	pieces, v := testVocab()
	cases := loadSchemaCases(t)
	if len(cases) < 30 {
		t.Fatalf("%d schemas, want at least 30", len(cases))
	}
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			g, val := grammarFor(t, c), validator(t, c)
			closed := 0
			for i := range 20 {
				text, ok := generate(t, g, pieces, v, uint64(i+1), 400)
				if !ok {
					continue
				}
				closed++
				inst, err := jsonschema.UnmarshalJSON(strings.NewReader(text))
				if err != nil {
					t.Fatalf("output %d does not parse: %v\n%s", i, err, text)
				}
				if err := val.Validate(inst); err != nil {
					t.Fatalf("output %d does not validate: %v\n%s", i, err, text)
				}
			}
			if closed == 0 {
				t.Errorf("no output closed within 400 tokens")
			}
		})
	}
}

func TestCompileSchemaRefusals(t *testing.T) {
	tests := []struct {
		name, schema, keyword string
	}{
		{"format", `{"type":"string","format":"date-time"}`, "format"},
		{"allOf", `{"allOf":[{"type":"string"}]}`, "allOf"},
		{"not", `{"not":{"type":"string"}}`, "not"},
		{"patternProperties", `{"type":"object","patternProperties":{"^a":{}}}`, "patternProperties"},
		{"uniqueItems", `{"type":"array","uniqueItems":true}`, "uniqueItems"},
		{"multipleOf", `{"type":"integer","multipleOf":3}`, "multipleOf"},
		{"unknown keyword", `{"type":"string","nullable":true}`, "nullable"},
		{"nested unknown", `{"type":"object","properties":{"a":{"type":"string","contentEncoding":"base64"}}}`, "contentEncoding"},
		{"min above max", `{"type":"integer","minimum":5,"maximum":2}`, "minimum"},
		{"no integer in range", `{"type":"integer","minimum":0.2,"maximum":0.8}`, "minimum"},
		{"minLength above maxLength", `{"type":"string","minLength":5,"maxLength":2}`, "minLength"},
		{"minItems above maxItems", `{"type":"array","minItems":3,"maxItems":1}`, "minItems"},
		{"required not in properties", `{"type":"object","properties":{"a":{}},"required":["b"]}`, "required"},
		{"lookahead", `{"type":"string","pattern":"(?=a)b"}`, "pattern"},
		{"backreference", `{"type":"string","pattern":"(a)\\1"}`, "pattern"},
		{"enum type mismatch", `{"type":"integer","enum":["a","b"]}`, "enum"},
		{"false schema", `false`, "schema"},
		{"required false property", `{"type":"object","properties":{"a":false},"required":["a"]}`, "schema"},
		{"overlapping oneOf", `{"oneOf":[{"type":"string"},{"type":"string","maxLength":3}]}`, "oneOf"},
		{"tuple items", `{"type":"array","items":[{"type":"string"}]}`, "items"},
		{"remote ref", `{"$ref":"https://example.com/s.json"}`, "$ref"},
		{"dangling ref", `{"$ref":"#/$defs/missing"}`, "$ref"},
		{"not json", `{"type":`, "schema"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := CompileSchema([]byte(tc.schema))
			var se *SchemaError
			if !errors.As(err, &se) || !errors.Is(err, ErrSchema) {
				t.Fatalf("CompileSchema(%s) = %v, want a *SchemaError", tc.schema, err)
			}
			if se.Keyword != tc.keyword {
				t.Errorf("keyword %q, want %q (%v)", se.Keyword, tc.keyword, err)
			}
		})
	}
}

// TestMatcherPrefixes checks whole strings against grammars: accepted
// prefixes, completion and rejections.
func TestMatcherPrefixes(t *testing.T) {
	tests := []struct {
		schema   string
		text     string
		ok       bool // every byte accepted
		complete bool
	}{
		{`{"type":"integer","minimum":-5,"maximum":17}`, "17", true, true},
		{`{"type":"integer","minimum":-5,"maximum":17}`, "18", false, false},
		{`{"type":"integer","minimum":-5,"maximum":17}`, "-5", true, true},
		{`{"type":"integer","minimum":-5,"maximum":17}`, "-6", false, false},
		{`{"type":"integer","minimum":-5,"maximum":17}`, "1", true, true},
		{`{"type":"number","minimum":0,"maximum":1}`, "0.25", true, true},
		{`{"type":"number","minimum":0,"maximum":1}`, "1.5", false, false},
		{`{"type":"string","maxLength":2}`, `"ab"`, true, true},
		{`{"type":"string","maxLength":2}`, `"abc"`, false, false},
		{`{"type":"string","minLength":2}`, `"a"`, false, false},
		{`{"type":"string","maxLength":2}`, `"日本"`, true, true},
		{`{"type":"string"}`, "\"\xff\"", false, false},
		{`{"type":"string"}`, `"\ud800"`, false, false},
		{`{"type":"string","pattern":"^a+b$"}`, `"aab"`, true, true},
		{`{"type":"string","pattern":"^a+b$"}`, `"aba"`, false, false},
		{`{"enum":["red","reed"]}`, `"re`, true, false},
		{`{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]}`, `{}`, false, false},
		{`{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer"}}}`, `{"b":1}`, true, true},
		{`{"type":"array","minItems":1,"items":{"type":"null"}}`, `[]`, false, false},
		{`{"type":"array","maxItems":1,"items":{"type":"null"}}`, `[null,`, false, false},
		{`{"type":"number"}`, `1e5`, true, true},
		{`{"type":"number"}`, `01`, false, false},
		{`{}`, `{"a":[1,{"b":null}]}`, true, true},
	}
	for _, tc := range tests {
		t.Run(tc.schema+" "+tc.text, func(t *testing.T) {
			g, err := CompileSchema([]byte(tc.schema))
			if err != nil {
				t.Fatal(err)
			}
			m := g.NewMatcher()
			ok := true
			for i := range len(tc.text) {
				if m.Accept([]byte{tc.text[i]}) != nil {
					ok = false
					break
				}
			}
			if ok != tc.ok || (ok && m.Complete() != tc.complete) {
				t.Errorf("accepted %v complete %v, want %v %v", ok, ok && m.Complete(), tc.ok, tc.complete)
			}
		})
	}
}

var _ = fmt.Sprint

// drawAllowed samples a token from softmax(logits) over the allowed ones
// (bit id%64 of allow[id/64]) by the Gumbel-max rule: the grammar tests need
// a fair draw among the allowed tokens, not the sampler's parameters.
func drawAllowed(rng *rand.Rand, logits []float32, allow []uint64) int32 {
	best, top := int32(-1), math.Inf(-1)
	for id, l := range logits {
		if allow[id/64]&(1<<(id%64)) == 0 {
			continue
		}
		if g := float64(l) - math.Log(-math.Log(1-rng.Float64())); g > top {
			best, top = int32(id), g
		}
	}
	return best
}

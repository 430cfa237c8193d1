package grammar

import (
	"encoding/json"
	"errors"
	"testing"
)

// FuzzCompileSchema: any schema either compiles or is refused with a
// *SchemaError, and a compiled grammar's matcher survives any bytes: each
// accepted prefix keeps a non-empty mask, and a complete output is valid
// JSON.
func FuzzCompileSchema(f *testing.F) {
	for _, s := range []string{
		`{}`, `true`, `false`, `{"type":"string","pattern":"^[a-z]{2,4}$"}`,
		`{"type":"object","properties":{"a":{"type":"integer","minimum":-3,"maximum":9}},"required":["a"]}`,
		`{"anyOf":[{"type":"null"},{"enum":["x","y"]}]}`, `{"$defs":{"n":{"type":"array","items":{"$ref":"#/$defs/n"}}},"$ref":"#/$defs/n"}`,
		`{"type":"number","exclusiveMinimum":0,"maximum":1}`, `{"type":"string","format":"uri"}`,
	} {
		f.Add(s, []byte(`{"a":1}`))
	}
	_, v := testVocab()
	f.Fuzz(func(t *testing.T, schema string, text []byte) {
		g, err := CompileSchema([]byte(schema))
		if err != nil {
			var se *SchemaError
			if !errors.As(err, &se) || se.Keyword == "" {
				t.Fatalf("error %v is not a *SchemaError naming a keyword", err)
			}
			return
		}
		m := g.NewMatcher()
		allow := make([]uint64, (v.Size()+63)/64)
		for i := range text {
			if m.Accept(text[i:i+1]) != nil {
				break
			}
			if !m.Done() && !m.Mask(v, allow) {
				t.Fatalf("dead end after %q", text[:i+1])
			}
			if m.Complete() && !json.Valid(text[:i+1]) {
				t.Fatalf("complete output %q is not JSON", text[:i+1])
			}
		}
	})
}

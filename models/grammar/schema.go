package grammar

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
)

// ErrSchema is wrapped by every error from CompileSchema.
var ErrSchema = errors.New("grammar: schema not supported")

// SchemaError names the schema keyword that cannot be honoured: one the
// grammar does not implement, or one whose constraint no value can meet.
type SchemaError struct {
	Keyword string
	Reason  string
}

func (e *SchemaError) Error() string {
	return fmt.Sprintf("schema keyword %q: %s", e.Keyword, e.Reason)
}

func (e *SchemaError) Unwrap() error { return ErrSchema }

// maxRefDepth is how many times one $ref may be expanded inside itself; past
// it the reference matches nothing, so optional recursive parts end there.
const maxRefDepth = 3

// maxSchemaNodes bounds the subschemas one schema compiles to, refs
// expanded, so mutually recursive refs cannot blow up.
const maxSchemaNodes = 4096

// maxSchemaDepth bounds the nesting of a schema (and of its expanded refs).
const maxSchemaDepth = 32

// annotations are keywords that do not constrain values.
var annotations = map[string]bool{
	"title": true, "description": true, "$schema": true, "$id": true, "$comment": true,
	"default": true, "examples": true, "deprecated": true, "readOnly": true, "writeOnly": true,
	"$defs": true, "definitions": true,
}

// supported are the constraining keywords CompileSchema implements.
var supported = map[string]bool{
	"type": true, "properties": true, "required": true, "additionalProperties": true,
	"enum": true, "const": true, "items": true, "minItems": true, "maxItems": true,
	"anyOf": true, "oneOf": true, "pattern": true, "minLength": true, "maxLength": true,
	"minimum": true, "maximum": true, "exclusiveMinimum": true, "exclusiveMaximum": true,
	"$ref": true,
}

// obj is a JSON object that remembers its key order, since properties are
// generated in the order the schema lists them.
type obj struct {
	keys []string
	vals map[string]any
}

// never is the node of a schema no value satisfies.
var never = &node{kind: kAlt}

type compiler struct {
	root  any
	refs  map[string]int // expansions of each $ref on the current path
	nodes int            // subschemas compiled so far
}

// CompileSchema compiles a JSON Schema into the grammar of the compact JSON
// values it allows. Keywords outside the supported set, and constraints no
// value can meet, are refused with a *SchemaError naming the keyword.
func CompileSchema(raw []byte) (*Grammar, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	root, err := decodeOrdered(dec)
	if err != nil {
		return nil, &SchemaError{Keyword: "schema", Reason: "not valid JSON: " + err.Error()}
	}
	if dec.More() {
		return nil, &SchemaError{Keyword: "schema", Reason: "trailing data after the schema"}
	}
	c := &compiler{root: root, refs: map[string]int{}}
	n, err := c.compile(root, 0)
	if err != nil {
		return nil, err
	}
	if n == never {
		return nil, &SchemaError{Keyword: "schema", Reason: "no value satisfies the schema"}
	}
	return &Grammar{root: n}, nil
}

// decodeOrdered decodes one JSON value, objects as *obj.
func decodeOrdered(dec *json.Decoder) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			o := &obj{vals: map[string]any{}}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				k := kt.(string)
				v, err := decodeOrdered(dec)
				if err != nil {
					return nil, err
				}
				if _, dup := o.vals[k]; !dup {
					o.keys = append(o.keys, k)
				}
				o.vals[k] = v
			}
			_, err := dec.Token()
			return o, err
		case '[':
			var a []any
			for dec.More() {
				v, err := decodeOrdered(dec)
				if err != nil {
					return nil, err
				}
				a = append(a, v)
			}
			_, err := dec.Token()
			if a == nil {
				a = []any{}
			}
			return a, err
		}
	}
	return tok, nil
}

// literal encodes a decoded value as compact JSON.
func literal(v any) []byte {
	var b bytes.Buffer
	writeLiteral(&b, v)
	return b.Bytes()
}

func writeLiteral(b *bytes.Buffer, v any) {
	switch t := v.(type) {
	case *obj:
		b.WriteByte('{')
		for i, k := range t.keys {
			if i > 0 {
				b.WriteByte(',')
			}
			writeString(b, k)
			b.WriteByte(':')
			writeLiteral(b, t.vals[k])
		}
		b.WriteByte('}')
	case []any:
		b.WriteByte('[')
		for i, e := range t {
			if i > 0 {
				b.WriteByte(',')
			}
			writeLiteral(b, e)
		}
		b.WriteByte(']')
	case string:
		writeString(b, t)
	case json.Number:
		b.WriteString(t.String())
	case bool:
		fmt.Fprint(b, t)
	case nil:
		b.WriteString("null")
	}
}

func writeString(b *bytes.Buffer, s string) {
	e := json.NewEncoder(b)
	e.SetEscapeHTML(false)
	_ = e.Encode(s)         // a string always encodes
	b.Truncate(b.Len() - 1) // Encode's newline
}

func (c *compiler) compile(s any, depth int) (*node, error) {
	if c.nodes++; c.nodes > maxSchemaNodes {
		return nil, &SchemaError{Keyword: "$ref", Reason: fmt.Sprintf("the schema expands to more than %d subschemas", maxSchemaNodes)}
	}
	if depth > maxSchemaDepth {
		return nil, &SchemaError{Keyword: "schema", Reason: fmt.Sprintf("nested deeper than %d", maxSchemaDepth)}
	}
	switch t := s.(type) {
	case bool:
		if t {
			return anyNode, nil
		}
		return never, nil
	case *obj:
		return c.object(t, depth)
	}
	return nil, &SchemaError{Keyword: "schema", Reason: "a schema must be an object or a boolean"}
}

func (c *compiler) object(o *obj, depth int) (*node, error) {
	for _, k := range o.keys {
		if !supported[k] && !annotations[k] {
			return nil, &SchemaError{Keyword: k, Reason: "not supported"}
		}
	}
	has := func(k string) bool { _, ok := o.vals[k]; return ok }
	constraining := func(except ...string) []string {
		var ks []string
		for _, k := range o.keys {
			if supported[k] && !slices.Contains(except, k) {
				ks = append(ks, k)
			}
		}
		return ks
	}
	switch {
	case has("$ref"):
		if ks := constraining("$ref"); len(ks) > 0 {
			return nil, &SchemaError{Keyword: ks[0], Reason: "not supported next to $ref"}
		}
		return c.ref(o.vals["$ref"], depth)
	case has("anyOf") || has("oneOf"):
		kw := "anyOf"
		if has("oneOf") {
			kw = "oneOf"
		}
		if ks := constraining(kw); len(ks) > 0 {
			return nil, &SchemaError{Keyword: ks[0], Reason: "not supported next to " + kw}
		}
		return c.alternatives(kw, o.vals[kw], depth)
	case has("const"):
		n := &node{kind: kLiteral, lit: literal(o.vals["const"])}
		return c.typedLiterals(o, "const", []*node{n})
	case has("enum"):
		vals, ok := o.vals["enum"].([]any)
		if !ok || len(vals) == 0 {
			return nil, &SchemaError{Keyword: "enum", Reason: "must be a non-empty array"}
		}
		var lits []*node
		seen := map[string]bool{}
		for _, v := range vals {
			l := literal(v)
			if !seen[string(l)] {
				seen[string(l)] = true
				lits = append(lits, &node{kind: kLiteral, lit: l})
			}
		}
		return c.typedLiterals(o, "enum", lits)
	}
	types, err := schemaTypes(o)
	if err != nil {
		return nil, err
	}
	var alts []*node
	for _, ty := range types {
		n, err := c.typed(o, ty, depth)
		if err != nil {
			return nil, err
		}
		if n != never {
			alts = append(alts, n)
		}
	}
	switch len(alts) {
	case 0:
		return never, nil
	case 1:
		return alts[0], nil
	}
	return &node{kind: kAlt, alts: alts}, nil
}

// typedLiterals keeps the const or enum members that match the schema's type,
// if it has one; other keywords next to const/enum are not supported.
func (c *compiler) typedLiterals(o *obj, kw string, lits []*node) (*node, error) {
	if ks := slices.DeleteFunc(slices.Clone(o.keys), func(k string) bool {
		return annotations[k] || k == kw || k == "type"
	}); len(ks) > 0 {
		return nil, &SchemaError{Keyword: ks[0], Reason: "not supported next to " + kw}
	}
	if _, ok := o.vals["type"]; ok {
		types, err := schemaTypes(o)
		if err != nil {
			return nil, err
		}
		lits = slices.DeleteFunc(lits, func(n *node) bool {
			return !slices.Contains(types, literalType(n.lit)) && !(literalType(n.lit) == "integer" && slices.Contains(types, "number"))
		})
	}
	switch len(lits) {
	case 0:
		return nil, &SchemaError{Keyword: kw, Reason: "no member matches the schema's type"}
	case 1:
		return lits[0], nil
	}
	return &node{kind: kAlt, alts: lits}, nil
}

// literalType is the JSON Schema type of a compact JSON literal.
func literalType(l []byte) string {
	switch l[0] {
	case '{':
		return "object"
	case '[':
		return "array"
	case '"':
		return "string"
	case 't', 'f':
		return "boolean"
	case 'n':
		return "null"
	}
	if bytes.ContainsAny(l, ".eE") {
		var f float64
		if json.Unmarshal(l, &f) == nil && f == math.Trunc(f) {
			return "integer"
		}
		return "number"
	}
	return "integer"
}

// schemaTypes reads "type", or infers it from the keywords present.
func schemaTypes(o *obj) ([]string, error) {
	known := []string{"object", "array", "string", "number", "integer", "boolean", "null"}
	switch t := o.vals["type"].(type) {
	case string:
		if !slices.Contains(known, t) {
			return nil, &SchemaError{Keyword: "type", Reason: fmt.Sprintf("unknown type %q", t)}
		}
		return []string{t}, nil
	case []any:
		var ts []string
		for _, e := range t {
			s, ok := e.(string)
			if !ok || !slices.Contains(known, s) {
				return nil, &SchemaError{Keyword: "type", Reason: fmt.Sprintf("unknown type %v", e)}
			}
			if !slices.Contains(ts, s) {
				ts = append(ts, s)
			}
		}
		if len(ts) == 0 {
			return nil, &SchemaError{Keyword: "type", Reason: "empty type list"}
		}
		return ts, nil
	case nil:
		if _, ok := o.vals["type"]; ok {
			return nil, &SchemaError{Keyword: "type", Reason: "must be a string or an array"}
		}
	default:
		return nil, &SchemaError{Keyword: "type", Reason: "must be a string or an array"}
	}
	var ts []string
	for _, k := range o.keys {
		var ty string
		switch k {
		case "properties", "required", "additionalProperties":
			ty = "object"
		case "items", "minItems", "maxItems":
			ty = "array"
		case "pattern", "minLength", "maxLength":
			ty = "string"
		case "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum":
			ty = "number"
		}
		if ty != "" && !slices.Contains(ts, ty) {
			ts = append(ts, ty)
		}
	}
	if len(ts) > 1 {
		return nil, &SchemaError{Keyword: "type", Reason: "keywords of several types without a type; state the type"}
	}
	if len(ts) == 0 {
		return []string{"object", "array", "string", "number", "boolean", "null"}, nil
	}
	return ts, nil
}

func (c *compiler) typed(o *obj, ty string, depth int) (*node, error) {
	switch ty {
	case "boolean":
		return boolNode, nil
	case "null":
		return nullNode, nil
	case "object":
		return c.objectType(o, depth)
	case "array":
		return c.arrayType(o, depth)
	case "string":
		return stringType(o)
	}
	return numberType(o, ty == "integer")
}

func (c *compiler) objectType(o *obj, depth int) (*node, error) {
	var props *obj
	if v, ok := o.vals["properties"]; ok {
		if props, ok = v.(*obj); !ok {
			return nil, &SchemaError{Keyword: "properties", Reason: "must be an object"}
		}
	}
	required := map[string]bool{}
	if v, ok := o.vals["required"]; ok {
		list, ok := v.([]any)
		if !ok {
			return nil, &SchemaError{Keyword: "required", Reason: "must be an array of names"}
		}
		for _, e := range list {
			name, ok := e.(string)
			if !ok {
				return nil, &SchemaError{Keyword: "required", Reason: "must be an array of names"}
			}
			if props == nil || props.vals[name] == nil {
				return nil, &SchemaError{Keyword: "required", Reason: fmt.Sprintf("property %q is not in properties", name)}
			}
			required[name] = true
		}
	}
	if props == nil || len(props.keys) == 0 {
		ap, ok := o.vals["additionalProperties"]
		if !ok || ap == true {
			return &node{kind: kMap, items: anyNode}, nil
		}
		vn, err := c.compile(ap, depth+1)
		if err != nil {
			return nil, err
		}
		if vn == never {
			return emptyObject, nil
		}
		return &node{kind: kMap, items: vn}, nil
	}
	if ap, ok := o.vals["additionalProperties"]; ok {
		if _, err := c.compile(ap, depth+1); err != nil { // checked, never generated
			return nil, err
		}
	}
	n := &node{kind: kObject}
	for _, k := range props.keys {
		vn, err := c.compile(props.vals[k], depth+1)
		if err != nil {
			return nil, err
		}
		if vn == never {
			if required[k] {
				return never, nil
			}
			continue
		}
		var key bytes.Buffer
		writeString(&key, k)
		key.WriteByte(':')
		n.props = append(n.props, prop{key: key.Bytes(), value: vn, required: required[k]})
	}
	return n, nil
}

// count reads a non-negative integer keyword; def when absent.
func count(o *obj, kw string, def int) (int, error) {
	v, ok := o.vals[kw]
	if !ok {
		return def, nil
	}
	num, ok := v.(json.Number)
	i, err := num.Int64()
	if !ok || err != nil || i < 0 {
		return 0, &SchemaError{Keyword: kw, Reason: "must be a non-negative integer"}
	}
	if i > 1<<20 {
		i = 1 << 20
	}
	return int(i), nil
}

func (c *compiler) arrayType(o *obj, depth int) (*node, error) {
	n := &node{kind: kArray, items: anyNode}
	if v, ok := o.vals["items"]; ok {
		if _, tuple := v.([]any); tuple {
			return nil, &SchemaError{Keyword: "items", Reason: "the array (tuple) form is not supported"}
		}
		it, err := c.compile(v, depth+1)
		if err != nil {
			return nil, err
		}
		n.items = it
	}
	var err error
	if n.min, err = count(o, "minItems", 0); err != nil {
		return nil, err
	}
	if n.max, err = count(o, "maxItems", -1); err != nil {
		return nil, err
	}
	if n.max >= 0 && n.min > n.max {
		return nil, &SchemaError{Keyword: "minItems", Reason: "greater than maxItems"}
	}
	if n.items == never {
		if n.min > 0 {
			return never, nil
		}
		n.max = 0
	}
	return n, nil
}

func stringType(o *obj) (*node, error) {
	n := &node{kind: kString}
	var err error
	if n.min, err = count(o, "minLength", 0); err != nil {
		return nil, err
	}
	if n.max, err = count(o, "maxLength", -1); err != nil {
		return nil, err
	}
	if n.max >= 0 && n.min > n.max {
		return nil, &SchemaError{Keyword: "minLength", Reason: "greater than maxLength"}
	}
	if v, ok := o.vals["pattern"]; ok {
		src, ok := v.(string)
		if !ok {
			return nil, &SchemaError{Keyword: "pattern", Reason: "must be a string"}
		}
		re, err := compileRegex(src)
		if err != nil {
			return nil, &SchemaError{Keyword: "pattern", Reason: err.Error()}
		}
		if n.max >= 0 && re.minDist(re.start) > n.max {
			return nil, &SchemaError{Keyword: "pattern", Reason: "every match is longer than maxLength"}
		}
		n.pattern = re
	}
	return n, nil
}

func numberType(o *obj, integer bool) (*node, error) {
	n := &node{kind: kNumber, integer: integer, fracOpen: !integer,
		lo: -maxIntValue, hi: maxIntValue, fracLo: math.Inf(-1), fracHi: math.Inf(1)}
	bound := func(kw string) (float64, bool, error) {
		v, ok := o.vals[kw]
		if !ok {
			return 0, false, nil
		}
		num, isNum := v.(json.Number)
		if !isNum {
			return 0, false, &SchemaError{Keyword: kw, Reason: "must be a number (the boolean form of draft 4 is not supported)"}
		}
		f, err := num.Float64()
		if err != nil || math.IsInf(f, 0) {
			return 0, false, &SchemaError{Keyword: kw, Reason: "must be a finite number"}
		}
		if math.Abs(f) > maxIntValue {
			return 0, false, &SchemaError{Keyword: kw, Reason: fmt.Sprintf("beyond ±%d is not supported", int64(maxIntValue))}
		}
		n.bounded = true
		return f, true, nil
	}
	lowKw, highKw := "minimum", "maximum"
	if f, ok, err := bound("minimum"); err != nil {
		return nil, err
	} else if ok {
		n.lo, n.fracLo = int64(math.Ceil(f)), f
	}
	if f, ok, err := bound("exclusiveMinimum"); err != nil {
		return nil, err
	} else if ok && f >= n.fracLo {
		n.lo, n.fracLo, lowKw = int64(math.Floor(f))+1, f, "exclusiveMinimum"
	}
	if f, ok, err := bound("maximum"); err != nil {
		return nil, err
	} else if ok {
		n.hi, n.fracHi = int64(math.Floor(f)), f
	}
	if f, ok, err := bound("exclusiveMaximum"); err != nil {
		return nil, err
	} else if ok && f <= n.fracHi {
		n.hi, n.fracHi, highKw = int64(math.Ceil(f))-1, f, "exclusiveMaximum"
	}
	if n.fracLo > n.fracHi || (n.fracLo == n.fracHi && (lowKw != "minimum" || highKw != "maximum")) {
		return nil, &SchemaError{Keyword: lowKw, Reason: "above " + highKw + ": no number is in range"}
	}
	if n.lo > n.hi {
		what := "integer"
		if !integer {
			what = "integer-valued number (ranges without one are not supported)"
		}
		return nil, &SchemaError{Keyword: lowKw, Reason: "no " + what + " between " + lowKw + " and " + highKw}
	}
	return n, nil
}

func (c *compiler) alternatives(kw string, v any, depth int) (*node, error) {
	list, ok := v.([]any)
	if !ok || len(list) == 0 {
		return nil, &SchemaError{Keyword: kw, Reason: "must be a non-empty array of schemas"}
	}
	var alts []*node
	for _, s := range list {
		n, err := c.compile(s, depth+1)
		if err != nil {
			return nil, err
		}
		if n != never {
			alts = append(alts, n)
		}
	}
	if kw == "oneOf" && !disjoint(alts) {
		return nil, &SchemaError{Keyword: "oneOf", Reason: "alternatives that may overlap are not supported (exactly one must match); use anyOf"}
	}
	switch len(alts) {
	case 0:
		return never, nil
	case 1:
		return alts[0], nil
	}
	return &node{kind: kAlt, alts: alts}, nil
}

// classes lists what a node's values can start as: a kind of value, or one
// exact literal.
func classes(n *node, out []string) []string {
	switch n.kind {
	case kAlt:
		for _, a := range n.alts {
			out = classes(a, out)
		}
		return out
	case kAny:
		return append(out, "{", "[", "\"", "0", "t", "f", "l")
	case kObject, kMap:
		return append(out, "{")
	case kArray:
		return append(out, "[")
	case kString:
		return append(out, "\"")
	case kNumber:
		return append(out, "0")
	}
	return append(out, "="+string(n.lit))
}

// disjoint reports whether no value can match two of alts, judged
// conservatively by their kinds and literals.
func disjoint(alts []*node) bool {
	var cls [][]string
	for _, a := range alts {
		cls = append(cls, classes(a, nil))
	}
	kindOf := func(c string) string {
		if !strings.HasPrefix(c, "=") {
			return c
		}
		switch t := literalType([]byte(c[1:])); t {
		case "object":
			return "{"
		case "array":
			return "["
		case "string":
			return "\""
		case "integer", "number":
			return "0"
		}
		return c // true, false, null: only themselves
	}
	overlap := func(a, b string) bool {
		if a == b {
			return true
		}
		la, lb := strings.HasPrefix(a, "="), strings.HasPrefix(b, "=")
		switch {
		case la && lb:
			return false // different literals
		case la:
			return kindOf(a) == b
		case lb:
			return kindOf(b) == a
		}
		return false
	}
	for i := range cls {
		for j := i + 1; j < len(cls); j++ {
			for _, a := range cls[i] {
				for _, b := range cls[j] {
					if overlap(a, b) {
						return false
					}
				}
			}
		}
	}
	return true
}

func (c *compiler) ref(v any, depth int) (*node, error) {
	ref, ok := v.(string)
	if !ok {
		return nil, &SchemaError{Keyword: "$ref", Reason: "must be a string"}
	}
	target := c.root
	if ref != "#" {
		path, ok := strings.CutPrefix(ref, "#/")
		if !ok {
			return nil, &SchemaError{Keyword: "$ref", Reason: fmt.Sprintf("only local references (#/...) are supported, not %q", ref)}
		}
		for _, part := range strings.Split(path, "/") {
			part = strings.ReplaceAll(strings.ReplaceAll(part, "~1", "/"), "~0", "~")
			o, ok := target.(*obj)
			if !ok || o.vals[part] == nil {
				return nil, &SchemaError{Keyword: "$ref", Reason: fmt.Sprintf("%q does not resolve", ref)}
			}
			target = o.vals[part]
		}
	}
	if c.refs[ref] >= maxRefDepth {
		return never, nil
	}
	c.refs[ref]++
	defer func() { c.refs[ref]-- }()
	return c.compile(target, depth+1)
}

package grammar

import "math"

// A Grammar is a compiled target language for constrained decoding: any JSON
// object (JSONObject), or the JSON values a schema allows (CompileSchema).
// The language is compact JSON: no whitespace between tokens, so the output
// cannot wander off into unbounded blank space. A Grammar is immutable and safe
// to share; each sequence walks it with its own Matcher.
type Grammar struct {
	root *node
}

// kind is what a grammar node matches.
type kind uint8

const (
	kAny     kind = iota // any JSON value, nested at most maxAnyDepth deep
	kObject              // an object with the node's properties, in order
	kMap                 // an object with free keys whose values are node.items
	kArray               // an array of node.items
	kString              // a string within the length bounds, matching pattern
	kNumber              // a number (or, with integer, an integer) within the bounds
	kLiteral             // exactly the bytes in lit (const, enum members, true/false/null)
	kAlt                 // one of alts (anyOf, oneOf, enum, type lists)
)

// maxAnyDepth bounds the nesting of free JSON values (json_object mode).
const maxAnyDepth = 8

// Number bounds: numbers have at most maxIntDigits integer digits,
// maxFracDigits fraction digits and a two-digit exponent, so every accepted
// number fits a float64 exactly enough and no number is endless.
const (
	maxIntDigits  = 15
	maxFracDigits = 9
	maxExpDigits  = 2
	maxIntValue   = 999_999_999_999_999
)

// node is one schema position.
type node struct {
	kind kind

	props []prop // kObject, in the order they are generated
	items *node  // kArray element, kMap value
	min   int    // kArray minItems, kString minLength (runes)
	max   int    // kArray maxItems, kString maxLength; -1 = none

	pattern *regex // kString, or nil

	integer  bool  // kNumber: no fraction or exponent
	bounded  bool  // kNumber: lo/hi set by the schema (no exponent then)
	lo, hi   int64 // kNumber: inclusive bounds of the integer part's value
	fracLo   float64
	fracHi   float64 // kNumber: the real bounds, for whether a fraction may follow
	fracOpen bool    // kNumber: fractions allowed at all

	lit  []byte  // kLiteral
	alts []*node // kAlt
}

// prop is one property of a kObject node: its key as JSON followed by the
// colon ("\"name\":"), its value and whether it must appear.
type prop struct {
	key      []byte
	value    *node
	required bool
}

var (
	anyNode     = &node{kind: kAny}
	anyString   = &node{kind: kString, max: -1}
	trueNode    = &node{kind: kLiteral, lit: []byte("true")}
	falseNode   = &node{kind: kLiteral, lit: []byte("false")}
	nullNode    = &node{kind: kLiteral, lit: []byte("null")}
	anyNumber   = &node{kind: kNumber, lo: -maxIntValue, hi: maxIntValue, fracOpen: true, fracLo: math.Inf(-1), fracHi: math.Inf(1)}
	anyObject   = &node{kind: kMap, items: anyNode}
	anyArray    = &node{kind: kArray, items: anyNode, max: -1}
	boolNode    = &node{kind: kAlt, alts: []*node{trueNode, falseNode}}
	emptyObject = &node{kind: kObject}
)

// JSONObject is the grammar of json_object mode: one JSON object with any keys
// and any values.
func JSONObject() *Grammar { return &Grammar{root: anyObject} }

// JSONValue is the grammar of any one JSON value.
func JSONValue() *Grammar { return &Grammar{root: anyNode} }

package catalog

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/parser"
)

// Limits on what a catalog may hold. They bound the work of parsing a file and
// keep every number inside what the engine accepts.
const (
	MaxFileBytes  = 1 << 20 // a catalog file larger than this is refused
	MaxModels     = 1024
	MaxNameBytes  = 256
	MaxContext    = 1 << 24 // the engine's own ceiling on context_length
	maxProperties = 256
)

// file is the YAML layout of a catalog file; see models/catalog.yaml.
type file struct {
	Models []entry `yaml:"models"`
}

type entry struct {
	Name          string            `yaml:"name"`
	Path          string            `yaml:"path"`
	Task          string            `yaml:"task"`
	Description   string            `yaml:"description"`
	ContextWindow scalar            `yaml:"context_window"`
	KVPoolTokens  scalar            `yaml:"kv_pool_tokens"`
	KVPoolBytes   scalar            `yaml:"kv_pool_bytes"`
	DraftTokens   scalar            `yaml:"draft_tokens"`
	KVType        string            `yaml:"kv_type"`
	Prices        *pricesEntry      `yaml:"prices"`
	Properties    map[string]string `yaml:"properties"`
}

// pricesEntry uses pointers so an explicit 0 (a free model) differs from an
// absent price, which takes the default.
type pricesEntry struct {
	Prompt     *float64 `yaml:"neurons_per_m_prompt_tokens"`
	Completion *float64 `yaml:"neurons_per_m_completion_tokens"`
	// Cached prices prompt tokens served from the prefix cache; absent, it
	// is CachedPromptShare of the prompt price.
	Cached *float64 `yaml:"neurons_per_m_cached_prompt_tokens"`
}

// Load reads, validates and resolves the catalog file at path. Relative model
// paths are taken relative to the file's directory.
func Load(path string) (*Catalog, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrInvalid, path, err)
	}
	f, err := os.Open(abs)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrInvalid, abs, err)
	}
	c, err := Parse(data, filepath.Dir(abs))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", abs, err)
	}
	if err := c.Resolve(); err != nil {
		return nil, fmt.Errorf("%s: %w", abs, err)
	}
	return c, nil
}

// Parse decodes and validates a catalog from YAML without touching the model
// files: relative paths are joined to dir, and ContextWindow stays 0 where the
// file leaves it out until Resolve reads the trained context. Unknown keys,
// duplicate keys, values of the wrong type, an empty model list, more than one
// YAML document and YAML anchors or aliases are errors.
func Parse(data []byte, dir string) (*Catalog, error) {
	if len(data) > MaxFileBytes {
		return nil, fmt.Errorf("%w: file is over %d bytes", ErrInvalid, MaxFileBytes)
	}
	doc, err := decode(data)
	if err != nil {
		return nil, err
	}
	if len(doc.Models) == 0 {
		return nil, fmt.Errorf("%w: models: the list is empty", ErrInvalid)
	}
	if len(doc.Models) > MaxModels {
		return nil, fmt.Errorf("%w: models: %d entries, limit %d", ErrInvalid, len(doc.Models), MaxModels)
	}
	var errs []error
	models := make([]*Model, len(doc.Models))
	for i, e := range doc.Models {
		m, err := e.model(i, dir)
		errs = append(errs, err)
		models[i] = m
	}
	errs = append(errs, checkUnique(models))
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return newCatalog(models), nil
}

// decode parses the YAML of a catalog file. Anchors and aliases are refused:
// nested aliases expand exponentially (a "billion laughs" file of a few
// hundred bytes), and a catalog has no need of them.
func decode(data []byte) (*file, error) {
	f, err := parser.ParseBytes(data, 0)
	if err != nil {
		return nil, fmt.Errorf("%w: %s", ErrInvalid, yaml.FormatError(err, false, true))
	}
	var body ast.Node
	for _, d := range f.Docs {
		if d == nil || d.Body == nil {
			continue
		}
		if body != nil {
			return nil, fmt.Errorf("%w: the file must hold exactly one YAML document", ErrInvalid)
		}
		body = d.Body
	}
	if body == nil {
		return nil, fmt.Errorf("%w: the file is empty", ErrInvalid)
	}
	var ref refFinder
	ast.Walk(&ref, body)
	if ref.found != nil {
		p := ref.found.GetToken().Position
		return nil, fmt.Errorf("%w: line %d column %d: YAML anchors and aliases are not supported in a catalog", ErrInvalid, p.Line, p.Column)
	}
	doc := new(file)
	if err := yaml.NodeToValue(body, doc, yaml.DisallowUnknownField()); err != nil {
		return nil, fmt.Errorf("%w: %s", ErrInvalid, yaml.FormatError(err, false, true))
	}
	return doc, nil
}

// refFinder records the first anchor or alias node it visits.
type refFinder struct{ found ast.Node }

func (r *refFinder) Visit(n ast.Node) ast.Visitor {
	if r.found != nil {
		return nil
	}
	switch n.(type) {
	case *ast.AnchorNode, *ast.AliasNode:
		r.found = n
		return nil
	}
	return r
}

func (e *entry) model(i int, dir string) (*Model, error) {
	m := &Model{
		Name:        e.Name,
		Path:        e.Path,
		Task:        e.Task,
		Description: e.Description,
		Prices:      DefaultPrices(),
		Properties:  e.Properties,
	}
	var errs []error
	number := func(field string, s scalar, sizes bool, limit int64) int64 {
		n, msg := s.integer(sizes)
		if msg == "" && n > limit {
			msg = fmt.Sprintf("%d is over the limit of %d", n, limit)
		}
		if msg != "" {
			label := m.Name
			if checkName(label) != "" {
				label = ""
			}
			errs = append(errs, &FieldError{Model: label, Index: i, Field: field, Msg: msg, Err: ErrInvalid})
			return 0
		}
		return n
	}
	m.ContextWindow = int(number("context_window", e.ContextWindow, false, MaxContext))
	m.KVPoolTokens = int(number("kv_pool_tokens", e.KVPoolTokens, false, math.MaxInt32))
	m.KVPoolBytes = number("kv_pool_bytes", e.KVPoolBytes, true, math.MaxInt64)
	if e.DraftTokens.v != nil {
		switch n := number("draft_tokens", e.DraftTokens, false, MaxDraftTokens); {
		case n < 0:
			errs = append(errs, &FieldError{Model: m.Name, Index: i, Field: "draft_tokens", Msg: fmt.Sprintf("%d is negative (0 turns drafting off)", n), Err: ErrInvalid})
		case n == 0:
			m.DraftTokens = -1
		default:
			m.DraftTokens = int(n)
		}
	}
	if e.KVType != "" && !slices.Contains(KVTypes, e.KVType) {
		errs = append(errs, &FieldError{Model: m.Name, Index: i, Field: "kv_type", Msg: fmt.Sprintf("%q is not one of %s", e.KVType, strings.Join(KVTypes, ", ")), Err: ErrInvalid})
	}
	m.KVType = e.KVType
	if e.Prices != nil {
		m.pricesSet = true
		if e.Prices.Prompt != nil {
			m.Prices.NeuronsPerMPromptTokens = *e.Prices.Prompt
		}
		if e.Prices.Completion != nil {
			m.Prices.NeuronsPerMCompletionTokens = *e.Prices.Completion
		}
		if p := m.Prices.NeuronsPerMPromptTokens; p >= 0 && !math.IsInf(p, 0) {
			m.Prices.NeuronsPerMCachedPromptTokens = p * CachedPromptShare // a bad prompt price is reported once, as itself
		}
		if e.Prices.Cached != nil {
			m.Prices.NeuronsPerMCachedPromptTokens = *e.Prices.Cached
		}
	}
	m.taskSet = m.Task != ""
	if m.Task == "" {
		m.Task = TaskTextGeneration // until Resolve reads the file
	}
	if m.Path != "" && !filepath.IsAbs(m.Path) {
		m.Path = filepath.Join(dir, m.Path)
	}
	errs = append(errs, m.validate(i))
	return m, errors.Join(errs...)
}

// FromFlags builds and resolves a catalog from --model flags, each
// "NAME=PATH": the name is everything before the first '=', the path the rest,
// relative to the working directory. Every other field takes its default; the
// task (and so the default prices) follows from the file.
func FromFlags(specs []string) (*Catalog, error) {
	if len(specs) == 0 {
		return nil, fmt.Errorf("%w: no models given", ErrInvalid)
	}
	if len(specs) > MaxModels {
		return nil, fmt.Errorf("%w: %d models, limit %d", ErrInvalid, len(specs), MaxModels)
	}
	var errs []error
	models := make([]*Model, len(specs))
	for i, spec := range specs {
		name, path, ok := strings.Cut(spec, "=")
		if !ok {
			errs = append(errs, &FieldError{Index: i, Field: "--model", Msg: fmt.Sprintf("%q is not NAME=PATH", spec), Err: ErrInvalid})
			continue
		}
		m := &Model{Name: name, Path: path, Task: TaskTextGeneration, Prices: DefaultPrices()}
		if path != "" {
			abs, err := filepath.Abs(path)
			if err != nil {
				errs = append(errs, &FieldError{Model: name, Index: i, Field: "path", Msg: err.Error(), Err: ErrInvalid})
				continue
			}
			m.Path = abs
		}
		errs = append(errs, m.validate(i))
		models[i] = m
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if err := checkUnique(models); err != nil {
		return nil, err
	}
	c := newCatalog(models)
	if err := c.Resolve(); err != nil {
		return nil, err
	}
	return c, nil
}

// validate checks what can be checked without the model file. i is the
// entry's position, for errors about an entry without a usable name.
func (m *Model) validate(i int) error {
	var errs []error
	label := m.Name // errors about an entry without a usable name name it by position
	if msg := checkName(m.Name); msg != "" {
		label = ""
		errs = append(errs, &FieldError{Index: i, Field: "name", Msg: msg, Err: ErrInvalid})
	}
	fail := func(field, msg string) {
		errs = append(errs, &FieldError{Model: label, Index: i, Field: field, Msg: msg, Err: ErrInvalid})
	}
	switch {
	case m.Path == "":
		fail("path", "missing: a GGUF file is required")
	case strings.ContainsRune(m.Path, 0):
		fail("path", "contains a NUL byte")
	}
	if !slices.Contains(Tasks(), m.Task) {
		fail("task", fmt.Sprintf("%q is not supported (supported: %s)", m.Task, strings.Join(Tasks(), ", ")))
	}
	switch {
	case m.ContextWindow < 0:
		fail("context_window", fmt.Sprintf("%d is negative", m.ContextWindow))
	case m.ContextWindow > MaxContext:
		fail("context_window", fmt.Sprintf("%d is over the limit of %d tokens", m.ContextWindow, MaxContext))
	}
	if m.KVPoolTokens < 0 {
		fail("kv_pool_tokens", fmt.Sprintf("%d is negative", m.KVPoolTokens))
	}
	if m.KVPoolBytes < 0 {
		fail("kv_pool_bytes", fmt.Sprintf("%d is negative", m.KVPoolBytes))
	}
	if m.KVPoolTokens != 0 && m.KVPoolBytes != 0 {
		fail("kv_pool_bytes", fmt.Sprintf("set together with kv_pool_tokens (%d tokens, %d bytes): give at most one", m.KVPoolTokens, m.KVPoolBytes))
	}
	m.Prices.validate(fail)
	if len(m.Properties) > maxProperties {
		fail("properties", fmt.Sprintf("%d entries, limit %d", len(m.Properties), maxProperties))
	}
	for k := range m.Properties {
		if k == "" {
			fail("properties", "a key is empty")
			break
		}
	}
	return errors.Join(errs...)
}

// checkName accepts any non-empty name of at most MaxNameBytes bytes of
// printable UTF-8 without spaces; it returns what is wrong, or "".
func checkName(name string) string {
	switch {
	case name == "":
		return "missing"
	case len(name) > MaxNameBytes:
		return fmt.Sprintf("%d bytes, limit %d", len(name), MaxNameBytes)
	case !utf8.ValidString(name):
		return fmt.Sprintf("%q is not valid UTF-8", name)
	}
	for _, r := range name {
		if !unicode.IsPrint(r) || unicode.IsSpace(r) {
			return fmt.Sprintf("%q holds %q: names are printable characters without spaces", name, r)
		}
	}
	return ""
}

// checkUnique reports every name used by more than one entry.
func checkUnique(models []*Model) error {
	var errs []error
	first := make(map[string]int, len(models))
	for i, m := range models {
		if m == nil || m.Name == "" {
			continue
		}
		if j, dup := first[m.Name]; dup {
			errs = append(errs, &FieldError{Model: m.Name, Index: i, Field: "name", Msg: fmt.Sprintf("duplicate of models[%d]", j), Err: ErrInvalid})
			continue
		}
		first[m.Name] = i
	}
	return errors.Join(errs...)
}

// scalar keeps a YAML value as decoded, so that converting it is done where
// an error can name the model and the field.
type scalar struct{ v any }

func (s *scalar) UnmarshalYAML(unmarshal func(any) error) error { return unmarshal(&s.v) }

// integer converts a count: a whole number, or with sizes also a string such
// as "512MiB", "4GiB" or "1.5GB" (units B, KB, MB, GB, TB in powers of 1000 and
// KiB, MiB, GiB, TiB in powers of 1024; case-insensitive, space allowed). A
// fraction is an error, never truncated. It returns what is wrong, or "".
func (s scalar) integer(sizes bool) (int64, string) {
	switch x := s.v.(type) {
	case nil:
		return 0, ""
	case uint64:
		if x > math.MaxInt64 {
			return 0, fmt.Sprintf("%d is too large", x)
		}
		return int64(x), ""
	case int64:
		return x, ""
	case string:
		if sizes {
			n, err := parseByteSize(x)
			if err != nil {
				return 0, err.Error()
			}
			return n, ""
		}
	}
	if sizes {
		return 0, fmt.Sprintf("%v is not a whole number of bytes or a size such as \"4GiB\"", s.v)
	}
	return 0, fmt.Sprintf("%v is not a whole number", s.v)
}

var sizeUnits = []struct {
	suffix string
	mult   float64
}{
	// Longest suffixes first so "KiB" is not read as "B".
	{"kib", 1 << 10}, {"mib", 1 << 20}, {"gib", 1 << 30}, {"tib", 1 << 40},
	{"kb", 1e3}, {"mb", 1e6}, {"gb", 1e9}, {"tb", 1e12},
	{"b", 1},
}

// parseByteSize reads a size such as "4GiB", "1.5 GB" or "1024".
func parseByteSize(s string) (int64, error) {
	bad := fmt.Errorf("%q is not a size such as \"4GiB\"", s)
	num, mult := strings.TrimSpace(strings.ToLower(s)), 1.0
	for _, u := range sizeUnits {
		if strings.HasSuffix(num, u.suffix) {
			num, mult = strings.TrimSpace(strings.TrimSuffix(num, u.suffix)), u.mult
			break
		}
	}
	// Plain decimal only: strconv would also take signs, exponents, hex,
	// underscores, "inf" and "nan".
	if num == "" || strings.Trim(num, "0123456789.") != "" || strings.Count(num, ".") > 1 || num == "." {
		return 0, bad
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil {
		return 0, bad
	}
	v := f * mult
	if v >= math.MaxInt64 || v != math.Trunc(v) {
		return 0, fmt.Errorf("%q is not a whole number of bytes in range", s)
	}
	return int64(v), nil
}

package catalog

import (
	"errors"
	"fmt"
	"math"
	"sync"
)

// Sentinel errors. Every error from this package wraps one of them.
var (
	// ErrInvalid marks a catalog entry, flag or file that fails validation.
	ErrInvalid = errors.New("catalog: invalid catalog")
	// ErrUnknownModel is returned for a name the catalog does not hold.
	ErrUnknownModel = errors.New("catalog: unknown model")
	// ErrModelFile marks a model file that is missing, unreadable or not a
	// usable GGUF file.
	ErrModelFile = errors.New("catalog: unusable model file")
	// ErrContextWindow marks a context window larger than the model's trained
	// context.
	ErrContextWindow = errors.New("catalog: context window exceeds the trained context")
)

// FieldError is a validation failure of one field of one model. It wraps
// ErrInvalid, or ErrContextWindow for a window the model was not trained for.
type FieldError struct {
	Model string // the model's name; empty when the entry has none
	Index int    // the entry's position in the file or flag list, from 0
	Field string // the YAML key (or flag part) at fault, e.g. "kv_pool_bytes"
	Msg   string // what is wrong with it
	Err   error  // the sentinel this error wraps
}

func (e *FieldError) Error() string {
	who := fmt.Sprintf("model %q", e.Model)
	if e.Model == "" {
		who = fmt.Sprintf("models[%d]", e.Index)
	}
	return fmt.Sprintf("%v: %s: %s: %s", e.Err, who, e.Field, e.Msg)
}

func (e *FieldError) Unwrap() error { return e.Err }

// Tasks: what a model serves, as Workers AI names them. A model's task
// follows from its file when the entry names none (Resolve): an encoder
// architecture (bert) serves text-embeddings, or text-classification
// (reranking) when its pooling is rank; a causal model with a mean or last
// pooling type (Qwen3-Embedding) serves text-embeddings; every other
// model serves text-generation.
const (
	TaskTextGeneration     = "text-generation"
	TaskTextEmbeddings     = "text-embeddings"
	TaskTextClassification = "text-classification"
)

// Tasks lists the tasks, in a fixed order.
func Tasks() []string {
	return []string{TaskTextGeneration, TaskTextEmbeddings, TaskTextClassification}
}

// Encoder reports whether the task runs an encoder (no generation).
func Encoder(task string) bool {
	return task == TaskTextEmbeddings || task == TaskTextClassification
}

// encoderArchs are the architectures served by the encoder (workers/encoder).
var encoderArchs = map[string]bool{"bert": true}

// <arch>.pooling_type values (llama.cpp's): a causal model with mean or
// last pooling is an embedding model; rank is a reranker's.
const (
	poolingMean = 1
	poolingLast = 3
	poolingRank = 4
)

// Default prices, in neurons per million tokens: those Workers AI charges for
// @cf/meta/llama-3.2-1b-instruct, its smallest text-generation model
// ($0.027 and $0.201 per million prompt and completion tokens at $0.011 per
// thousand neurons). A model without a prices entry is billed at these rates.
const (
	DefaultNeuronsPerMPromptTokens     = 2457
	DefaultNeuronsPerMCompletionTokens = 18252
	// DefaultNeuronsPerMCachedPromptTokens prices prompt tokens served from
	// the tenant's prefix cache: a quarter of the prompt rate (Workers AI
	// bills cached input at about 17-19% of the input price; a cached token
	// costs a lookup and no compute). CachedPromptShare says it for models
	// that set their own prompt price.
	DefaultNeuronsPerMCachedPromptTokens = DefaultNeuronsPerMPromptTokens * CachedPromptShare

	// CachedPromptShare is the default cached-prompt price as a share of the
	// model's prompt price (a model's neurons_per_m_cached_prompt_tokens
	// overrides it).
	CachedPromptShare = 0.25
)

// Prices is what a model's tokens cost, in neurons per million tokens.
type Prices struct {
	NeuronsPerMPromptTokens     float64
	NeuronsPerMCompletionTokens float64
	// NeuronsPerMCachedPromptTokens is the rate of prompt tokens served
	// from the prefix cache (billing/price applies it).
	NeuronsPerMCachedPromptTokens float64
}

// DefaultPrices returns the prices of a model whose entry names none.
func DefaultPrices() Prices {
	return Prices{
		NeuronsPerMPromptTokens:     DefaultNeuronsPerMPromptTokens,
		NeuronsPerMCompletionTokens: DefaultNeuronsPerMCompletionTokens,

		NeuronsPerMCachedPromptTokens: DefaultNeuronsPerMCachedPromptTokens,
	}
}

// Default prices of the encoder tasks, in neurons per million input tokens:
// Workers AI's for @cf/baai/bge-small-en-v1.5 ($0.020 per million tokens)
// and @cf/baai/bge-reranker-base ($0.0031). Encoders generate nothing and
// cache nothing, so only the prompt rate applies.
const (
	DefaultNeuronsPerMEmbeddingTokens = 1841
	DefaultNeuronsPerMRerankTokens    = 283
)

// DefaultPricesFor returns the default prices of a task's models.
func DefaultPricesFor(task string) Prices {
	switch task {
	case TaskTextEmbeddings:
		return Prices{NeuronsPerMPromptTokens: DefaultNeuronsPerMEmbeddingTokens, NeuronsPerMCachedPromptTokens: DefaultNeuronsPerMEmbeddingTokens}
	case TaskTextClassification:
		return Prices{NeuronsPerMPromptTokens: DefaultNeuronsPerMRerankTokens, NeuronsPerMCachedPromptTokens: DefaultNeuronsPerMRerankTokens}
	}
	return DefaultPrices()
}

// Neurons is the cost of a request that read promptTokens and produced
// completionTokens. A negative count is treated as zero, so a caller's bug can
// never credit a tenant.
func (p Prices) Neurons(promptTokens, completionTokens int) float64 {
	pt := float64(max(promptTokens, 0))
	ct := float64(max(completionTokens, 0))
	return (pt*p.NeuronsPerMPromptTokens + ct*p.NeuronsPerMCompletionTokens) / 1e6
}

func (p Prices) validate(fail func(field, msg string)) {
	check := func(field string, v float64) {
		if v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
			fail(field, fmt.Sprintf("price %v must be a finite number >= 0", v))
		}
	}
	check("prices.neurons_per_m_prompt_tokens", p.NeuronsPerMPromptTokens)
	check("prices.neurons_per_m_completion_tokens", p.NeuronsPerMCompletionTokens)
	check("prices.neurons_per_m_cached_prompt_tokens", p.NeuronsPerMCachedPromptTokens)
}

// KVTypes are the KV cache element types a catalog entry may name
// (kv_type): F16, and llama.cpp's 8-bit and 4-bit blocks.
var KVTypes = []string{"f16", "q8_0", "q4_0"}

// MaxDraftTokens bounds a model's draft_tokens: a step verifies at most 16
// rows of drafts (workers/engine's speculation).
const MaxDraftTokens = 16

// Model is one catalog entry. Values handed out by a Catalog are shared and
// must not be modified.
type Model struct {
	Name        string // public name clients use, e.g. "@cf/meta/llama-3.2-1b-instruct"
	Path        string // the GGUF file; absolute when loaded from a file or flags
	Task        string // one of Tasks(); inferred from the file by Resolve when the entry names none
	Description string

	// ContextWindow is the context, in tokens, advertised to clients and
	// enforced at admission (prompt + max_tokens). Zero in a catalog file
	// means the model's trained context; after Resolve it is never zero.
	ContextWindow int

	// The worker's KV pool for this model: a size in tokens or in bytes, at
	// most one of them; both zero lets the worker choose.
	KVPoolTokens int
	KVPoolBytes  int64

	// DraftTokens is the most tokens a decoding sequence drafts and
	// verifies per step (speculative decoding, docs/speculation.md): 0
	// takes the worker's --draft-tokens, -1 turns drafting off for this
	// model (draft_tokens: 0 in a catalog file).
	DraftTokens int

	// KVType is the element type of the worker's KV cache for this model:
	// one of KVTypes, or "" for the worker's --kv-type (docs/kv-types.md).
	KVType string

	Prices     Prices
	Properties map[string]string // free-form key/values for the model search API

	// Read from the GGUF header by Resolve; zero before.
	Arch           string // general.architecture, e.g. "llama"
	TrainedContext int    // <arch>.context_length
	// Encoders only: the length of their vectors (<arch>.embedding_length)
	// and their pooling (mean, cls, last or rank, from <arch>.pooling_type).
	Dims    int
	Pooling string

	taskSet   bool // the entry named its task
	pricesSet bool // the entry named a price
}

// Catalog is a validated set of models. It is safe for concurrent use.
type Catalog struct {
	mu     sync.RWMutex // guards every field; the *Model values are immutable
	models []*Model     // in file (or flag) order
	byName map[string]int

	// For a model under a LimitContext limit: the limit, and the catalog's
	// own window (configured or trained, lowered by Clamp) that the limit
	// hides and that removing it restores. Models without a limit have no
	// entry in either map.
	limit map[string]int
	own   map[string]int
}

// newCatalog builds a catalog from validated models with unique names.
func newCatalog(models []*Model) *Catalog {
	c := &Catalog{models: models, byName: make(map[string]int, len(models)), limit: map[string]int{}, own: map[string]int{}}
	for i, m := range models {
		c.byName[m.Name] = i
	}
	return c
}

// Lookup returns the model called name.
func (c *Catalog) Lookup(name string) (*Model, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	i, ok := c.byName[name]
	if !ok {
		return nil, false
	}
	return c.models[i], true
}

// Models returns every model in catalog order: the order of the file's list or
// of the flags. The slice is the caller's; the models are shared.
func (c *Catalog) Models() []*Model {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return append([]*Model(nil), c.models...)
}

// EffectiveContext returns the context window advertised for name: the
// configured (or trained) window, lowered by any Clamp.
func (c *Catalog) EffectiveContext(name string) (int, bool) {
	m, ok := c.Lookup(name)
	if !ok {
		return 0, false
	}
	return m.ContextWindow, true
}

// Clamp lowers the context window advertised for name to window, for a worker
// whose KV pool cannot hold a request at the full window. It only ever lowers:
// a window at or above the current one changes nothing. Later lookups see the
// new window; *Model values obtained before are not changed. Clamp a resolved
// catalog (Load and FromFlags return one): on an unresolved entry without a
// window the clamp becomes its configured window, which Resolve then checks
// against the trained context.
func (c *Catalog) Clamp(name string, window int) error {
	if window <= 0 {
		return fmt.Errorf("%w: clamp %q to %d tokens: the window must be positive", ErrInvalid, name, window)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	i, ok := c.byName[name]
	if !ok {
		return fmt.Errorf("%w: %q", ErrUnknownModel, name)
	}
	if own, limited := c.own[name]; limited {
		if window < own {
			c.own[name] = window
			c.setWindow(i, min(window, c.limit[name]))
		}
		return nil
	}
	if old := c.models[i]; old.ContextWindow != 0 && window >= old.ContextWindow {
		return nil
	}
	c.setWindow(i, window)
	return nil
}

// LimitContext sets a live limit on the context window advertised for name:
// the smallest window that the workers serving it now can hold, as they
// publish it. The advertised window becomes the smaller of the limit and the
// catalog's own window (the configured or trained one, lowered by any Clamp).
// Unlike a Clamp the limit may rise again as workers come and go, but never
// lifts the window above the catalog's own; a limit of 0 removes it and
// restores the own window. Limit a resolved catalog.
func (c *Catalog) LimitContext(name string, limit int) error {
	if limit < 0 {
		return fmt.Errorf("%w: limit %q to %d tokens: the limit must not be negative", ErrInvalid, name, limit)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	i, ok := c.byName[name]
	if !ok {
		return fmt.Errorf("%w: %q", ErrUnknownModel, name)
	}
	own, limited := c.own[name]
	if !limited {
		own = c.models[i].ContextWindow
	}
	if own <= 0 {
		return fmt.Errorf("%w: limit %q: the model has no context window yet (resolve the catalog first)", ErrInvalid, name)
	}
	window := own
	if limit > 0 {
		if c.own == nil {
			c.own, c.limit = map[string]int{}, map[string]int{}
		}
		window = min(own, limit)
		c.own[name], c.limit[name] = own, limit
	} else {
		delete(c.own, name)
		delete(c.limit, name)
	}
	c.setWindow(i, window)
	return nil
}

// setWindow replaces model i's entry with one advertising window, leaving
// *Model values handed out before unchanged. c.mu must be held for writing.
func (c *Catalog) setWindow(i, window int) {
	if c.models[i].ContextWindow == window {
		return
	}
	m := *c.models[i]
	m.ContextWindow = window
	c.models[i] = &m
}

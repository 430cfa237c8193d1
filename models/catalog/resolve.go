package catalog

import (
	"errors"
	"fmt"

	"github.com/bulkhead-ai/bulkhead/models/gguf"
)

// Resolve opens each model's GGUF header to read its architecture
// (general.architecture) and trained context (<arch>.context_length). A model
// without a context window takes the trained one; a window larger than the
// trained context is an error naming both numbers. A missing, unreadable or
// corrupt file is an error naming the model and the path. Every model is
// checked and every failure reported; on error the catalog is unchanged.
//
// Only the header is read; the mapping is closed before Resolve returns.
func (c *Catalog) Resolve() error {
	current := c.Models()
	resolved := make([]*Model, len(current))
	var errs []error
	for i, m := range current {
		r, err := resolve(i, m)
		errs = append(errs, err)
		resolved[i] = r
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, r := range resolved {
		// A Clamp that ran meanwhile stands.
		if now := c.models[i]; now != current[i] && now.ContextWindow > 0 && now.ContextWindow < r.ContextWindow {
			r.ContextWindow = now.ContextWindow
		}
		c.models[i] = r
	}
	return nil
}

func resolve(i int, m *Model) (*Model, error) {
	h, err := readHeader(m.Path)
	if err != nil {
		return nil, fmt.Errorf("%w: model %q: %s: %w", ErrModelFile, m.Name, m.Path, err)
	}
	arch, trained, pooling := h.arch, h.trained, h.pooling
	r := *m
	r.Arch, r.TrainedContext = arch, trained
	task := TaskTextGeneration
	switch {
	case encoderArchs[arch] && pooling == poolingRank:
		task = TaskTextClassification
	case encoderArchs[arch], pooling == poolingMean || pooling == poolingLast:
		task = TaskTextEmbeddings
	}
	switch {
	case !r.taskSet:
		r.Task = task
	case r.Task != task:
		return nil, &FieldError{Model: m.Name, Index: i, Field: "task", Err: ErrInvalid,
			Msg: fmt.Sprintf("%q, but %s (%s) serves %s", r.Task, m.Path, arch, task)}
	}
	if !r.pricesSet {
		r.Prices = DefaultPricesFor(r.Task)
	}
	if Encoder(r.Task) {
		r.Dims, r.Pooling = h.embd, poolingNames[pooling]
	}
	switch {
	case r.ContextWindow == 0:
		r.ContextWindow = trained
	case r.ContextWindow > trained:
		return nil, &FieldError{Model: m.Name, Index: i, Field: "context_window", Err: ErrContextWindow,
			Msg: fmt.Sprintf("%d tokens is larger than the %d tokens %s was trained for", r.ContextWindow, trained, m.Path)}
	}
	return &r, nil
}

// header is what Resolve reads of a GGUF file.
type header struct {
	arch    string
	trained int // <arch>.context_length
	embd    int // <arch>.embedding_length, 0 when absent
	pooling int // <arch>.pooling_type, 0 (none) when absent
}

// poolingNames names llama.cpp's pooling types.
var poolingNames = []string{"none", "mean", "cls", "last", "rank"}

// readHeader reads a GGUF file's header.
func readHeader(path string) (header, error) {
	f, err := gguf.Open(path)
	if err != nil {
		return header{}, err
	}
	defer f.Close()
	var h header
	var ok bool
	h.arch, ok = f.String("general.architecture")
	if !ok || h.arch == "" {
		return header{}, errors.New("metadata general.architecture is missing")
	}
	key := h.arch + ".context_length"
	n, ok := f.Uint(key)
	if !ok || n == 0 || n > MaxContext {
		return header{}, fmt.Errorf("metadata %s is missing or out of range (1..%d)", key, MaxContext)
	}
	h.trained = int(n)
	if p, ok := f.Uint(h.arch + ".pooling_type"); ok && p <= poolingRank {
		h.pooling = int(p)
	}
	if e, ok := f.Uint(h.arch + ".embedding_length"); ok && e <= 1<<20 {
		h.embd = int(e)
	}
	return h, nil
}

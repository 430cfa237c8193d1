package engine

import (
	"errors"
	"fmt"
)

// ErrPoolTooSmall marks a KV pool that cannot hold one request at the
// advertised context window (invariant 5: a capacity that cannot serve the
// advertised limits is a start-up error). A *PoolError carries the numbers.
var ErrPoolTooSmall = errors.New("KV pool cannot hold one request at the advertised context window")

// PoolError is the start-up refusal of an engine whose KV pool holds fewer
// tokens than its context window. It matches ErrPoolTooSmall and
// ErrConfig.
type PoolError struct {
	Pages    int // whole pages the pool holds
	PageSize int // tokens per page
	Context  int // the context window asked for, in tokens
}

// Tokens is what the pool holds: the window a clamp would serve.
func (e *PoolError) Tokens() int { return e.Pages * e.PageSize }

func (e *PoolError) Error() string {
	return fmt.Sprintf("%v: the pool holds %d tokens (%d pages of %d) but the context window is %d tokens",
		ErrPoolTooSmall, e.Tokens(), e.Pages, e.PageSize, e.Context)
}

func (e *PoolError) Unwrap() []error { return []error{ErrPoolTooSmall, ErrConfig} }

// fitContext is the one pool-fit rule, which New applies to every engine
// (unified, prefill and decode workers alike): a pool of pages×pageSize
// tokens serves a context window only if it holds one request of that
// window. A pool too small is a *PoolError unless clamp is set; then the
// window served is the pool's size, in whole pages. An empty pool is
// refused even with clamp.
func fitContext(pages, pageSize, context int, clamp bool) (int, error) {
	capacity := pages * pageSize
	switch {
	case capacity >= context:
		return context, nil
	case clamp && capacity > 0:
		return capacity, nil
	}
	return 0, &PoolError{Pages: pages, PageSize: pageSize, Context: context}
}

package jinja

import (
	"context"
	"errors"
	"fmt"
	"unicode"
)

// pyIsSpace is Python's str.isspace for one rune: Unicode White_Space plus
// the ASCII separators U+001C..U+001F (Bulkhead patch for trim and strip).
func pyIsSpace(r rune) bool { return unicode.IsSpace(r) || (r >= 0x1c && r <= 0x1f) }

// Bulkhead addition: one render's limits, shared by every nested evaluator.

// ErrBudget is returned when a render exceeds its Limits or its context ends.
var ErrBudget = errors.New("jinja: render budget exceeded")

const (
	maxRange  = 1 << 16 // items one range() may produce
	maxString = 1 << 20 // bytes one string repetition may produce
)

// Limits bound one render. Zero fields mean no limit.
type Limits struct {
	Steps  int // nodes executed plus expressions evaluated
	Output int // bytes any one output buffer may hold
	Depth  int // nested macro calls
}

type budget struct {
	ctx   context.Context
	lim   Limits
	steps int
	depth int
}

// step counts one unit of work by an evaluator whose output holds out bytes.
// A nil budget never runs out.
func (b *budget) step(out int) error {
	if b == nil {
		return nil
	}
	b.steps++
	if b.lim.Steps > 0 && b.steps > b.lim.Steps {
		return fmt.Errorf("%w: more than %d steps", ErrBudget, b.lim.Steps)
	}
	if b.lim.Output > 0 && out > b.lim.Output {
		return fmt.Errorf("%w: output over %d bytes", ErrBudget, b.lim.Output)
	}
	if b.steps&63 == 0 && b.ctx != nil {
		if err := b.ctx.Err(); err != nil {
			return fmt.Errorf("%w: %w", ErrBudget, err)
		}
	}
	return nil
}

func (b *budget) enter() error {
	if b == nil {
		return nil
	}
	b.depth++
	if b.lim.Depth > 0 && b.depth > b.lim.Depth {
		return fmt.Errorf("%w: macro calls nested over %d deep", ErrBudget, b.lim.Depth)
	}
	return nil
}

func (b *budget) leave() {
	if b != nil {
		b.depth--
	}
}

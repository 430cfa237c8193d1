package jinja

import (
	"context"
	"errors"
	"fmt"
	"strings"
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
	// maxValue bounds any one string or list a render makes, with or
	// without Limits (a render without them still cannot ask for more).
	maxValue = 1 << 28
	// valueSize is what one list item costs: a Value, its kind and
	// interface words.
	valueSize = 24
	// maxNest bounds how deep printing walks a value (a list that holds
	// itself nests without end).
	maxNest = 512
)

// Limits bound one render. Zero fields mean no limit.
type Limits struct {
	Steps  int // nodes executed plus expressions evaluated
	Output int // bytes any one output buffer may hold
	Depth  int // nested macro calls
	// Memory bounds the bytes of the strings and lists the render makes,
	// all of them added up (output included), each charged before it is
	// allocated: what a render can hold at any moment is at most this.
	Memory int
}

type budget struct {
	ctx   context.Context
	lim   Limits
	steps int
	depth int
	mem   int // bytes charged to Memory so far
}

// alloc charges n bytes about to be allocated. A nil budget has no Memory
// limit, but no one value may exceed maxValue.
func (b *budget) alloc(n int) error {
	if n < 0 || n > maxValue {
		return fmt.Errorf("%w: a value of more than %d bytes", ErrBudget, maxValue)
	}
	if b == nil {
		return nil
	}
	b.mem += n
	if b.lim.Memory > 0 && b.mem > b.lim.Memory {
		return fmt.Errorf("%w: strings and lists over %d bytes", ErrBudget, b.lim.Memory)
	}
	return nil
}

// allocList charges a list of n items.
func (b *budget) allocList(n int) error { return b.alloc(size(n, valueSize)) }

// room is how many bytes one more value may take.
func (b *budget) room() int {
	if b == nil || b.lim.Memory == 0 {
		return maxValue
	}
	return min(max(b.lim.Memory-b.mem, 0), maxValue)
}

// size is n*each, saturated past maxValue (so alloc refuses it rather than
// the product overflowing).
func size(n, each int) int {
	if n < 0 || each < 0 {
		return -1
	}
	if each != 0 && n > (maxValue+1)/each {
		return maxValue + 1
	}
	return n * each
}

// print is str(v), charged: a string is returned as it is (nothing new is
// made); a list or dict is measured first, so one that would print longer
// than the room left (or nests without end) is refused before it is built.
func (b *budget) print(v Value) (string, error) {
	switch v.kind {
	case KindString:
		return v.AsString(), nil
	case KindList, KindDict:
		n, ok := printedSize(v, b.room(), 0)
		if !ok {
			return "", fmt.Errorf("%w: a printed value of more than %d bytes", ErrBudget, b.room())
		}
		if err := b.alloc(n); err != nil {
			return "", err
		}
		var sb strings.Builder
		sb.Grow(n)
		v.writeRepr(&sb)
		return sb.String(), nil
	}
	s := printValue(v)
	return s, b.alloc(len(s))
}

// printedSize is an upper bound on the length of v's repr, or false once
// it passes limit or nests deeper than maxNest.
func printedSize(v Value, limit, depth int) (int, bool) {
	if depth > maxNest {
		return 0, false
	}
	n := 0
	switch v.kind {
	case KindString:
		n = len(v.AsString()) + 2
	case KindList:
		n = 2
		for _, item := range v.AsList().Items {
			m, ok := printedSize(item, limit-n, depth+1)
			if !ok {
				return 0, false
			}
			n += m + 2
			if n > limit {
				return 0, false
			}
		}
	case KindDict:
		d := v.AsDict()
		n = 2
		for _, key := range d.Keys {
			m, ok := printedSize(d.Data[key], limit-n, depth+1)
			if !ok {
				return 0, false
			}
			n += len(key) + 6 + m
			if n > limit {
				return 0, false
			}
		}
	case KindCallable:
		n = len(v.AsCallable().Name) + 12
	default:
		n = 32 // a number, a bool, None, Undefined
	}
	return n, n <= limit
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

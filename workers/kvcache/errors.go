package kvcache

import (
	"errors"
	"fmt"
)

// Sentinel errors. Functions wrap them with %w and add the details.
var (
	// ErrConfig reports a Config field that is missing or out of range.
	ErrConfig = errors.New("kvcache: invalid config")
	// ErrPoolExhausted reports that a reservation needs more free pages than the
	// pool has; the error is an *AllocError.
	ErrPoolExhausted = errors.New("kvcache: pool exhausted")
	// ErrInvalidOwner reports a sequence whose owner has no tenant namespace.
	ErrInvalidOwner = errors.New("kvcache: invalid owner")
	// ErrInvalidArgument reports a negative count, a layer or index out of range,
	// or K/V slices whose length does not match the cache's row size.
	ErrInvalidArgument = errors.New("kvcache: invalid argument")
	// ErrOutOfOrder reports a write at a position other than the next one for
	// that layer: writes are append-only and leave no holes.
	ErrOutOfOrder = errors.New("kvcache: write out of order")
	// ErrNotReserved reports a position at or beyond the sequence's reservation.
	ErrNotReserved = errors.New("kvcache: position not reserved")
	// ErrUnwritten reports a read of a slot this sequence has not written.
	ErrUnwritten = errors.New("kvcache: slot not written by this sequence")
	// ErrNotOwner reports a page that is not owned by the sequence reading it.
	ErrNotOwner = errors.New("kvcache: page not owned by this sequence")
	// ErrFreed reports use of a sequence after Free.
	ErrFreed = errors.New("kvcache: sequence already freed")
	// ErrBadPage reports imported page data that does not match the pool's
	// layout: wrong length, a written count out of range, counts that differ
	// between layers, or more slots than the sequence reserved.
	ErrBadPage = errors.New("kvcache: bad page data")
	// ErrChecksum reports imported page data whose CRC-64 is not the expected
	// one. Errors wrapping it wrap ErrBadPage too.
	ErrChecksum = errors.New("kvcache: page checksum mismatch")
)

// AllocError is returned when a reservation cannot be satisfied. Nothing was
// allocated. errors.Is(err, ErrPoolExhausted) holds.
type AllocError struct {
	Need int // pages the reservation needed
	Free int // pages free when it was attempted
}

func (e *AllocError) Error() string {
	return fmt.Sprintf("kvcache: pool exhausted: need %d pages, %d free", e.Need, e.Free)
}

// Unwrap makes errors.Is(err, ErrPoolExhausted) true.
func (e *AllocError) Unwrap() error { return ErrPoolExhausted }

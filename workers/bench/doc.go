// Package bench is the engine benchmark method behind `bulkhead bench
// engine`: how prefill and decode speed are measured on one engine, and the
// bound they are compared with (the machine's read bandwidth over the bytes
// a decode step streams).
//
// Prefill is one sequence's whole prompt in one step, timed to its first
// token. Decode runs Batch sequences at once and counts only the tokens
// emitted after the last sequence's first token, over the time from then to
// the end, so that staggered prefills do not inflate the figure. Prompts are
// random token ids from a fixed seed; sampling is greedy with end of
// generation ignored, so every run does the same work.
//
// It owns the measurement only: it never loads a model, never prints, and
// never runs anything but its own requests on an engine it built itself.
package bench

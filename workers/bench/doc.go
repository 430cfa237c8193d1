// Package bench holds the benchmark methods behind `bulkhead bench`. Engine
// (`bench engine`) measures prefill and decode speed on one engine, and the
// bound they are compared with (the machine's read bandwidth over the bytes
// a decode step streams); Serve (`bench serve`) times concurrent streaming
// generations against a running edge through its public API.
//
// Prefill is one sequence's whole prompt in one step, timed to its first
// token. Decode runs Batch sequences at once and counts only the tokens
// emitted after the last sequence's first token, over the time from then to
// the end, so that staggered prefills do not inflate the figure. Prompts are
// random token ids from a fixed seed; sampling is greedy with end of
// generation ignored, so every run does the same work.
//
// Serve reports aggregate tokens/s over the run's span, time to first token
// and the gaps between text events, as nearest-rank p50, p90 and p99.
//
// It owns the measurement only: it never loads a model, never prints, never
// runs anything but its own requests on an engine it built itself, and sends
// an edge nothing but the requests it was asked to time.
package bench

package sample

import (
	"bytes"
	"unicode/utf8"
)

// StopMatcher cuts a stream of text pieces at the first of a set of stop
// sequences. It holds back any tail of the text that could be the start of a
// stop sequence, and any incomplete UTF-8 character, until the next piece
// decides it. It is not safe for concurrent use.
type StopMatcher struct {
	stops   [][]byte
	maxLen  int    // longest stop sequence, in bytes
	held    []byte // text received but not yet emitted
	stopped bool
}

// NewStopMatcher returns a matcher for stops. Empty strings are ignored; with
// no stops, Push only holds back incomplete UTF-8 characters.
func NewStopMatcher(stops []string) *StopMatcher {
	m := &StopMatcher{}
	for _, s := range stops {
		if s == "" {
			continue
		}
		m.stops = append(m.stops, []byte(s))
		m.maxLen = max(m.maxLen, len(s))
	}
	return m
}

// Push adds the next piece of generated text and returns the text that can be
// emitted now. stopped is true once a stop sequence has been completed: the
// returned text is then everything before it, and the stop sequence and
// anything after it are dropped. After a stop, Push returns "", true.
func (m *StopMatcher) Push(piece string) (emit string, stopped bool) {
	if m.stopped {
		return "", true
	}
	whole := len(m.held) == 0 // nothing held: piece may be emitted as it is
	m.held = append(m.held, piece...)
	if at := m.firstStop(); at >= 0 {
		emit = string(m.held[:at])
		m.held = m.held[:0]
		m.stopped = true
		return emit, true
	}
	cut := safeCut(m.held, len(m.held)-m.partialStop())
	if whole && cut == len(m.held) {
		// The usual case: the piece goes out whole, without a new string.
		m.held = m.held[:0]
		return piece, false
	}
	emit = string(m.held[:cut])
	m.held = m.held[:copy(m.held, m.held[cut:])]
	return emit, false
}

// Flush ends the stream and returns the text still held back (possibly ending
// in an incomplete UTF-8 character, exactly as generated). It returns "" after
// a stop.
func (m *StopMatcher) Flush() string {
	out := string(m.held)
	m.held = m.held[:0]
	return out
}

// Stopped reports whether a stop sequence has been completed.
func (m *StopMatcher) Stopped() bool { return m.stopped }

// firstStop returns the earliest offset in held where any stop sequence
// starts, or -1.
func (m *StopMatcher) firstStop() int {
	first := -1
	for _, s := range m.stops {
		if i := bytes.Index(m.held, s); i >= 0 && (first < 0 || i < first) {
			first = i
		}
	}
	return first
}

// partialStop returns the length of the longest tail of held that is a proper
// prefix of some stop sequence.
func (m *StopMatcher) partialStop() int {
	for k := min(len(m.held), m.maxLen-1); k > 0; k-- {
		tail := m.held[len(m.held)-k:]
		for _, s := range m.stops {
			if len(s) > k && bytes.Equal(s[:k], tail) {
				return k
			}
		}
	}
	return 0
}

// safeCut moves cut back so that b[:cut] does not end inside a UTF-8
// character: neither before a continuation byte nor after a character whose
// remaining bytes have not arrived yet.
func safeCut(b []byte, cut int) int {
	for i := 0; i < utf8.UTFMax-1 && cut > 0 && cut < len(b) && !utf8.RuneStart(b[cut]); i++ {
		cut--
	}
	// Find the start of the last character before cut; hold it back if it is
	// the (valid so far) beginning of a longer one whose rest is missing.
	for i := cut - 1; i >= 0 && i >= cut-utf8.UTFMax; i-- {
		if utf8.RuneStart(b[i]) {
			if !utf8.FullRune(b[i:]) {
				return i
			}
			break
		}
	}
	return cut
}

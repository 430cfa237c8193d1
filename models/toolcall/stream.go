package toolcall

import "strings"

// Event is one piece of parsed output: text, reasoning text, or a complete
// call.
type Event struct {
	Content   string
	Reasoning string
	Call      *Call
}

// Stream parses output as it is generated. Text that cannot be part of a
// call is given back at once; text that may be is held until it is known to
// be a call (given back as one Call event) or not (given back as text).
// Formats whose calls are the whole answer (Llama 3.x once it starts with
// "{", gpt-oss) are held to the end. Push and Finish concatenate to Parse's
// result whatever the chunking. A Stream is not safe for concurrent use.
type Stream struct {
	f       Format
	buf     string // held text
	ws      string // held text that is only whitespace (dropped if a call follows)
	calls   int
	decided bool // Llama3: whether the answer is held to the end
	hold    bool // Llama3/gpt-oss: hold everything
}

// NewStream starts parsing one output.
func NewStream(f Format) *Stream {
	return &Stream{f: f, hold: f == GPTOSS}
}

// Push adds generated text and returns what became final.
func (s *Stream) Push(text string) []Event {
	switch s.f {
	case None:
		return s.text(text)
	case Hermes:
		s.buf += text
		return s.blocks("<tool_call>", "</tool_call>")
	case Mistral, Granite, Llama3, GPTOSS:
		s.buf += text
		return s.tail()
	}
	return s.text(text)
}

// Finish ends the output and returns everything still held.
func (s *Stream) Finish() []Event {
	var evs []Event
	switch s.f {
	case Mistral, Granite:
		marker := "[TOOL_CALLS]"
		if s.f == Granite {
			marker = "<|tool_call|>"
		}
		if i := strings.Index(s.buf, marker); i >= 0 {
			before, body := s.buf[:i], s.buf[i+len(marker):]
			body = strings.TrimSuffix(strings.TrimSpace(body), "</s>")
			if calls, ok := jsonCalls(body, "arguments", "parameters"); ok {
				s.buf = ""
				evs = append(evs, s.text(before)...)
				return append(evs, s.emitCalls(calls)...)
			}
		}
	case Llama3:
		if s.hold {
			if calls, ok := llamaCalls(s.buf); ok {
				s.buf = ""
				return s.emitCalls(calls)
			}
		}
	case GPTOSS:
		hevs := harmony(s.buf)
		s.buf = ""
		for _, e := range hevs {
			if e.Call != nil {
				s.calls++
			}
		}
		for _, e := range hevs {
			if e.Content != "" && s.calls > 0 && strings.TrimSpace(e.Content) == "" {
				continue
			}
			if e.Content != "" || e.Reasoning != "" || e.Call != nil {
				evs = append(evs, e)
			}
		}
		return evs
	}
	rest := s.buf
	s.buf = ""
	evs = append(evs, s.text(rest)...)
	if s.ws != "" && s.calls == 0 {
		evs = append(evs, Event{Content: s.ws})
	}
	s.ws = ""
	return evs
}

// text gives back text, holding a whitespace-only run until it is known
// whether a call follows it.
func (s *Stream) text(t string) []Event {
	if t == "" {
		return nil
	}
	if strings.TrimSpace(t) == "" {
		s.ws += t
		return nil
	}
	out := s.ws + t
	s.ws = ""
	// Keep trailing whitespace back too: a call may come right after it.
	trimmed := strings.TrimRight(out, " \t\r\n")
	s.ws = out[len(trimmed):]
	return []Event{{Content: trimmed}}
}

func (s *Stream) emitCalls(calls []Call) []Event {
	s.ws = "" // whitespace before a call is dropped
	evs := make([]Event, len(calls))
	for i := range calls {
		c := calls[i]
		evs[i] = Event{Call: &c}
	}
	s.calls += len(calls)
	return evs
}

// blocks handles open...close blocks anywhere in the text (Hermes).
func (s *Stream) blocks(open, close string) []Event {
	var evs []Event
	for {
		i := strings.Index(s.buf, open)
		if i < 0 {
			// Give back all but a tail that may begin the marker.
			keep := partialSuffix(s.buf, open)
			evs = append(evs, s.text(s.buf[:len(s.buf)-keep])...)
			s.buf = s.buf[len(s.buf)-keep:]
			return evs
		}
		evs = append(evs, s.text(s.buf[:i])...)
		s.buf = s.buf[i:]
		j := strings.Index(s.buf[len(open):], close)
		if j < 0 {
			return evs // held until the block closes or the output ends
		}
		block := s.buf[:len(open)+j+len(close)]
		s.buf = s.buf[len(block):]
		if c, ok := hermesBlock(block[len(open) : len(open)+j]); ok {
			evs = append(evs, s.emitCalls([]Call{c})...)
		} else {
			evs = append(evs, s.text(block)...)
		}
	}
}

// tail handles formats whose calls run to the end of the output: text is
// given back until the marker starts; from there on it is held.
func (s *Stream) tail() []Event {
	if s.hold {
		return nil
	}
	var marker string
	switch s.f {
	case Mistral:
		marker = "[TOOL_CALLS]"
	case Granite:
		marker = "<|tool_call|>"
	case Llama3:
		// The answer is a call only if it starts with one.
		t := strings.TrimLeft(s.buf, " \t\r\n")
		if !s.decided {
			switch {
			case t == "" || strings.HasPrefix("<|python_tag|>", t):
				return nil // cannot tell yet
			case strings.HasPrefix(t, "{") || strings.HasPrefix(t, "<|python_tag|>"):
				s.decided, s.hold = true, true
				return nil
			}
			s.decided = true
		}
		rest := s.buf
		s.buf = ""
		return s.text(rest)
	}
	i := strings.Index(s.buf, marker)
	if i >= 0 {
		evs := s.text(s.buf[:i])
		s.buf = s.buf[i:]
		s.hold = true
		return evs
	}
	keep := partialSuffix(s.buf, marker)
	evs := s.text(s.buf[:len(s.buf)-keep])
	s.buf = s.buf[len(s.buf)-keep:]
	return evs
}

// partialSuffix is the length of the longest suffix of s that is a proper
// prefix of marker.
func partialSuffix(s, marker string) int {
	for n := min(len(s), len(marker)-1); n > 0; n-- {
		if strings.HasSuffix(s, marker[:n]) {
			return n
		}
	}
	return 0
}

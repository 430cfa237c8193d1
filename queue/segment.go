package queue

import (
	"fmt"
	"strings"
)

// Segment is a piece of a job's prompt. Special segments hold text the chat
// template wrote (its control tokens), tokenized with special-token parsing
// on; all other text, which includes everything a caller wrote, is tokenized
// with it off, so control-token text typed by a user stays ordinary text.
type Segment struct {
	Text    string `json:"text"`
	Special bool   `json:"special,omitempty"`
}

// validateSegments checks a job's prompt segments: when a job has them,
// Prompt is their concatenation and ParseSpecial is off, so a worker that
// predates segments tokenizes the prompt as plain text (never turning a
// user's text into control tokens) instead of failing or trusting it.
func (j *Job) validateSegments() error {
	if len(j.Segments) == 0 {
		return nil
	}
	if j.ParseSpecial {
		return fmt.Errorf("%w: job %s has prompt segments and parse_special", ErrBadMessage, j.ID)
	}
	n := 0
	for _, s := range j.Segments {
		n += len(s.Text)
	}
	if n != len(j.Prompt) {
		return fmt.Errorf("%w: job %s prompt is not its segments' text", ErrBadMessage, j.ID)
	}
	rest := j.Prompt
	for _, s := range j.Segments {
		if !strings.HasPrefix(rest, s.Text) {
			return fmt.Errorf("%w: job %s prompt is not its segments' text", ErrBadMessage, j.ID)
		}
		rest = rest[len(s.Text):]
	}
	return nil
}

// SegmentText returns the concatenated text of segs, the Prompt of a job
// that carries them.
func SegmentText(segs []Segment) string {
	var b strings.Builder
	for _, s := range segs {
		b.WriteString(s.Text)
	}
	return b.String()
}

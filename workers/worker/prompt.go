package worker

import (
	"github.com/bulkhead-ai/bulkhead/models/tokenizer"
	"github.com/bulkhead-ai/bulkhead/queue"
)

// promptTokens tokenizes a job's prompt exactly as the edge counted it: a
// rendered conversation segment by segment (special-token parsing only in
// the template's own segments), anything else as one text.
func promptTokens(tok *tokenizer.Tokenizer, job *queue.Job) []int32 {
	if len(job.Segments) == 0 {
		return tok.Encode(job.Prompt, job.AddBOS, job.ParseSpecial)
	}
	segs := make([]tokenizer.Segment, len(job.Segments))
	for i, s := range job.Segments {
		segs[i] = tokenizer.Segment{Text: s.Text, Special: s.Special}
	}
	return tok.EncodeSegments(segs, job.AddBOS)
}

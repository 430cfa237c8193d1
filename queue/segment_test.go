package queue

import (
	"errors"
	"reflect"
	"testing"
	"time"
)

func TestJobSegments(t *testing.T) {
	base := Job{ID: "a", Tenant: "t", Model: "m", MaxTokens: 1, Reply: "r", Deadline: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	segs := []Segment{{Text: "<|im_start|>", Special: true}, {Text: "user\n<|im_end|>"}}
	for _, tc := range []struct {
		name         string
		prompt       string
		segs         []Segment
		parseSpecial bool
		ok           bool
	}{
		{"no segments", "x", nil, true, true},
		{"segments and their text", SegmentText(segs), segs, false, true},
		{"segments with parse_special", SegmentText(segs), segs, true, false},
		{"prompt differs", "<|im_start|>user\n<|im_end|>!", segs, false, false},
		{"same length, other text", "<|im_start|>USER\n<|im_end|>", segs, false, false},
		{"empty prompt", "", segs, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := base
			j.Prompt, j.Segments, j.ParseSpecial = tc.prompt, tc.segs, tc.parseSpecial
			b, err := EncodeJob(&j)
			if err != nil {
				t.Fatal(err)
			}
			got, err := DecodeJob(b)
			if !tc.ok {
				if !errors.Is(err, ErrBadMessage) {
					t.Fatalf("DecodeJob = %v, want ErrBadMessage", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got.Segments, tc.segs) || got.Prompt != tc.prompt {
				t.Fatalf("round trip: %+v", got)
			}
		})
	}
}

package queue

import (
	"encoding/json"
	"errors"
	"testing"
	"time"
)

// FuzzDecodeRecord: a job record read from the results bucket either
// decodes into one that names its key's job and holds a known status, or is
// ErrBadMessage; it never panics.
func FuzzDecodeRecord(f *testing.F) {
	for _, r := range []AsyncResult{
		{ID: "a", Tenant: "t", Status: StatusQueued},
		{ID: "a", Tenant: "t", Status: StatusDone, Text: "hi", Usage: &Usage{PromptTokens: 1}},
		{ID: "a", Tenant: "t", Status: StatusFailed, Error: &FrameError{Kind: ErrKindInternal, Message: "x"}},
		{ID: "a", Tenant: "t", Status: StatusRunning, Streamed: true, Attempts: 2, Updated: time.Unix(0, 0)},
	} {
		b, _ := json.Marshal(r)
		f.Add("a", b)
	}
	f.Add("a", []byte(`{"id":"b","status":"done"}`))
	f.Add("a", []byte(`{"id":"a","status":"weird"}`))
	f.Add("", []byte(`null`))
	f.Fuzz(func(t *testing.T, id string, b []byte) {
		r, err := decodeRecord(id, b)
		if err != nil {
			if !errors.Is(err, ErrBadMessage) {
				t.Fatalf("error %v does not wrap ErrBadMessage", err)
			}
			return
		}
		if r.ID != id {
			t.Fatalf("accepted %+v under %q", r, id)
		}
	})
}

// FuzzDecodeUsage: a usage event billing reads decodes or is ErrBadMessage.
func FuzzDecodeUsage(f *testing.F) {
	b, _ := json.Marshal(UsageEvent{Tenant: "t", Model: "m", RequestID: "r", Finish: OutcomeStop, Time: time.Unix(1, 0), WorkerID: "w"})
	f.Add(b)
	f.Add([]byte(`{"tenant":"","request_id":"r"}`))
	f.Add([]byte(`{"tenant":"t","model":"m","request_id":"r","finish":"stop","prompt_tokens":-1}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		if _, err := DecodeUsage(b); err != nil && !errors.Is(err, ErrBadMessage) {
			t.Fatalf("error %v does not wrap ErrBadMessage", err)
		}
	})
}

// FuzzReplies: any sequence of reply messages (frames, heartbeats, junk)
// read by Replies ends in io.EOF after a last frame, or an error; Next never
// returns a heartbeat, a frame out of seq order or anything after the end.
func FuzzReplies(f *testing.F) {
	tok := func(seq uint64) []byte { b, _ := EncodeFrame(&Frame{Seq: seq, Kind: KindToken, Text: "x"}); return b }
	fin := func(seq uint64) []byte {
		b, _ := EncodeFrame(&Frame{Seq: seq, Kind: KindFinal, Usage: &Usage{}})
		return b
	}
	join := func(ms ...[]byte) []byte {
		var out []byte
		for _, m := range ms {
			out = append(out, byte(len(m)))
			out = append(out, m...)
		}
		return out
	}
	f.Add(join(heartbeatFrame, tok(1), heartbeatFrame, tok(2), fin(3)))
	f.Add(join(tok(1), tok(1), fin(2)))
	f.Add(join(tok(2), []byte(`{"seq":9007199254740992,"kind":"error","error":{"kind":"internal","message":"x"}}`)))
	f.Add(join([]byte(`{"seq":0,"kind":"heartbeat","text":"x"}`), fin(1)))
	f.Add([]byte{200, '{'})
	f.Fuzz(func(t *testing.T, stream []byte) {
		r := &Replies{want: 1}
		ended := false
		for len(stream) > 0 {
			n := int(stream[0])
			stream = stream[1:]
			if n > len(stream) {
				n = len(stream)
			}
			msg := stream[:n]
			stream = stream[n:]
			fr, err := DecodeFrame(msg)
			if err == nil && fr.Kind == KindHeartbeat {
				r.alive = true
				continue
			}
			if ended {
				return
			}
			if err != nil {
				return
			}
			want := r.want
			got, err := r.check(fr)
			if err != nil {
				if !errors.Is(err, ErrGap) {
					t.Fatalf("check error %v", err)
				}
				return
			}
			if got.Seq != want && got.Kind != KindError {
				t.Fatalf("returned seq %d, want %d", got.Seq, want)
			}
			if got.Kind != KindToken {
				ended = true
			}
		}
	})
}

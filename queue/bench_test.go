package queue

import (
	"context"
	"testing"
	"time"
)

func BenchmarkFrameCodec(b *testing.B) {
	f := &Frame{Seq: 12, Kind: KindToken, Text: " little", Tokens: []int32{2675}}
	for b.Loop() {
		buf, err := EncodeFrame(f)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := DecodeFrame(buf); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeJob(b *testing.B) {
	buf, err := EncodeJob(testJob("bench-1"))
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := DecodeJob(buf); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReplies measures one token frame through NATS: Replier publish to
// Replies.Next on a local embedded server.
func BenchmarkReplies(b *testing.B) {
	env := startEnv(b, StreamConfig{})
	ctx := context.Background()
	res, err := OpenResults(ctx, env.js)
	if err != nil {
		b.Fatal(err)
	}
	job := testJob("bench-replies")
	job.Deadline = time.Now().Add(time.Hour)
	r, err := NewClient(env.nc, env.js).Submit(ctx, job)
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	rp, _, err := res.Claim(ctx, env.nc, job)
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if err := rp.Token(ctx, " x", []int32{1}); err != nil {
			b.Fatal(err)
		}
		if _, err := r.Next(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

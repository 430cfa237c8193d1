package worker

import (
	"context"
	"errors"
	"io"
	"testing"

	"github.com/bulkhead-ai/bulkhead/queue"
	"github.com/bulkhead-ai/bulkhead/workers/engine"
)

// TestSplitShutdownDrains stops the prefill and the decode worker while a
// split request streams: both return only after it ended, and it ends with
// its final frame (the decode worker finished it within its grace), the
// pools back at their baseline. The decode worker holds the stream after
// its first token (Config.AfterToken) until its stop began.
func TestSplitShutdownDrains(t *testing.T) {
	ev := startNATS(t)
	held, release := make(chan string, 1), make(chan struct{})
	s := startSplit(t, ev, engine.Config{}, engine.Config{}, Config{}, Config{AfterToken: holdFirstToken(held, release)})
	job := newJob(t, "Once upon a time", 24)
	r, err := ev.client.Submit(context.Background(), job)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	waitHeld(t, job, held)
	if err := s.stopPre(); err != nil {
		t.Fatalf("prefill Run returned %v", err)
	}
	if err := stopHeld(t, s.decWorker, release); err != nil {
		t.Fatalf("decode Run returned %v", err)
	}
	frames, err := collect(t, r)
	if !errors.Is(err, io.EOF) || frames[len(frames)-1].Kind != queue.KindFinal {
		t.Fatalf("after shutdown: %d frames then %v, last %+v", len(frames), err, frames[len(frames)-1])
	}
	checkBaseline(t, s.pre, s.dec)
}

package queue

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
)

// TerminalSeq is the sequence number of an error frame sent by a worker that
// cannot know how many frames came before it (a redelivered job whose first
// worker died mid-stream). Receivers accept an error frame whose seq is beyond
// the one they expect: the stream ends in an error either way.
const TerminalSeq uint64 = 1 << 53

// Errors of the reply side.
var (
	ErrLostClaim = errors.New("queue: another worker claimed the job")
	ErrEnded     = errors.New("queue: reply stream already ended")
)

// Replier sends one job's reply: token frames with increasing seq, then one
// final or error frame, on job.Reply (core NATS) when the job has one, and the
// job's record in the results bucket (with the whole text for async jobs). It
// is used by one goroutine at a time.
type Replier struct {
	nc   *nats.Conn
	res  *Results
	job  *Job
	rec  *AsyncResult // the job's record as last written
	rev  uint64       // its revision
	seq  uint64       // seq of the last frame sent
	text strings.Builder
	end  bool
	m    Meter // what ran, for the usage event

	// unrecorded: the job ended here, but its record's write failed for
	// another reason than a lost claim (see Unrecorded); owed is what the
	// end still has to send once it is written (FailIfHeld's error frame).
	unrecorded bool
	owed       *Frame

	ended atomic.Bool // end, for Heartbeat on another goroutine
}

// Heartbeat sends a KindHeartbeat frame on the job's reply subject, telling
// the edge a worker still holds the job (see HeartbeatTimeout). Unlike every
// other method it may be called from another goroutine than the one
// streaming the job; after the job's last frame it sends nothing.
func (r *Replier) Heartbeat() error {
	if r.job.Reply == "" || r.ended.Load() {
		return nil
	}
	if err := r.nc.Publish(r.job.Reply, heartbeatFrame); err != nil {
		return fmt.Errorf("queue: heartbeat of %s: %w", r.job.ID, err)
	}
	return nil
}

var heartbeatFrame = []byte(`{"seq":0,"kind":"heartbeat"}`)

// Meter is what a job consumed on this worker so far, for its usage event:
// when it was claimed and its first token sent, the prompt the engine took
// (Started) and the tokens produced (Token calls).
type Meter struct {
	Claimed      time.Time
	FirstToken   time.Time // zero until the first Token
	Started      bool      // the engine took the prompt
	PromptTokens int
	CachedTokens int
	Tokens       int // completion tokens produced
}

func newReplier(nc *nats.Conn, res *Results, job *Job, rec *AsyncResult, rev uint64) *Replier {
	return &Replier{nc: nc, res: res, job: job, rec: rec, rev: rev, m: Meter{Claimed: time.Now()}}
}

// Job is the job this Replier answers.
func (r *Replier) Job() *Job { return r.job }

// Started records that the engine took the job's prompt of promptTokens, of
// which cachedTokens came from the prefix cache: from now on an ending bills
// the prompt.
func (r *Replier) Started(promptTokens, cachedTokens int) {
	r.m.Started, r.m.PromptTokens, r.m.CachedTokens = true, promptTokens, min(max(cachedTokens, 0), promptTokens)
}

// Meter returns what the job consumed on this worker so far.
func (r *Replier) Meter() Meter { return r.m }

// Sent is the number of frames published so far.
func (r *Replier) Sent() uint64 {
	if r.seq >= TerminalSeq-1 {
		return 0
	}
	return r.seq
}

// Streamed reports whether any frame of this job went out, from this worker
// or an earlier one; a streamed job can no longer be handed to another worker.
func (r *Replier) Streamed() bool { return r.rec.Streamed }

// Token sends a token frame (text may be empty, e.g. for an end-of-generation
// token). Before the job's first frame it marks the record streamed by
// compare-and-set; ErrLostClaim means another worker owns the job now and
// this one must stop without sending anything more.
func (r *Replier) Token(ctx context.Context, text string, tokens []int32) error {
	return r.TokenLogprobs(ctx, text, tokens, nil)
}

// TokenLogprobs is Token with the tokens' log-probabilities on the frame.
func (r *Replier) TokenLogprobs(ctx context.Context, text string, tokens []int32, lps []TokenLogprob) error {
	if r.end {
		return ErrEnded
	}
	r.m.Tokens++
	if r.m.FirstToken.IsZero() {
		r.m.FirstToken = time.Now()
	}
	if r.job.Async {
		r.text.WriteString(text)
	}
	if r.job.Reply == "" {
		return nil
	}
	if err := r.markStreamed(ctx); err != nil {
		return err
	}
	return r.publish(&Frame{Kind: KindToken, Text: text, Tokens: tokens, Logprobs: lps})
}

func (r *Replier) markStreamed(ctx context.Context) error {
	if r.rec.Streamed {
		return nil
	}
	r.rec.Streamed = true
	rev, err := r.res.put(ctx, r.rec, r.rev, r.job)
	if errors.Is(err, ErrConflict) {
		r.end = true
		r.ended.Store(true)
		return fmt.Errorf("%w: %s", ErrLostClaim, r.job.ID)
	}
	if err != nil {
		r.rec.Streamed = false
		return err
	}
	r.rev = rev
	return nil
}

// Final sends the final frame (text is the held-back tail, possibly empty) and
// records the job as done.
func (r *Replier) Final(ctx context.Context, text, finish string, usage Usage) error {
	if r.end {
		return ErrEnded
	}
	if r.job.Reply != "" {
		if err := r.markStreamed(ctx); err != nil {
			return err
		}
		if err := r.publish(&Frame{Kind: KindFinal, Text: text, Finish: finish, Usage: &usage}); err != nil {
			return err
		}
	}
	r.end = true
	r.ended.Store(true)
	r.rec.Status = StatusDone
	r.rec.Finish = finish
	r.rec.Usage = &usage
	if r.job.Async {
		r.text.WriteString(text)
		r.rec.Text = r.text.String()
	}
	return r.recordEnd(ctx)
}

// recordEnd writes the record of a job that ended here, then announces the
// end (notify). A write that fails for another reason than a lost claim
// leaves the end to write again (Unrecorded, RecordEnd).
func (r *Replier) recordEnd(ctx context.Context) error {
	if err := r.record(ctx); err != nil {
		r.unrecorded = !errors.Is(err, ErrLostClaim)
		return err
	}
	r.unrecorded = false
	var perr error
	if r.owed != nil {
		perr = r.publish(r.owed)
		r.owed = nil
	}
	return errors.Join(perr, r.notify(ctx))
}

// Unrecorded reports whether the job ended here (Final, FinalVectors, Fail,
// FailIfHeld) but its record still says otherwise: the write failed for
// another reason than a lost claim, such as a results bucket without a
// leader for longer than a write's retries. An async job's record is its
// only answer, so the caller writes it again (RecordEnd) rather than let the
// job's message go.
func (r *Replier) Unrecorded() bool { return r.unrecorded }

// RecordEnd writes the end of an Unrecorded job again, and then sends what
// the end still owes (the notice; FailIfHeld's error frame). ErrLostClaim
// means the record moved on meanwhile: another worker claimed the job, or
// an earlier try that timed out was stored after all. Without an unrecorded
// end it does nothing.
func (r *Replier) RecordEnd(ctx context.Context) error {
	if !r.unrecorded {
		return nil
	}
	return r.recordEnd(ctx)
}

// notify announces the job's end, once its record says so, when the job
// named a webhook or an event subject (notify.go).
func (r *Replier) notify(ctx context.Context) error {
	if r.job.Webhook == nil && r.job.EventSubject == "" {
		return nil
	}
	return PublishNotice(ctx, r.res.js, noticeOf(r.job, r.rec))
}

// Fail sends an error frame and records the job as failed. Any text gathered
// for an async job is dropped: a failed job has no result.
func (r *Replier) Fail(ctx context.Context, kind ErrorKind, msg string) error {
	if r.end {
		return ErrEnded
	}
	r.end = true
	r.ended.Store(true)
	fe := &FrameError{Kind: kind, Message: msg}
	var perr error
	if r.job.Reply != "" {
		perr = r.publish(&Frame{Kind: KindError, Error: fe})
	}
	r.rec.Status = StatusFailed
	r.rec.Error = fe
	r.rec.Text = ""
	return errors.Join(perr, r.recordEnd(ctx))
}

// Requeue gives the claim back without having sent anything, so the job may
// run again (on this worker or another); the record returns to queued. It is
// refused once a frame went out.
func (r *Replier) Requeue(ctx context.Context) error {
	if r.end {
		return ErrEnded
	}
	if r.rec.Streamed {
		return fmt.Errorf("queue: job %s already streamed, cannot requeue", r.job.ID)
	}
	r.end = true
	r.ended.Store(true)
	r.rec.Status = StatusQueued
	return r.record(ctx)
}

func (r *Replier) record(ctx context.Context) error {
	rev, err := r.res.put(ctx, r.rec, r.rev, r.job)
	if errors.Is(err, ErrConflict) {
		return fmt.Errorf("%w: %s", ErrLostClaim, r.job.ID)
	}
	if err != nil {
		return err
	}
	r.rev = rev
	return nil
}

func (r *Replier) publish(f *Frame) error {
	r.seq++
	f.Seq = r.seq
	b, err := EncodeFrame(f)
	if err != nil {
		return err
	}
	if err := r.nc.Publish(r.job.Reply, b); err != nil {
		return fmt.Errorf("queue: publishing frame %d of %s: %w", f.Seq, r.job.ID, err)
	}
	return nil
}

// FailIfHeld ends the job with an error frame as Fail does, but records the
// failure first, by compare-and-set: if another worker has claimed the job
// since this Replier last wrote its record (a decode worker after the prefill
// worker that handed the job over, or the reverse), it returns ErrLostClaim
// and sends nothing. Workers that share a job across a hand-over use it so
// that at most one of them ends the stream.
func (r *Replier) FailIfHeld(ctx context.Context, kind ErrorKind, msg string) error {
	if r.end {
		return ErrEnded
	}
	fe := &FrameError{Kind: kind, Message: msg}
	rec := *r.rec
	rec.Status = StatusFailed
	rec.Error = fe
	rec.Text = ""
	rev, err := r.res.put(ctx, &rec, r.rev, r.job)
	if errors.Is(err, ErrConflict) {
		r.end = true
		r.ended.Store(true)
		return fmt.Errorf("%w: %s", ErrLostClaim, r.job.ID)
	}
	r.rec, r.end = &rec, true
	r.ended.Store(true)
	if err != nil {
		// Still held as far as anyone knows: the failure is written again
		// by RecordEnd, and the error frame goes out once it is.
		r.unrecorded = true
		if r.job.Reply != "" {
			r.owed = &Frame{Kind: KindError, Error: fe}
		}
		return err
	}
	r.rev = rev
	nerr := r.notify(ctx)
	if r.job.Reply == "" {
		return nerr
	}
	return errors.Join(nerr, r.publish(&Frame{Kind: KindError, Error: fe}))
}

package queue

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Errors of the results store.
var (
	ErrNotFound = errors.New("queue: no such job")
	ErrConflict = errors.New("queue: job record changed concurrently")
)

// Job statuses recorded in the results bucket.
const (
	StatusQueued  = "queued"  // async job accepted, not yet picked up
	StatusRunning = "running" // a worker claimed it
	StatusDone    = "done"    // finished: Text, Usage, Finish set
	StatusFailed  = "failed"  // ended with Error
)

// AsyncResult is a job's record in the results bucket: the status and result
// of an async job, and for every job the marker workers use to avoid running
// it twice. Text is kept only for async jobs.
type AsyncResult struct {
	ID       string      `json:"id"`
	Tenant   string      `json:"tenant"`
	Model    string      `json:"model,omitempty"`
	Status   string      `json:"status"`
	Text     string      `json:"text,omitempty"`
	Vectors  *Vectors    `json:"vectors,omitempty"` // an encoder job's result (Job.Embed)
	Usage    *Usage      `json:"usage,omitempty"`
	Finish   string      `json:"finish,omitempty"`
	Error    *FrameError `json:"error,omitempty"`
	Streamed bool        `json:"streamed,omitempty"` // a frame went out on the reply subject
	Attempts int         `json:"attempts,omitempty"` // worker claims so far
	Deadline time.Time   `json:"deadline,omitzero"`  // the job's (Job.Deadline); zero in records written before it was kept
	Updated  time.Time   `json:"updated"`
}

// EndRetry bounds how long a worker writes again the end of an async job
// whose record's write failed (Replier.Unrecorded), keeping the job's
// message in progress: longer than a JetStream cluster takes to elect a
// results-bucket leader after losing a server (an election waits 4 to 9 s,
// and one without a winner starts again) and than it takes to notice a lost
// quorum (10 s); shorter than AckWait × MaxDeliver.
const EndRetry = time.Minute

// LostAfter is how long past its deadline an async job's record may still
// say queued or running. No worker holds a job past its deadline (the
// worker's context ends there, and its end is written within EndRetry), so
// a record that still does has lost its job: a worker died on the job's
// last delivery (MaxDeliver), or the job's message is gone. AsyncStatus
// answers such a job failed (ErrKindTimeout) instead of running for good.
// The margin covers one record write's own retries and clock skew.
const LostAfter = EndRetry + 30*time.Second

// lostJob reports rec, as of now, failed if its job is lost (LostAfter).
func lostJob(rec *AsyncResult, now time.Time) *AsyncResult {
	if rec.Status != StatusQueued && rec.Status != StatusRunning || rec.Deadline.IsZero() || now.Before(rec.Deadline.Add(LostAfter)) {
		return rec
	}
	lost := *rec
	lost.Status = StatusFailed
	lost.Error = &FrameError{Kind: ErrKindTimeout, Message: "the request did not end by its deadline, and no worker holds it any more"}
	return &lost
}

// ResultKey is the results-bucket key of a job id: hex of its SHA-256, so any
// id makes a valid key and distinct ids never share one.
func ResultKey(id string) string {
	sum := sha256.Sum256([]byte(id))
	return "job_" + hex.EncodeToString(sum[:])
}

// CancelKey is the results-bucket key of a job id's cancellation marker. It
// sits beside the job's record (ResultKey) rather than in it, so recording a
// cancel never moves the record's revision under a worker's claim.
func CancelKey(id string) string {
	sum := sha256.Sum256([]byte(id))
	return "cancel_" + hex.EncodeToString(sum[:])
}

// Results is the results bucket: job records with compare-and-set updates.
type Results struct {
	kv     jetstream.KeyValue
	js     jetstream.JetStream
	stream jetstream.Stream // the bucket's stream, for the last message of a key
	keep   time.Duration    // how long a synchronous job's record outlives the job
	fill   *fillCache       // the bucket's fill, for async submissions
}

// AsyncShare is the share of the results bucket's bytes async records may
// fill: past it, SubmitAsync refuses (ErrStoreFull) and the rest stays for
// synchronous jobs' records and cancel markers, which async results can
// therefore never starve.
const AsyncShare = 0.5

// fillRefresh is how old the bucket's fill may be when an async submission
// is checked against AsyncShare. Within it, a flood overshoots the share by
// at most what it submits in that time.
const fillRefresh = time.Second

// fillCache is the bucket's size, read at most every fillRefresh.
type fillCache struct {
	mu        sync.Mutex
	at        time.Time
	used, max int64
}

// wrote counts n bytes this process added to the bucket since the last
// read, so the next check counts them before the bucket is read again.
func (f *fillCache) wrote(n int64) {
	f.mu.Lock()
	f.used += n
	f.mu.Unlock()
}

// asyncRoom refuses an async record while the bucket holds AsyncShare of
// its bytes or more (ErrStoreFull).
func (r *Results) asyncRoom(ctx context.Context) error {
	f := r.fill
	f.mu.Lock()
	defer f.mu.Unlock()
	if time.Since(f.at) > fillRefresh {
		info, err := r.stream.Info(ctx)
		if err != nil {
			return fmt.Errorf("%w: reading the results bucket's size: %v", ErrUnavailable, err)
		}
		f.at, f.used, f.max = time.Now(), int64(info.State.Bytes), info.Config.MaxBytes
	}
	if f.max > 0 && float64(f.used) >= AsyncShare*float64(f.max) {
		return fmt.Errorf("%w: the results store holds %d of its %d bytes, and async results may fill %.0f%% of it",
			ErrStoreFull, f.used, f.max, 100*AsyncShare)
	}
	return nil
}

// AsyncRecordBytes is what one async record takes in the results bucket
// for sizing: the record, a result of a few hundred tokens, JetStream's
// overhead.
const AsyncRecordBytes = 4 << 10

// AsyncRecordsPerTenant returns the default bound on one tenant's async
// records and how long each lives: a tenth of what AsyncShare of the
// results bucket holds at AsyncRecordBytes a record (at least 100), and
// the bucket's TTL.
func AsyncRecordsPerTenant(ctx context.Context, js jetstream.JetStream) (int, time.Duration, error) {
	st, err := js.Stream(ctx, "KV_"+ResultsBucket)
	if err != nil {
		return 0, 0, fmt.Errorf("queue: bucket %s: %w", ResultsBucket, err)
	}
	cfg := st.CachedInfo().Config
	n := int(AsyncShare * float64(cfg.MaxBytes) / 10 / AsyncRecordBytes)
	ttl := cfg.MaxAge
	if ttl == 0 {
		ttl = 24 * time.Hour // a bucket without a TTL: count a day
	}
	return max(n, 100), ttl, nil
}

// OpenResults opens the results bucket Setup created.
func OpenResults(ctx context.Context, js jetstream.JetStream) (*Results, error) {
	kv, err := js.KeyValue(ctx, ResultsBucket)
	if err != nil {
		return nil, fmt.Errorf("queue: bucket %s: %w", ResultsBucket, err)
	}
	st, err := js.Stream(ctx, "KV_"+ResultsBucket)
	if err != nil {
		return nil, fmt.Errorf("queue: bucket %s: %w", ResultsBucket, err)
	}
	return &Results{kv: kv, js: js, stream: st, keep: SyncRecordKeep, fill: &fillCache{}}, nil
}

// Get returns a job's record and its revision; ErrNotFound when there is none.
func (r *Results) Get(ctx context.Context, id string) (*AsyncResult, uint64, error) {
	e, err := r.kv.Get(ctx, ResultKey(id))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, 0, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("queue: reading record of %s: %w", id, err)
	}
	res, err := decodeRecord(id, e.Value())
	if err != nil {
		return nil, 0, err
	}
	return res, e.Revision(), nil
}

// decodeRecord decodes and checks the record stored under id's key: it must
// name id (a record is rewritten under the key of its ID) and hold a known
// status.
func decodeRecord(id string, b []byte) (*AsyncResult, error) {
	var res AsyncResult
	if err := json.Unmarshal(b, &res); err != nil {
		return nil, fmt.Errorf("%w: record of %s: %v", ErrBadMessage, id, err)
	}
	switch {
	case res.ID != id:
		return nil, fmt.Errorf("%w: record under the key of %s names %q", ErrBadMessage, id, res.ID)
	case res.Status != StatusQueued && res.Status != StatusRunning && res.Status != StatusDone && res.Status != StatusFailed:
		return nil, fmt.Errorf("%w: record of %s has status %q", ErrBadMessage, id, res.Status)
	}
	return &res, nil
}

// Create stores a record that must not exist yet (ErrConflict if it does).
// It lives for the bucket's TTL; a full bucket is ErrStoreFull.
func (r *Results) Create(ctx context.Context, res *AsyncResult) (uint64, error) {
	return r.put(ctx, res, 0, nil)
}

// Update replaces the record at revision rev (ErrConflict if it moved on).
// It lives for the bucket's TTL; a full bucket is ErrStoreFull.
func (r *Results) Update(ctx context.Context, res *AsyncResult, rev uint64) (uint64, error) {
	if rev == 0 {
		return 0, fmt.Errorf("%w: %s at revision 0", ErrConflict, res.ID)
	}
	return r.put(ctx, res, rev, nil)
}

// put writes res at revision rev (0: create) with the TTL its job's kind
// and status call for (recordTTL; job nil: the bucket's).
func (r *Results) put(ctx context.Context, res *AsyncResult, rev uint64, job *Job) (uint64, error) {
	b, err := recordJSON(res)
	if err != nil {
		return 0, err
	}
	n, err := r.write(ctx, ResultKey(res.ID), res.ID, b, rev, recordTTL(job, res.Status, r.keep))
	if rev == 0 && errors.Is(err, ErrConflict) {
		return 0, fmt.Errorf("%w: %s exists", ErrConflict, res.ID)
	}
	return n, err
}

// Cancel records that job id was cancelled. The marker outlives the core-NATS
// cancel signal: a job that was still waiting in the stream, or being
// claimed, when its cancel was published is never run (Claim treats it as
// finished, and workers read the marker again once they listen for the
// signal). Cancelling twice, or an unknown or finished job, is harmless.
func (r *Results) Cancel(ctx context.Context, id string) error {
	_, err := r.js.Publish(ctx, "$KV."+ResultsBucket+"."+CancelKey(id), []byte(time.Now().UTC().Format(time.RFC3339Nano)),
		jetstream.WithMsgTTL(CancelMarkerTTL))
	if err != nil {
		if serr := storeError(err, id, 0); serr != nil {
			err = serr
		}
		return fmt.Errorf("queue: recording cancel of %s: %w", id, err)
	}
	return nil
}

// Cancelled reports whether job id was cancelled (Cancel).
func (r *Results) Cancelled(ctx context.Context, id string) (bool, error) {
	_, err := r.kv.Get(ctx, CancelKey(id))
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("queue: reading cancel marker of %s: %w", id, err)
	}
	return true, nil
}

// Claim says what a worker must do with one delivery of a job.
type Claim int

// Claim outcomes.
const (
	// ClaimRun: run the job; the returned Replier holds the claim.
	ClaimRun Claim = iota + 1
	// ClaimFinished: the job already ended (done or failed) or was cancelled
	// (nobody waits for it), or its record could not be written because the
	// results bucket is full (Claim sent its client an ErrKindUnavailable
	// frame); ack it, send nothing.
	ClaimFinished
	// ClaimLostMidStream: an earlier worker sent frames and then went away;
	// the job cannot be resumed, so end it with an ErrKindInternal error
	// through the returned Replier, and ack.
	ClaimLostMidStream
)

func (c Claim) String() string {
	switch c {
	case ClaimRun:
		return "run"
	case ClaimFinished:
		return "finished"
	case ClaimLostMidStream:
		return "lost-mid-stream"
	}
	return fmt.Sprintf("Claim(%d)", int(c))
}

// Claim applies the redelivery rule to a delivery of job and, unless the job
// already finished, returns a Replier for it:
//
//   - no record, or status queued, or status running with no frame sent yet:
//     the job is (re)run; the record becomes running (Attempts+1);
//   - status done or failed: the job is not run again (ClaimFinished);
//   - otherwise, a cancel marker (Results.Cancel): the client has gone, so
//     the job is not run at all (ClaimFinished) and its record is left as is;
//   - status running and a frame was already published on the reply subject:
//     the client saw part of an answer that cannot be resumed, so the job
//     ends with an internal error (ClaimLostMidStream).
//
// Records change by compare-and-set, so two workers holding deliveries of the
// same job cannot both stream it: the one whose claim is stale gets
// ErrLostClaim from its first frame.
func (r *Results) Claim(ctx context.Context, nc *nats.Conn, job *Job) (*Replier, Claim, error) {
	rp, claim, err := r.claim(ctx, nc, job)
	if errors.Is(err, ErrStoreFull) {
		// Nothing can run without its record: tell the client now rather
		// than let it wait for the idle timeout, and settle the delivery.
		if ferr := FailUnrecorded(nc, job, ErrKindUnavailable, "the results store is full"); ferr != nil {
			return nil, 0, errors.Join(err, ferr)
		}
		return nil, ClaimFinished, nil
	}
	return rp, claim, err
}

func (r *Results) claim(ctx context.Context, nc *nats.Conn, job *Job) (*Replier, Claim, error) {
	for range 8 {
		cur, rev, err := r.Get(ctx, job.ID)
		if err != nil && !errors.Is(err, ErrNotFound) {
			return nil, 0, err
		}
		if cur != nil && (cur.Status == StatusDone || cur.Status == StatusFailed) {
			return nil, ClaimFinished, nil
		}
		cancelled, cerr := r.Cancelled(ctx, job.ID)
		if cerr != nil {
			return nil, 0, cerr
		}
		if cancelled {
			return nil, ClaimFinished, nil
		}
		if cur == nil {
			rec := &AsyncResult{ID: job.ID, Tenant: job.Tenant, Model: job.Model, Status: StatusRunning, Attempts: 1, Deadline: job.Deadline}
			rev, err := r.put(ctx, rec, 0, job)
			if errors.Is(err, ErrConflict) {
				continue
			}
			if err != nil {
				return nil, 0, err
			}
			return newReplier(nc, r, job, rec, rev), ClaimRun, nil
		}
		if cur.Status == StatusRunning && cur.Streamed {
			rp := newReplier(nc, r, job, cur, rev)
			rp.seq = TerminalSeq - 1
			return rp, ClaimLostMidStream, nil
		}
		cur.Status = StatusRunning
		cur.Attempts++
		rev, err = r.put(ctx, cur, rev, job)
		if errors.Is(err, ErrConflict) {
			continue
		}
		if err != nil {
			return nil, 0, err
		}
		return newReplier(nc, r, job, cur, rev), ClaimRun, nil
	}
	return nil, 0, fmt.Errorf("%w: %s: claim kept racing", ErrConflict, job.ID)
}

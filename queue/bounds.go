package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ErrStoreFull reports a results-bucket write refused because the bucket
// reached its size limit. The edge answers it at once (503); a worker that
// cannot record a claim ends the job with an ErrKindUnavailable frame.
var ErrStoreFull = errors.New("queue: results bucket full")

// How long records of synchronous jobs live. A synchronous job's record is
// only the marker that stops it running twice: it lives while the job can
// still be delivered (its deadline) and SyncRecordKeep after it ended, which
// covers a redelivery whose ack was lost (AckWait × MaxDeliver is 90 s with
// the default consumer). Async records live for the bucket's TTL
// (StreamConfig.ResultsTTL); cancel markers for CancelMarkerTTL.
const (
	SyncRecordKeep  = 2 * time.Minute
	CancelMarkerTTL = 15 * time.Minute
)

// recordTTL is the per-message TTL of a record of job in status, kept keep
// after it ended; 0 means the bucket's TTL (async jobs).
func recordTTL(job *Job, status string, keep time.Duration) time.Duration {
	if job == nil || job.Async {
		return 0
	}
	if status == StatusDone || status == StatusFailed {
		return keep
	}
	return max(time.Until(job.Deadline), 0) + keep
}

// WithSyncKeep returns results whose synchronous records live keep after
// their job ended (SyncRecordKeep by default; at least a second, NATS's
// smallest TTL). Keep it above AckWait × MaxDeliver of the consumers.
func (r *Results) WithSyncKeep(keep time.Duration) *Results {
	c := *r
	c.keep = max(keep, time.Second)
	return &c
}

// storeError maps a refused results-bucket publish: a full bucket is
// ErrStoreFull, a moved revision ErrConflict.
func storeError(err error, id string, rev uint64) error {
	var api *jetstream.APIError
	switch {
	case casConflict(err):
		return fmt.Errorf("%w: %s at revision %d", ErrConflict, id, rev)
	case errors.As(err, &api) && api.ErrorCode == jsStoreFailed:
		return fmt.Errorf("%w: %s", ErrStoreFull, api.Description)
	}
	return nil
}

// write stores b under key at revision rev (0: the key must not hold a live
// value) with a per-message TTL (0: the bucket's). A key whose last message
// is a delete, purge or expiry marker counts as absent.
func (r *Results) write(ctx context.Context, key, id string, b []byte, rev uint64, ttl time.Duration) (uint64, error) {
	subj := "$KV." + ResultsBucket + "." + key
	once := func(ctx context.Context, expect uint64) (uint64, error) {
		opts := []jetstream.PublishOpt{jetstream.WithExpectLastSequencePerSubject(expect)}
		if ttl > 0 {
			opts = append(opts, jetstream.WithMsgTTL(max(ttl, time.Second)))
		}
		ack, err := r.js.Publish(ctx, subj, b, opts...)
		if err != nil {
			if serr := storeError(err, id, expect); serr != nil {
				return 0, serr
			}
			return 0, fmt.Errorf("queue: writing record of %s: %w", id, err)
		}
		return ack.Sequence, nil
	}
	publish := func(expect uint64) (uint64, error) { return r.retry(ctx, subj, b, expect, once) }
	n, err := publish(rev)
	if rev != 0 || !errors.Is(err, ErrConflict) || r.stream == nil {
		return n, err
	}
	last, gerr := r.stream.GetLastMsgForSubject(ctx, subj)
	if gerr != nil || !isMarker(last.Header) {
		return 0, err
	}
	return publish(last.Sequence)
}

// recordTryTimeout bounds one try of a record write.
const recordTryTimeout = 2 * time.Second

// retry runs once until it succeeds, or fails for another reason than a
// bucket without a leader (no responders, or a try that timed out: a
// cluster electing a new leader), for up to LeaderWait. A try that timed
// out may have been stored all the same: when the next try then finds the
// subject moved on (ErrConflict), and its last record is this one, the
// write did land.
func (r *Results) retry(ctx context.Context, subj string, b []byte, expect uint64,
	once func(ctx context.Context, expect uint64) (uint64, error)) (uint64, error) {
	deadline := time.Now().Add(LeaderWait)
	unsure := false // an earlier try may have been stored
	for {
		tctx, cancel := context.WithTimeout(ctx, recordTryTimeout)
		n, err := once(tctx, expect)
		timedOut := tctx.Err() != nil && ctx.Err() == nil
		cancel()
		if unsure && errors.Is(err, ErrConflict) && r.stream != nil {
			if last, gerr := r.stream.GetLastMsgForSubject(ctx, subj); gerr == nil && string(last.Data) == string(b) {
				return last.Sequence, nil
			}
		}
		if err == nil || !(timedOut || leaderless(err)) || ctx.Err() != nil || time.Now().After(deadline) {
			return n, err
		}
		unsure = unsure || timedOut
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func isMarker(h nats.Header) bool {
	switch {
	case h == nil:
		return false
	case h.Get("KV-Operation") == "DEL", h.Get("KV-Operation") == "PURGE":
		return true
	}
	return h.Get(jetstream.MarkerReasonHeader) != ""
}

// FailUnrecorded ends a job that could not be recorded (the results bucket
// is full) with an error frame of kind, so its client hears at once instead
// of after the idle timeout. It sends nothing for a job without a reply
// subject.
func FailUnrecorded(nc *nats.Conn, job *Job, kind ErrorKind, msg string) error {
	if job.Reply == "" {
		return nil
	}
	b, err := EncodeFrame(&Frame{Seq: TerminalSeq, Kind: KindError, Error: &FrameError{Kind: kind, Message: msg}})
	if err != nil {
		return err
	}
	return nc.Publish(job.Reply, b)
}

// Load is the traffic a cluster is sized for; SizeFor turns it into stream
// and bucket limits with headroom.
type Load struct {
	SyncPerSecond  float64       // sustained synchronous requests per second
	AsyncPerSecond float64       // sustained async requests per second
	MaxResultBytes int64         // largest async result text kept
	ResultsTTL     time.Duration // how long async results live; default 24h
	RequestTimeout time.Duration // a job's deadline; default 2m
}

// Sizes every record class takes, in bytes, with JetStream's per-message
// overhead (subject, headers, index) rounded up.
const (
	recordBytes = 1 << 10
	markerBytes = 256
	headroom    = 2
)

// SizeFor returns the stream limits for l. The results bucket holds the
// synchronous records alive at once (each for its deadline plus
// SyncRecordKeep), the cancel markers (at most one per synchronous request,
// CancelMarkerTTL) and every async result of the TTL window, twice over,
// plus 1 MiB. The jobs stream holds twice what arrives in MaxQueueWait (a job
// waiting longer has lost its client: the edge's idle timeout), at least
// 1000 jobs. Other limits keep their defaults.
func SizeFor(l Load) (StreamConfig, error) {
	if l.ResultsTTL == 0 {
		l.ResultsTTL = 24 * time.Hour
	}
	if l.RequestTimeout == 0 {
		l.RequestTimeout = 2 * time.Minute
	}
	if l.SyncPerSecond < 0 || l.AsyncPerSecond < 0 || l.MaxResultBytes < 0 || l.ResultsTTL < 0 || l.RequestTimeout < 0 {
		return StreamConfig{}, fmt.Errorf("%w: negative load %+v", ErrConfig, l)
	}
	sync := l.SyncPerSecond * ((l.RequestTimeout+SyncRecordKeep).Seconds()*recordBytes + CancelMarkerTTL.Seconds()*markerBytes)
	async := l.AsyncPerSecond * l.ResultsTTL.Seconds() * float64(recordBytes+l.MaxResultBytes)
	jobs := int64(headroom * (l.SyncPerSecond + l.AsyncPerSecond) * MaxQueueWait.Seconds())
	return StreamConfig{
		ResultsMaxBytes: int64(headroom*(sync+async)) + 1<<20,
		ResultsTTL:      l.ResultsTTL,
		MaxJobs:         max(jobs, 1000),
	}, nil
}

// MaxQueueWait is how long a job may usefully wait for a worker: the edge's
// idle timeout before the first frame.
const MaxQueueWait = DefaultIdleTimeout

// FillThreshold is the fill level at which WatchFill warns.
const FillThreshold = 0.8

// WatchFill checks every stream and bucket Setup created each interval
// until ctx ends and logs a warning while one holds FillThreshold or more
// of its byte or message limit (once per crossing, and an info line when it
// drops back below). The export stream is left out: a log that drops its
// oldest events is meant to be full.
func WatchFill(ctx context.Context, log *slog.Logger, js jetstream.JetStream, interval time.Duration) {
	full := map[string]bool{}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		for _, name := range streamsAll() {
			if name == ExportStream {
				continue
			}
			st, err := js.Stream(ctx, name)
			if err != nil {
				continue
			}
			info := st.CachedInfo()
			level := fillLevel(info)
			switch {
			case level >= FillThreshold && !full[name]:
				full[name] = true
				log.Warn("queue: store filling up", "stream", name, "fill", fmt.Sprintf("%.0f%%", 100*level),
					"bytes", info.State.Bytes, "max_bytes", info.Config.MaxBytes, "msgs", info.State.Msgs, "max_msgs", info.Config.MaxMsgs)
			case level < FillThreshold && full[name]:
				full[name] = false
				log.Info("queue: store below the fill threshold again", "stream", name, "fill", fmt.Sprintf("%.0f%%", 100*level))
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// fillLevel is the larger of a stream's byte and message fill fractions.
func fillLevel(info *jetstream.StreamInfo) float64 {
	var level float64
	if info.Config.MaxBytes > 0 {
		level = float64(info.State.Bytes) / float64(info.Config.MaxBytes)
	}
	if info.Config.MaxMsgs > 0 {
		level = max(level, float64(info.State.Msgs)/float64(info.Config.MaxMsgs))
	}
	return level
}

// recordJSON marshals a record, stamping its update time.
func recordJSON(res *AsyncResult) ([]byte, error) {
	res.Updated = time.Now().UTC()
	return json.Marshal(res)
}

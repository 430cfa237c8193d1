package queue

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Errors the edge side sees.
var (
	ErrQueueFull = errors.New("queue: jobs stream full")
	// ErrTenantQueueFull: the job's tenant has StreamConfig.MaxJobsPerTenant
	// jobs for its model in the stream already; other tenants' jobs are
	// still taken.
	ErrTenantQueueFull = errors.New("queue: the tenant's share of the jobs stream is full")
	ErrDuplicate       = errors.New("queue: duplicate job id")
	ErrGap             = errors.New("queue: reply frames missing or repeated")
	ErrStreamTimeout   = errors.New("queue: no reply frame within the idle timeout")
	// ErrUnavailable: the bus is down or did not acknowledge a job within
	// the publish timeout; the edge answers 503 at once.
	ErrUnavailable = errors.New("queue: NATS unavailable")
	// ErrNoWorker: no live worker serves the job's model (Live).
	ErrNoWorker = errors.New("queue: no live worker serves the model")
	// ErrWorkerLost: the worker running the job stopped sending heartbeats.
	ErrWorkerLost = errors.New("queue: the worker running the job went silent")
)

// Heartbeats on the reply subject (KindHeartbeat): a worker sends one every
// HeartbeatInterval while it holds a job, and an edge that has heard one
// gives up on the worker after HeartbeatTimeout without any frame. Before
// the first frame the job may still be waiting in the stream, and the idle
// timeout (DefaultIdleTimeout) applies. JetStream's AckWait (30 s) is the
// longer backstop: it only redelivers a job whose worker stopped marking it
// in progress, and a redelivered job that had streamed ends in an error.
const (
	HeartbeatInterval = time.Second
	HeartbeatTimeout  = 3 * time.Second
)

// DefaultPublishTimeout bounds how long Submit waits for JetStream to
// acknowledge a job before answering ErrUnavailable.
const DefaultPublishTimeout = 1500 * time.Millisecond

// LeaderWait bounds how long a job's publish is retried while the jobs
// stream has no leader (a JetStream cluster electing one after losing a
// server, a few seconds): the job waits rather than being refused.
const LeaderWait = 8 * time.Second

// leaderless reports a publish that no stream answered: nothing was stored,
// so it may be sent again.
func leaderless(err error) bool {
	return errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrNoStreamResponse)
}

// publishMsg publishes msg, each try bounded by DefaultPublishTimeout, and
// tries again while no stream answers, for up to LeaderWait. retried says
// whether a later try took it (then an ack marked duplicate is the same
// job's earlier try, stored after all).
func publishMsg(ctx context.Context, js jetstream.JetStream, msg *nats.Msg) (*jetstream.PubAck, bool, error) {
	deadline := time.Now().Add(LeaderWait)
	for try := 0; ; try++ {
		pctx, cancel := context.WithTimeout(ctx, DefaultPublishTimeout)
		ack, err := js.PublishMsg(pctx, msg)
		cancel()
		if err == nil || !leaderless(err) || ctx.Err() != nil || time.Now().After(deadline) {
			return ack, try > 0, err
		}
		select {
		case <-ctx.Done():
			return nil, try > 0, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// jsStoreFailed is JetStream's error code for a message the stream refused to
// store; with DiscardNew its description names the limit that was reached.
const jsStoreFailed = 10077

// DefaultIdleTimeout is how long Replies.Next waits for the next frame.
const DefaultIdleTimeout = 30 * time.Second

// maxPendingFrames bounds the frames buffered for one reply subscription;
// beyond it NATS drops frames and Next reports ErrGap.
const maxPendingFrames = 4096

// Client submits jobs and reads their replies (the edge side of the queue).
type Client struct {
	nc   *nats.Conn
	js   jetstream.JetStream
	idle time.Duration
	live Liveness // nil: every model is taken to have workers

	mu  sync.Mutex // guards res
	res *Results   // opened on first async use
}

// NewClient returns a client on a connection and its JetStream context.
func NewClient(nc *nats.Conn, js jetstream.JetStream) *Client {
	return &Client{nc: nc, js: js, idle: DefaultIdleTimeout}
}

// WithIdleTimeout returns a client whose Replies give up after d without a
// frame; d must be positive.
func (c *Client) WithIdleTimeout(d time.Duration) (*Client, error) {
	if d <= 0 {
		return nil, fmt.Errorf("%w: idle timeout %v", ErrConfig, d)
	}
	return &Client{nc: c.nc, js: c.js, idle: d, live: c.live, res: c.results()}, nil
}

// Liveness says whether a model has a live worker (LiveModels.Await) and
// when it has none left (LiveModels.Lost). *LiveModels implements it.
type Liveness interface {
	Await(ctx context.Context, model string, wait bool) error
	Lost(model string) <-chan struct{}
}

// WithLiveness returns a client whose Submit and SubmitAsync refuse a job
// for a model that l says has no live worker (ErrNoWorker), at once; Submit
// waits for a model that may still get its first worker (l's grace period),
// SubmitAsync does not. A submitted job that no worker has taken yet ends
// in ErrNoWorker once its model has no worker left (Replies.Next).
func (c *Client) WithLiveness(l Liveness) *Client {
	return &Client{nc: c.nc, js: c.js, idle: c.idle, live: l, res: c.results()}
}

// ReconnectGrace is how long a job waits for a connection that is
// reconnecting (its server was lost; the client moves to another of the
// cluster's at once) before it is refused: a failover is not an outage.
const ReconnectGrace = time.Second

// ready refuses a job the bus cannot take now: a connection that is not up
// and does not come back within ReconnectGrace (ErrUnavailable) or a model
// without a live worker (ErrNoWorker; with wait, one that may still get its
// first worker is waited for).
func (c *Client) ready(ctx context.Context, job *Job, wait bool) error {
	deadline := time.Now().Add(ReconnectGrace)
	for st := c.nc.Status(); st != nats.CONNECTED; st = c.nc.Status() {
		if st != nats.RECONNECTING && st != nats.CONNECTING || time.Now().After(deadline) {
			return fmt.Errorf("%w: connection %v", ErrUnavailable, st)
		}
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(10 * time.Millisecond):
		}
	}
	if c.live != nil {
		return c.live.Await(ctx, job.Model, wait)
	}
	return nil
}

func (c *Client) results() *Results {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.res
}

func (c *Client) openResults(ctx context.Context) (*Results, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.res != nil {
		return c.res, nil
	}
	res, err := OpenResults(ctx, c.js)
	if err != nil {
		return nil, err
	}
	c.res = res
	return res, nil
}

// Submit subscribes to job.Reply, then publishes the job on its model's and
// tenant's subject (TenantJobSubject) with Nats-Msg-Id = job.ID. A full
// stream is ErrQueueFull, a tenant at its share of it ErrTenantQueueFull; a
// job id seen within the de-duplication window is ErrDuplicate. The caller
// must Close the returned Replies.
func (c *Client) Submit(ctx context.Context, job *Job) (*Replies, error) {
	if err := job.Validate(); err != nil {
		return nil, err
	}
	if job.Reply == "" {
		return nil, fmt.Errorf("%w: job %s has no reply subject", ErrBadMessage, job.ID)
	}
	if err := c.ready(ctx, job, true); err != nil {
		return nil, err
	}
	var lost <-chan struct{}
	if c.live != nil {
		lost = c.live.Lost(job.Model)
	}
	sub, err := c.nc.SubscribeSync(job.Reply)
	if err != nil {
		return nil, fmt.Errorf("queue: subscribing to replies of %s: %w", job.ID, err)
	}
	if err := sub.SetPendingLimits(maxPendingFrames, 64<<20); err != nil {
		sub.Unsubscribe()
		return nil, err
	}
	if err := c.publish(ctx, job); err != nil {
		sub.Unsubscribe()
		return nil, err
	}
	return &Replies{sub: sub, idle: c.idle, beat: HeartbeatTimeout, want: 1, model: job.Model, lost: lost}, nil
}

func (c *Client) publish(ctx context.Context, job *Job) error {
	b, err := EncodeJob(job)
	if err != nil {
		return err
	}
	msg := nats.NewMsg(job.Subject())
	msg.Data = b
	msg.Header.Set(jetstream.MsgIDHeader, job.ID)
	InjectTrace(ctx, msg.Header)
	ack, retried, err := publishMsg(ctx, c.js, msg)
	if err != nil && ctx.Err() == nil && (errors.Is(err, context.DeadlineExceeded) || leaderless(err)) {
		return fmt.Errorf("%w: publishing job %s: %v", ErrUnavailable, job.ID, err)
	}
	if err != nil {
		var api *jetstream.APIError
		if errors.As(err, &api) && api.ErrorCode == jsStoreFailed && strings.Contains(api.Description, "maximum") {
			if strings.Contains(api.Description, "per subject") {
				return fmt.Errorf("%w: tenant %s, model %s: %s", ErrTenantQueueFull, job.Tenant, job.Model, api.Description)
			}
			return fmt.Errorf("%w: %s", ErrQueueFull, api.Description)
		}
		return fmt.Errorf("queue: publishing job %s: %w", job.ID, err)
	}
	if ack.Duplicate && !retried {
		return fmt.Errorf("%w: %s", ErrDuplicate, job.ID)
	}
	// The job is stored: ring its tenant's doorbell so that an idle worker
	// takes it now (TenantQueues). A lost bell costs at most TenantRefresh.
	_ = c.nc.Publish(job.ReadySubject(), nil)
	return nil
}

// Cancel says that request id's client has gone. It first records the cancel
// in the results bucket (Results.Cancel), so that a job still waiting in the
// stream, or being claimed, is never run, and then tells the worker running
// it, if any, which ends it with an aborted frame. Recording waits until ctx
// ends (the caller bounds it; a client that is gone has a cancelled request
// context, so the caller detaches from it first); the signal is published
// even when recording fails. Cancelling an unknown or finished request does
// nothing harmful.
func (c *Client) Cancel(ctx context.Context, id string) error {
	// The marker goes first: a worker subscribes to the signal and then reads
	// the marker, so it either sees the marker or receives the signal.
	res, rerr := c.openResults(ctx)
	if rerr == nil {
		rerr = res.Cancel(ctx, id)
	}
	if err := c.nc.Publish(CancelSubject(id), nil); err != nil {
		return errors.Join(rerr, fmt.Errorf("queue: cancelling %s: %w", id, err))
	}
	return rerr
}

// SubmitAsync records the job as queued in the results bucket, then publishes
// it with job.Async set. While the bucket holds AsyncShare of its bytes it
// refuses (ErrStoreFull), keeping the rest for synchronous jobs. Submitting an id again publishes it again only while
// it is still queued (the stream then drops the duplicate); otherwise it does
// nothing.
func (c *Client) SubmitAsync(ctx context.Context, job *Job) error {
	job.Async = true
	if err := job.Validate(); err != nil {
		return err
	}
	if err := c.ready(ctx, job, false); err != nil {
		return err
	}
	res, err := c.openResults(ctx)
	if err != nil {
		return err
	}
	if err := res.asyncRoom(ctx); err != nil {
		return err
	}
	_, err = res.Create(ctx, &AsyncResult{ID: job.ID, Tenant: job.Tenant, Model: job.Model, Status: StatusQueued, Deadline: job.Deadline})
	if err == nil {
		res.fill.wrote(recordBytes)
	}
	if errors.Is(err, ErrConflict) {
		cur, _, gerr := res.Get(ctx, job.ID)
		if gerr != nil {
			return gerr
		}
		if cur.Status != StatusQueued {
			return nil
		}
	} else if err != nil {
		return err
	}
	err = c.publish(ctx, job)
	if errors.Is(err, ErrDuplicate) {
		return nil
	}
	if err != nil {
		// Nothing will run it: forget the record so a retry starts afresh.
		if derr := res.kv.Delete(ctx, ResultKey(job.ID)); derr != nil {
			return errors.Join(err, derr)
		}
		return err
	}
	return nil
}

// AsyncStatus returns the record of an async job; ErrNotFound when unknown.
// A job still queued or running LostAfter past its deadline is reported
// failed (ErrKindTimeout): it is lost. The caller must check the record's
// Tenant against its principal.
func (c *Client) AsyncStatus(ctx context.Context, id string) (*AsyncResult, error) {
	res, err := c.openResults(ctx)
	if err != nil {
		return nil, err
	}
	r, _, err := res.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	return lostJob(r, time.Now()), nil
}

// Replies reads one job's reply frames in seq order. It is used by one
// goroutine at a time.
type Replies struct {
	sub   *nats.Subscription
	idle  time.Duration
	beat  time.Duration   // the wait once the worker has sent a heartbeat
	alive bool            // a heartbeat came: a worker holds the job
	want  uint64          // next seq expected
	err   error           // sticky: set once the stream ended, io.EOF after the last frame
	model string          // the job's model
	lost  <-chan struct{} // closed once the model has no worker (Liveness.Lost); nil: never
}

// Next returns the next frame. After the final or error frame it returns
// io.EOF. A missing or repeated seq is ErrGap (an error frame beyond the
// expected seq is still returned: the stream ends in an error either way);
// no frame within the idle timeout is ErrStreamTimeout, and the job's model
// losing its last worker before one sent a frame is ErrNoWorker (with a
// Liveness: Client.WithLiveness); once a heartbeat came, no frame within
// HeartbeatTimeout is ErrWorkerLost; ctx ending returns ctx's error.
// Heartbeats are consumed here, never returned. Every error is final.
func (r *Replies) Next(ctx context.Context) (*Frame, error) {
	if r.err != nil {
		return nil, r.err
	}
	for {
		f, err := r.next(ctx)
		if err != nil {
			return nil, r.fail(err)
		}
		if f.Kind == KindHeartbeat {
			r.alive = true
			continue
		}
		return r.check(f)
	}
}

func (r *Replies) next(ctx context.Context) (*Frame, error) {
	if r.alive {
		return r.read(ctx, r.beat, ErrWorkerLost, nil)
	}
	for {
		select {
		case <-r.lost:
			// No worker serves the model any more. Frames already here
			// mean one took the job before it left: it finishes it or its
			// heartbeats stop.
			if n, _, err := r.sub.Pending(); err == nil && n > 0 {
				return r.read(ctx, r.idle, ErrStreamTimeout, nil)
			}
			return nil, fmt.Errorf("%w: %s: its last worker left before taking the job", ErrNoWorker, r.model)
		default:
		}
		f, err := r.read(ctx, r.idle, ErrStreamTimeout, r.lost)
		if err != errLostWake {
			return f, err
		}
	}
}

// errLostWake is read's answer when stop closed first.
var errLostWake = errors.New("queue: the model lost its workers")

// read waits up to wait for the next frame: none is lost's error, and stop
// closing first (nil: never) is errLostWake.
func (r *Replies) read(ctx context.Context, wait time.Duration, lost error, stop <-chan struct{}) (*Frame, error) {
	sctx, scancel := context.WithCancelCause(ctx)
	defer scancel(nil)
	if stop != nil {
		go func() {
			select {
			case <-stop:
				scancel(errLostWake)
			case <-sctx.Done():
			}
		}()
	}
	wctx, cancel := context.WithTimeout(sctx, wait)
	defer cancel()
	msg, err := r.sub.NextMsgWithContext(wctx)
	if err != nil {
		switch {
		case ctx.Err() != nil:
			err = ctx.Err()
		case context.Cause(sctx) == errLostWake:
			err = errLostWake
		case wctx.Err() != nil:
			err = fmt.Errorf("%w: no frame for %v", lost, wait)
		default:
			err = fmt.Errorf("queue: reading reply: %w", err)
		}
		return nil, err
	}
	return DecodeFrame(msg.Data)
}

func (r *Replies) check(f *Frame) (*Frame, error) {
	switch {
	case f.Seq == r.want:
	case f.Seq > r.want && f.Kind == KindError:
	default:
		return nil, r.fail(fmt.Errorf("%w: got seq %d, want %d", ErrGap, f.Seq, r.want))
	}
	r.want = f.Seq + 1
	if f.Kind != KindToken {
		r.fail(io.EOF)
	}
	return f, nil
}

func (r *Replies) fail(err error) error {
	r.err = err
	r.sub.Unsubscribe()
	return err
}

// Close stops the subscription. It is idempotent.
func (r *Replies) Close() {
	if r.err == nil {
		r.err = io.EOF
	}
	r.sub.Unsubscribe()
}

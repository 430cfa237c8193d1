package handoff

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"time"

	"github.com/nats-io/nats.go"
)

// Defaults for zero ReceiverConfig fields.
const (
	DefaultWindow         = 4
	DefaultRequestTimeout = 5 * time.Second
	DefaultMaxPageBytes   = 64 << 20
	maxWindow             = 64
	maxPageBytes          = 1<<31 - 1 // offsets travel as uint32
)

// ReceiverConfig configures the decode side of a transfer. Zero values take
// the defaults noted.
type ReceiverConfig struct {
	// Window is the most chunk requests outstanding (or answered ahead of the
	// page being assembled) at once; default DefaultWindow, at most 64.
	Window int
	// MaxChunk is the most bytes asked for in one request; default
	// DefaultMaxChunk. The sender may answer with less; Fetch then asks for
	// the rest.
	MaxChunk int
	// RequestTimeout bounds the wait for each answer; default
	// DefaultRequestTimeout. Past it the sender is taken for gone.
	RequestTimeout time.Duration
	// MaxPageBytes is the largest page Fetch buffers; default
	// DefaultMaxPageBytes, at most 2 GiB less one byte.
	MaxPageBytes int
}

// Validate fills zero fields with their defaults and reports the first bad
// one, wrapping ErrConfig. What it configures calls it; callers may call it
// first to fail early.
func (c *ReceiverConfig) Validate() error {
	if c.Window == 0 {
		c.Window = DefaultWindow
	}
	if c.MaxChunk == 0 {
		c.MaxChunk = DefaultMaxChunk
	}
	if c.RequestTimeout == 0 {
		c.RequestTimeout = DefaultRequestTimeout
	}
	if c.MaxPageBytes == 0 {
		c.MaxPageBytes = DefaultMaxPageBytes
	}
	switch {
	case c.Window < 1 || c.Window > maxWindow:
		return fmt.Errorf("%w: Window %d out of range [1, %d]", ErrConfig, c.Window, maxWindow)
	case c.MaxChunk < 1 || c.MaxChunk > maxWireChunk:
		return fmt.Errorf("%w: MaxChunk %d out of range [1, %d]", ErrConfig, c.MaxChunk, maxWireChunk)
	case c.RequestTimeout < 0:
		return fmt.Errorf("%w: RequestTimeout %v", ErrConfig, c.RequestTimeout)
	case c.MaxPageBytes < 1 || c.MaxPageBytes > maxPageBytes:
		return fmt.Errorf("%w: MaxPageBytes %d out of range [1, %d]", ErrConfig, c.MaxPageBytes, maxPageBytes)
	}
	return nil
}

// span is a byte range of one page to ask for.
type span struct {
	page, offset, n int
}

// inflight is a request awaiting its answer.
type inflight struct {
	span
	sent time.Time
}

// fetch is the state of one Fetch call; it is used by one goroutine.
type fetch struct {
	nc    *nats.Conn
	m     *Manifest
	cfg   ReceiverConfig
	inbox string
	sub   *nats.Subscription

	cur   int    // page being assembled
	buf   []byte // its bytes; reused from page to page
	got   int    // bytes of it received
	next  span   // cursor: the next bytes never asked for (n unused)
	rest  []span // remainders of short answers, asked for before the cursor moves
	wait  []inflight
	ahead map[span][]byte // answers for pages after cur, keyed with n = 0
}

// Fetch pulls the pages m describes from its sender, in order, and hands each
// one to sink only after its size and CRC-64 match the manifest; page is
// valid only during the call (its buffer is reused), so sink copies or
// imports it. Verifying m against the job (Manifest.Verify) is the caller's
// job and must come first.
//
// At most cfg.Window requests are outstanding, and at most one page and
// Window chunks are buffered. Fetch returns nil after every page passed and
// it told the sender it is done. Otherwise it tells the sender it gave up
// and returns: ErrChecksum, ErrShort or ErrManifest for data that does not
// match, ErrTransfer when an answer does not come within cfg.RequestTimeout
// or the sender answers with an error, ctx's error when ctx ends, or sink's
// error. It never retries a request.
func Fetch(ctx context.Context, nc *nats.Conn, m *Manifest, cfg ReceiverConfig, sink func(i int, page []byte) error) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	if err := m.check(cfg.MaxPageBytes); err != nil {
		return err
	}
	f := &fetch{nc: nc, m: m, cfg: cfg, inbox: nc.NewInbox(), ahead: make(map[span][]byte)}
	sub, err := nc.SubscribeSync(f.inbox)
	if err != nil {
		return fmt.Errorf("%w: transfer %s: subscribe: %v", ErrTransfer, m.TransferID, err)
	}
	f.sub = sub
	defer func() { _ = sub.Unsubscribe() }()
	// Answers beyond the window are never asked for; a slow-consumer drop
	// of strays surfaces as a timeout, not as unbounded memory.
	limit := 2*cfg.Window + 2
	_ = sub.SetPendingLimits(limit, limit*(headerLen+maxWireChunk))

	if err := f.run(ctx, sink); err != nil {
		f.send(request{op: opAbort, reason: err.Error()})
		return err
	}
	f.send(request{op: opDone})
	return nil
}

func (f *fetch) run(ctx context.Context, sink func(int, []byte) error) error {
	f.startPage(0)
	for f.cur < len(f.m.Pages) {
		if err := f.ask(); err != nil {
			return err
		}
		c, err := f.receive(ctx)
		if err != nil {
			return err
		}
		if err := f.accept(c); err != nil {
			return err
		}
		for f.cur < len(f.m.Pages) && f.got == len(f.buf) {
			if err := f.finishPage(sink); err != nil {
				return err
			}
		}
	}
	return nil
}

// ask sends requests until the window is full or everything is asked for.
// Answers held for later pages count against the window, which bounds them;
// but when all of it is held that way and nothing is outstanding, the rest of
// the current page is asked for anyway, or the transfer could not progress.
// That answer fills the page buffer, not the window.
func (f *fetch) ask() error {
	for {
		full := len(f.wait)+len(f.ahead) >= f.cfg.Window
		if full && len(f.wait) > 0 {
			return nil
		}
		s, ok := f.pick(full)
		if !ok {
			if len(f.wait) == 0 {
				return fmt.Errorf("%w: transfer %s: page %d incomplete with nothing left to ask for",
					ErrTransfer, f.m.TransferID, f.cur)
			}
			return nil
		}
		err := f.nc.PublishMsg(&nats.Msg{
			Subject: Subject(f.m.TransferID),
			Reply:   f.inbox,
			Data:    request{op: opPull, page: uint32(s.page), offset: uint32(s.offset), max: uint32(s.n)}.encode(),
		})
		if err != nil {
			return fmt.Errorf("%w: transfer %s: page %d: request: %v", ErrTransfer, f.m.TransferID, s.page, err)
		}
		f.wait = append(f.wait, inflight{s, time.Now()})
	}
}

// pick takes the next span to ask for: the earliest remainder of a short
// answer, else the next bytes never asked for. With onlyCur it takes only a
// span of the current page.
func (f *fetch) pick(onlyCur bool) (span, bool) {
	if len(f.rest) > 0 {
		k := 0
		for i, r := range f.rest {
			if r.page < f.rest[k].page || r.page == f.rest[k].page && r.offset < f.rest[k].offset {
				k = i
			}
		}
		s := f.rest[k]
		if onlyCur && s.page != f.cur {
			return span{}, false
		}
		f.rest = append(f.rest[:k], f.rest[k+1:]...)
		return s, true
	}
	if f.next.page >= len(f.m.Pages) || onlyCur && f.next.page != f.cur {
		return span{}, false
	}
	size := f.m.Pages[f.next.page].Bytes
	s := span{f.next.page, f.next.offset, min(f.cfg.MaxChunk, size-f.next.offset)}
	f.next.offset += s.n
	if f.next.offset == size {
		f.next = span{page: f.next.page + 1}
	}
	return s, true
}

// receive waits for the next answer, up to the oldest request's deadline.
func (f *fetch) receive(ctx context.Context) (chunk, error) {
	oldest := f.wait[0]
	for _, w := range f.wait[1:] {
		if w.sent.Before(oldest.sent) {
			oldest = w
		}
	}
	wctx, cancel := context.WithDeadline(ctx, oldest.sent.Add(f.cfg.RequestTimeout))
	defer cancel()
	msg, err := f.sub.NextMsgWithContext(wctx)
	switch {
	case err == nil:
	case ctx.Err() != nil:
		return chunk{}, fmt.Errorf("handoff: transfer %s: %w", f.m.TransferID, ctx.Err())
	case errors.Is(err, context.DeadlineExceeded):
		return chunk{}, fmt.Errorf("%w: transfer %s: page %d offset %d: no answer within %v; the sender is gone",
			ErrTransfer, f.m.TransferID, oldest.page, oldest.offset, f.cfg.RequestTimeout)
	default:
		return chunk{}, fmt.Errorf("%w: transfer %s: %v", ErrTransfer, f.m.TransferID, err)
	}
	if len(msg.Data) == 0 && msg.Header.Get("Status") == "503" {
		return chunk{}, fmt.Errorf("%w: transfer %s: no sender is serving it", ErrTransfer, f.m.TransferID)
	}
	c, err := decodeChunk(msg.Data)
	if err != nil {
		return chunk{}, fmt.Errorf("transfer %s: %w", f.m.TransferID, err)
	}
	return c, nil
}

// accept checks an answer against the manifest and the outstanding requests
// and stores its bytes.
func (f *fetch) accept(c chunk) error {
	id := f.m.TransferID
	if n := int(c.pages); n != len(f.m.Pages) {
		if n < len(f.m.Pages) {
			return fmt.Errorf("%w: transfer %s: sender holds %d pages, manifest names %d", ErrShort, id, n, len(f.m.Pages))
		}
		return fmt.Errorf("%w: transfer %s: sender holds %d pages, manifest names %d", ErrManifest, id, n, len(f.m.Pages))
	}
	if c.kind == kindError {
		return fmt.Errorf("%w: transfer %s: sender: %s", ErrTransfer, id, clip(string(c.body)))
	}
	k := -1
	for i, w := range f.wait {
		if w.page == int(c.page) && w.offset == int(c.offset) {
			k = i
			break
		}
	}
	if k < 0 {
		return fmt.Errorf("%w: transfer %s: page %d offset %d: answer to no request", ErrTransfer, id, c.page, c.offset)
	}
	w := f.wait[k]
	f.wait = append(f.wait[:k], f.wait[k+1:]...)
	size := f.m.Pages[w.page].Bytes
	switch {
	case int(c.total) < size:
		return fmt.Errorf("%w: transfer %s: page %d: sender holds %d bytes, manifest says %d", ErrShort, id, w.page, c.total, size)
	case int(c.total) > size:
		return fmt.Errorf("%w: transfer %s: page %d: sender holds %d bytes, manifest says %d", ErrManifest, id, w.page, c.total, size)
	case len(c.body) == 0:
		return fmt.Errorf("%w: transfer %s: page %d offset %d: empty answer", ErrShort, id, w.page, w.offset)
	case len(c.body) > w.n:
		return fmt.Errorf("%w: transfer %s: page %d offset %d: %d bytes, asked for %d", ErrTransfer, id, w.page, w.offset, len(c.body), w.n)
	}
	if sum := crc32.Checksum(c.body, crc32cTable); sum != c.crc {
		return fmt.Errorf("%w: transfer %s: page %d offset %d: chunk CRC-32C %08x, announced %08x",
			ErrChecksum, id, w.page, w.offset, sum, c.crc)
	}
	if len(c.body) < w.n {
		f.rest = append(f.rest, span{w.page, w.offset + len(c.body), w.n - len(c.body)})
	}
	if w.page == f.cur {
		f.got += copy(f.buf[w.offset:], c.body)
		return nil
	}
	f.ahead[span{page: w.page, offset: w.offset}] = c.body
	return nil
}

// finishPage verifies the assembled page, hands it to sink and starts the
// next one.
func (f *fetch) finishPage(sink func(int, []byte) error) error {
	want := f.m.Pages[f.cur].Checksum
	if sum := PageChecksum(f.buf); sum != want {
		return fmt.Errorf("%w: transfer %s: page %d: CRC-64 %016x, manifest says %016x",
			ErrChecksum, f.m.TransferID, f.cur, sum, want)
	}
	if err := sink(f.cur, f.buf); err != nil {
		return fmt.Errorf("handoff: transfer %s: page %d: sink: %w", f.m.TransferID, f.cur, err)
	}
	f.startPage(f.cur + 1)
	return nil
}

// startPage readies the buffer for page i and moves in its answers that
// arrived early.
func (f *fetch) startPage(i int) {
	f.cur, f.got = i, 0
	if i >= len(f.m.Pages) {
		return
	}
	size := f.m.Pages[i].Bytes
	if cap(f.buf) < size {
		f.buf = make([]byte, size)
	}
	f.buf = f.buf[:size]
	for k, body := range f.ahead {
		if k.page == i {
			f.got += copy(f.buf[k.offset:], body)
			delete(f.ahead, k)
		}
	}
}

// send tells the sender the transfer is over, best effort: if it never hears,
// its idle timeout frees the pages anyway.
func (f *fetch) send(r request) {
	if len(r.reason) > maxReason {
		r.reason = r.reason[:maxReason]
	}
	if f.nc.PublishMsg(&nats.Msg{Subject: Subject(f.m.TransferID), Data: r.encode()}) == nil {
		_ = f.nc.FlushTimeout(f.cfg.RequestTimeout)
	}
}

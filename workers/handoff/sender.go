package handoff

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// Defaults for zero SenderConfig fields.
const (
	DefaultMaxChunk    = 256 << 10
	DefaultIdleTimeout = 10 * time.Second
)

// maxWireChunk keeps a chunk and its header under NATS's default 1 MiB payload.
const maxWireChunk = 1<<20 - 4<<10

// SenderConfig configures the prefill side of a transfer. Zero values take the
// defaults noted.
type SenderConfig struct {
	// MaxChunk is the most page bytes one answer carries; default
	// DefaultMaxChunk, at most 1 MiB less 4 KiB.
	MaxChunk int
	// StartTimeout bounds the wait for the receiver's first request; default
	// IdleTimeout. The decode worker may take a while to pick up the job.
	StartTimeout time.Duration
	// IdleTimeout bounds the wait for each later request; default
	// DefaultIdleTimeout.
	IdleTimeout time.Duration

	// corrupt, when set (tests only), may alter each chunk's bytes after its
	// CRC is computed, as a fault in flight would.
	corrupt func(page int, chunk []byte)
	// served, when set (tests only), is called after each data answer.
	served func(n int)
}

// Validate fills zero fields with their defaults and reports the first bad
// one, wrapping ErrConfig. What it configures calls it; callers may call it
// first to fail early.
func (c *SenderConfig) Validate() error {
	if c.MaxChunk == 0 {
		c.MaxChunk = DefaultMaxChunk
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = DefaultIdleTimeout
	}
	if c.StartTimeout == 0 {
		c.StartTimeout = c.IdleTimeout
	}
	switch {
	case c.MaxChunk < 1 || c.MaxChunk > maxWireChunk:
		return fmt.Errorf("%w: MaxChunk %d out of range [1, %d]", ErrConfig, c.MaxChunk, maxWireChunk)
	case c.IdleTimeout < 0:
		return fmt.Errorf("%w: IdleTimeout %v", ErrConfig, c.IdleTimeout)
	case c.StartTimeout < 0:
		return fmt.Errorf("%w: StartTimeout %v", ErrConfig, c.StartTimeout)
	}
	return nil
}

// Sender offers one transfer's pages to one receiver. Serve answers its
// requests; Close releases the subscription. A Sender is used by one
// goroutine.
type Sender struct {
	nc    *nats.Conn
	m     *Manifest
	pages [][]byte
	cfg   SenderConfig
	sub   *nats.Subscription
	buf   []byte // answer being built; reused, NATS copies on publish
	once  sync.Once
}

// NewSender checks that pages are the ones m describes (count and sizes) and
// subscribes to Subject(m.TransferID). When it returns, the subscription is
// registered with the server, so the manifest may be shipped to a decode
// worker. The caller must call Serve or Close. pages must stay unchanged until
// then; the caller frees them after.
func NewSender(nc *nats.Conn, m *Manifest, pages [][]byte, cfg SenderConfig) (*Sender, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := m.check(maxPageBytes); err != nil {
		return nil, err
	}
	if len(pages) != len(m.Pages) {
		return nil, fmt.Errorf("%w: transfer %s: manifest names %d pages, sender holds %d",
			ErrManifest, m.TransferID, len(m.Pages), len(pages))
	}
	for i, p := range pages {
		if len(p) != m.Pages[i].Bytes {
			return nil, fmt.Errorf("%w: transfer %s: page %d is %d bytes, manifest says %d",
				ErrManifest, m.TransferID, i, len(p), m.Pages[i].Bytes)
		}
	}
	sub, err := nc.SubscribeSync(Subject(m.TransferID))
	if err != nil {
		return nil, fmt.Errorf("%w: transfer %s: subscribe: %v", ErrTransfer, m.TransferID, err)
	}
	if err := nc.Flush(); err != nil {
		_ = sub.Unsubscribe()
		return nil, fmt.Errorf("%w: transfer %s: flush: %v", ErrTransfer, m.TransferID, err)
	}
	return &Sender{nc: nc, m: m, pages: pages, cfg: cfg, sub: sub,
		buf: make([]byte, 0, headerLen+cfg.MaxChunk)}, nil
}

// Serve offers pages as NewSender does and answers the receiver until it is
// done. See Sender.Serve.
func Serve(ctx context.Context, nc *nats.Conn, m *Manifest, pages [][]byte, cfg SenderConfig) error {
	s, err := NewSender(nc, m, pages, cfg)
	if err != nil {
		return err
	}
	return s.Serve(ctx)
}

// Serve answers the receiver's requests, one at a time, until it says done
// (nil), says it gave up (ErrAborted), stops asking for longer than the start
// or idle timeout (ErrAbandoned), or ctx ends (ctx's error). It closes the
// Sender before it returns; whatever it returns, the caller may free the pages.
func (s *Sender) Serve(ctx context.Context) error {
	defer s.Close()
	wait := s.cfg.StartTimeout
	served := 0
	for {
		msg, err := s.next(ctx, wait)
		if err != nil {
			return err
		}
		wait = s.cfg.IdleTimeout
		req, err := decodeRequest(msg.Data)
		if err != nil {
			s.answerError(msg.Reply, err.Error())
			continue
		}
		switch req.op {
		case opDone:
			return nil
		case opAbort:
			return fmt.Errorf("%w: transfer %s: %s", ErrAborted, s.m.TransferID, req.reason)
		}
		if err := s.answer(msg.Reply, req); err != nil {
			return err
		}
		served++
		if s.cfg.served != nil {
			s.cfg.served(served)
		}
	}
}

// Close releases the subscription. It is idempotent.
func (s *Sender) Close() error {
	var err error
	s.once.Do(func() { err = s.sub.Unsubscribe() })
	if errors.Is(err, nats.ErrConnectionClosed) || errors.Is(err, nats.ErrBadSubscription) {
		err = nil
	}
	return err
}

// next waits up to wait for the next request.
func (s *Sender) next(ctx context.Context, wait time.Duration) (*nats.Msg, error) {
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	msg, err := s.sub.NextMsgWithContext(wctx)
	if err == nil {
		return msg, nil
	}
	if ctx.Err() != nil {
		return nil, fmt.Errorf("handoff: transfer %s: %w", s.m.TransferID, ctx.Err())
	}
	if wctx.Err() != nil {
		return nil, fmt.Errorf("%w: transfer %s: no request for %v", ErrAbandoned, s.m.TransferID, wait)
	}
	return nil, fmt.Errorf("%w: transfer %s: %v", ErrTransfer, s.m.TransferID, err)
}

// answer sends the chunk req asks for, or an error answer if it names a page
// or offset the sender does not have. Only a failed publish is an error.
func (s *Sender) answer(reply string, req request) error {
	if reply == "" {
		return nil // nowhere to answer; a stray message
	}
	if int(req.page) >= len(s.pages) {
		s.answerError(reply, fmt.Sprintf("page %d out of range: %d pages", req.page, len(s.pages)))
		return nil
	}
	page := s.pages[req.page]
	if int(req.offset) >= len(page) {
		s.answerError(reply, fmt.Sprintf("page %d offset %d out of range: %d bytes", req.page, req.offset, len(page)))
		return nil
	}
	n := min(int(req.max), s.cfg.MaxChunk, len(page)-int(req.offset))
	body := page[req.offset : int(req.offset)+n]
	s.buf = chunk{kind: kindData, pages: uint32(len(s.pages)), page: req.page, offset: req.offset, total: uint32(len(page)), body: body}.append(s.buf[:0])
	if s.cfg.corrupt != nil {
		s.cfg.corrupt(int(req.page), s.buf[headerLen:])
	}
	if err := s.nc.Publish(reply, s.buf); err != nil {
		return fmt.Errorf("%w: transfer %s: page %d: publish: %v", ErrTransfer, s.m.TransferID, req.page, err)
	}
	return nil
}

func (s *Sender) answerError(reply, msg string) {
	if reply == "" {
		return
	}
	if len(msg) > maxReason {
		msg = msg[:maxReason]
	}
	s.buf = chunk{kind: kindError, pages: uint32(len(s.pages)), body: []byte(msg)}.append(s.buf[:0])
	_ = s.nc.Publish(reply, s.buf) // best effort: the receiver times out otherwise
}

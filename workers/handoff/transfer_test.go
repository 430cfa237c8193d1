package handoff

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/bulkhead-ai/bulkhead/queue/queuetest"
)

// serving is a Sender running in its own goroutine.
type serving struct {
	cancel context.CancelFunc
	done   chan struct{}
	err    error
}

// serve starts s.Serve; cleanup cancels it and waits for it.
func serve(t *testing.T, s *Sender) *serving {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	sv := &serving{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(sv.done)
		sv.err = s.Serve(ctx)
	}()
	t.Cleanup(func() { cancel(); <-sv.done })
	return sv
}

// wait returns Serve's result, failing the test if it takes longer than within.
func (sv *serving) wait(t *testing.T, within time.Duration) error {
	t.Helper()
	select {
	case <-sv.done:
		return sv.err
	case <-time.After(within):
		t.Fatalf("Serve still running after %v", within)
		return nil
	}
}

// collector is a sink that keeps a copy of every page it is given.
type collector struct {
	mu    sync.Mutex
	index []int
	pages [][]byte
}

func (c *collector) sink(i int, page []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.index = append(c.index, i)
	c.pages = append(c.pages, bytes.Clone(page))
	return nil
}

func (c *collector) seen() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.index)
}

func TestTransferRoundTrip(t *testing.T) {
	url := queuetest.Server(t).ClientURL()
	for _, tc := range []struct {
		name   string
		layout Layout
		tokens int
		send   SenderConfig
		recv   ReceiverConfig
	}{
		{"smollm2 37 tokens, defaults", smolLayout, 37, SenderConfig{}, ReceiverConfig{}},
		{"one token", smolLayout, 1, SenderConfig{}, ReceiverConfig{}},
		{"whole pages", smolLayout, 64, SenderConfig{}, ReceiverConfig{}},
		{"window of one", smolLayout, 40, SenderConfig{}, ReceiverConfig{Window: 1}},
		{"chunks that do not divide pages", smolLayout, 50, SenderConfig{}, ReceiverConfig{MaxChunk: 50_000, Window: 8}},
		{"sender answers less than asked", smolLayout, 33, SenderConfig{MaxChunk: 100_000}, ReceiverConfig{}},
		{"tiny chunks", tinyLayout, 11, SenderConfig{MaxChunk: 7}, ReceiverConfig{MaxChunk: 5, Window: 3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fx := newFixture(t, 10, tc.layout, tc.tokens)
			m := fx.manifest(t)
			s, err := NewSender(queuetest.Conn(t, url), m, fx.pages, tc.send)
			if err != nil {
				t.Fatal(err)
			}
			sv := serve(t, s)
			var got collector
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if err := Fetch(ctx, queuetest.Conn(t, url), m, tc.recv, got.sink); err != nil {
				t.Fatalf("Fetch: %v", err)
			}
			if err := sv.wait(t, 5*time.Second); err != nil {
				t.Fatalf("Serve: %v", err)
			}
			if len(got.pages) != len(fx.pages) {
				t.Fatalf("sink saw %d pages, want %d", len(got.pages), len(fx.pages))
			}
			for i := range fx.pages {
				if got.index[i] != i || !bytes.Equal(got.pages[i], fx.pages[i]) {
					t.Fatalf("sink call %d: page %d differs from what was sent", i, got.index[i])
				}
			}
		})
	}
}

func TestTransferCorruption(t *testing.T) {
	url := queuetest.Server(t).ClientURL()
	for _, tc := range []struct {
		name    string
		cfg     SenderConfig
		pages   func([][]byte) [][]byte // what the sender holds instead of the manifest's pages
		err     error
		errSub  string
		sinkSaw []int
	}{
		{
			name: "chunk flipped in flight",
			cfg: SenderConfig{MaxChunk: 64 << 10, corrupt: func(page int, chunk []byte) {
				if page == 1 {
					chunk[len(chunk)/2] ^= 0x40
				}
			}},
			err: ErrChecksum, errSub: "page 1 offset 0: chunk CRC-32C", sinkSaw: []int{0},
		},
		{
			name: "sender holds other bytes of the same size",
			pages: func(p [][]byte) [][]byte {
				q := slices.Clone(p)
				q[2] = bytes.Clone(p[2])
				q[2][100] ^= 1
				return q
			},
			err: ErrChecksum, errSub: "page 2: CRC-64", sinkSaw: []int{0, 1},
		},
		{
			name:  "sender holds fewer pages than the manifest names",
			pages: func(p [][]byte) [][]byte { return p[:2] },
			err:   ErrShort, errSub: "sender holds 2 pages, manifest names 3",
		},
		{
			name:  "sender holds more pages than the manifest names",
			pages: func(p [][]byte) [][]byte { return append(slices.Clone(p), p[0]) },
			err:   ErrManifest, errSub: "sender holds 4 pages, manifest names 3",
		},
		{
			name: "sender's page is short",
			pages: func(p [][]byte) [][]byte {
				q := slices.Clone(p)
				q[1] = p[1][:len(p[1])-1000]
				return q
			},
			err: ErrShort, errSub: "page 1: sender holds", sinkSaw: []int{0},
		},
		{
			name: "sender's page is long",
			pages: func(p [][]byte) [][]byte {
				q := slices.Clone(p)
				q[2] = append(bytes.Clone(p[2]), 0)
				return q
			},
			err: ErrManifest, errSub: "page 2: sender holds", sinkSaw: []int{0, 1},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fx := newFixture(t, 11, smolLayout, 40)
			m := fx.manifest(t)
			s, err := NewSender(queuetest.Conn(t, url), m, fx.pages, tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			if tc.pages != nil {
				s.pages = tc.pages(fx.pages) // a sender that lies about its pages
			}
			sv := serve(t, s)
			var got collector
			err = Fetch(context.Background(), queuetest.Conn(t, url), m, ReceiverConfig{Window: 1}, got.sink)
			if !errors.Is(err, tc.err) || !strings.Contains(err.Error(), tc.errSub) {
				t.Fatalf("Fetch = %v, want %v mentioning %q", err, tc.err, tc.errSub)
			}
			if saw := got.seen(); !slices.Equal(saw, tc.sinkSaw) {
				t.Fatalf("sink saw pages %v, want %v", saw, tc.sinkSaw)
			}
			if err := sv.wait(t, 5*time.Second); !errors.Is(err, ErrAborted) {
				t.Fatalf("Serve = %v, want ErrAborted", err)
			}
		})
	}
}

func TestNewSenderRefuses(t *testing.T) {
	nc := queuetest.Conn(t, queuetest.Server(t).ClientURL())
	fx := newFixture(t, 12, tinyLayout, 10)
	m := fx.manifest(t)
	for _, tc := range []struct {
		name  string
		m     *Manifest
		pages [][]byte
		cfg   SenderConfig
		err   error
	}{
		{"fewer pages than the manifest", m, fx.pages[:2], SenderConfig{}, ErrManifest},
		{"more pages than the manifest", m, append(slices.Clone(fx.pages), fx.pages[0]), SenderConfig{}, ErrManifest},
		{"page size differs", m, [][]byte{fx.pages[0], fx.pages[1], fx.pages[1]}, SenderConfig{}, ErrManifest},
		{"no manifest", nil, fx.pages, SenderConfig{}, ErrManifest},
		{"chunk over NATS payload", m, fx.pages, SenderConfig{MaxChunk: 1 << 20}, ErrConfig},
		{"negative chunk", m, fx.pages, SenderConfig{MaxChunk: -1}, ErrConfig},
		{"negative idle timeout", m, fx.pages, SenderConfig{IdleTimeout: -time.Second}, ErrConfig},
		{"negative start timeout", m, fx.pages, SenderConfig{StartTimeout: -time.Second}, ErrConfig},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := NewSender(nc, tc.m, tc.pages, tc.cfg)
			if !errors.Is(err, tc.err) {
				if s != nil {
					s.Close()
				}
				t.Fatalf("NewSender = %v, want %v", err, tc.err)
			}
		})
	}
}

func TestFetchRefuses(t *testing.T) {
	nc := queuetest.Conn(t, queuetest.Server(t).ClientURL())
	fx := newFixture(t, 13, smolLayout, 20)
	m := fx.manifest(t)
	never := func(int, []byte) error { t.Fatal("sink called"); return nil }
	for _, tc := range []struct {
		name string
		m    *Manifest
		cfg  ReceiverConfig
		err  error
	}{
		{"window too wide", m, ReceiverConfig{Window: 65}, ErrConfig},
		{"negative window", m, ReceiverConfig{Window: -1}, ErrConfig},
		{"chunk over NATS payload", m, ReceiverConfig{MaxChunk: 1 << 20}, ErrConfig},
		{"negative timeout", m, ReceiverConfig{RequestTimeout: -1}, ErrConfig},
		{"page limit past uint32 offsets", m, ReceiverConfig{MaxPageBytes: 1 << 32}, ErrConfig},
		{"page over the buffer limit", m, ReceiverConfig{MaxPageBytes: 1000}, ErrManifest},
		{"no manifest", nil, ReceiverConfig{}, ErrManifest},
		{"no pages", &Manifest{TransferID: "x"}, ReceiverConfig{}, ErrManifest},
		{"negative page size", &Manifest{TransferID: "x", Pages: []PageInfo{{Bytes: -1}}}, ReceiverConfig{}, ErrManifest},
		{"transfer id with wildcard", &Manifest{TransferID: "*", Pages: []PageInfo{{Bytes: 1}}}, ReceiverConfig{}, ErrManifest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := Fetch(context.Background(), nc, tc.m, tc.cfg, never); !errors.Is(err, tc.err) {
				t.Fatalf("Fetch = %v, want %v", err, tc.err)
			}
		})
	}
}

// rawSender answers a transfer's requests by hand, so tests can make it
// misbehave in ways a Sender never does.
type rawSender struct {
	nc    *nats.Conn
	pages [][]byte
	reqs  chan *nats.Msg
}

func newRawSender(t *testing.T, nc *nats.Conn, id string, pages [][]byte) *rawSender {
	t.Helper()
	r := &rawSender{nc: nc, pages: pages, reqs: make(chan *nats.Msg, 1024)}
	sub, err := nc.ChanSubscribe(Subject(id), r.reqs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return r
}

// next returns the next request, failing the test after within.
func (r *rawSender) next(t *testing.T, within time.Duration) (*nats.Msg, request) {
	t.Helper()
	select {
	case msg := <-r.reqs:
		req, err := decodeRequest(msg.Data)
		if err != nil {
			t.Fatal(err)
		}
		return msg, req
	case <-time.After(within):
		t.Fatalf("no request within %v", within)
		return nil, request{}
	}
}

func (r *rawSender) answer(t *testing.T, msg *nats.Msg, req request) {
	t.Helper()
	page := r.pages[req.page]
	n := min(int(req.max), len(page)-int(req.offset))
	b := chunk{kind: kindData, pages: uint32(len(r.pages)), page: req.page, offset: req.offset, total: uint32(len(page)), body: page[req.offset : int(req.offset)+n]}.append(nil)
	if err := r.nc.Publish(msg.Reply, b); err != nil {
		t.Fatal(err)
	}
}

// fetching is a Fetch running in its own goroutine.
type fetching struct {
	cancel context.CancelFunc
	done   chan struct{}
	err    error
	start  time.Time
}

func fetchAsync(t *testing.T, nc *nats.Conn, m *Manifest, cfg ReceiverConfig, sink func(int, []byte) error) *fetching {
	ctx, cancel := context.WithCancel(context.Background())
	f := &fetching{cancel: cancel, done: make(chan struct{}), start: time.Now()}
	go func() {
		defer close(f.done)
		f.err = Fetch(ctx, nc, m, cfg, sink)
	}()
	t.Cleanup(func() { cancel(); <-f.done })
	return f
}

func (f *fetching) wait(t *testing.T, within time.Duration) (time.Duration, error) {
	t.Helper()
	select {
	case <-f.done:
		return time.Since(f.start), f.err
	case <-time.After(within):
		t.Fatalf("Fetch still running after %v", within)
		return 0, nil
	}
}

func TestFetchWindow(t *testing.T) {
	url := queuetest.Server(t).ClientURL()
	fx := newFixture(t, 14, smolLayout, 40)
	m := fx.manifest(t)
	raw := newRawSender(t, queuetest.Conn(t, url), m.TransferID, fx.pages)
	var got collector
	f := fetchAsync(t, queuetest.Conn(t, url), m, ReceiverConfig{Window: 3, MaxChunk: 10_000}, got.sink)

	var held []*nats.Msg
	var reqs []request
	for range 3 {
		msg, req := raw.next(t, 5*time.Second)
		held, reqs = append(held, msg), append(reqs, req)
	}
	// The window is full: no fourth request until an answer goes back.
	select {
	case msg := <-raw.reqs:
		t.Fatalf("fourth request with three unanswered: %q", msg.Data)
	case <-time.After(200 * time.Millisecond):
	}
	raw.answer(t, held[0], reqs[0])
	if _, req := raw.next(t, 5*time.Second); req.page != 0 || req.offset != 30_000 {
		t.Fatalf("next request %+v, want page 0 offset 30000", req)
	}
	select {
	case msg := <-raw.reqs:
		t.Fatalf("two requests for one answer: %q", msg.Data)
	case <-time.After(200 * time.Millisecond):
	}
	f.cancel()
	if _, err := f.wait(t, 5*time.Second); !errors.Is(err, context.Canceled) {
		t.Fatalf("Fetch = %v, want context.Canceled", err)
	}
	if len(got.seen()) != 0 {
		t.Fatal("sink saw an incomplete page")
	}
}

func TestFetchOutOfOrderAnswers(t *testing.T) {
	url := queuetest.Server(t).ClientURL()
	fx := newFixture(t, 23, smolLayout, 40)
	m := fx.manifest(t)
	raw := newRawSender(t, queuetest.Conn(t, url), m.TransferID, fx.pages)
	var got collector
	const window = 4
	early := 0 // answers sent before an earlier page's
	f := fetchAsync(t, queuetest.Conn(t, url), m, ReceiverConfig{Window: window, MaxChunk: 150_000}, got.sink)
	// Hold every window's requests, then answer them last first, so answers
	// for later pages arrive before the page being assembled is complete.
	for {
		var msgs []*nats.Msg
		var reqs []request
	collect:
		for len(msgs) < window {
			select {
			case msg := <-raw.reqs:
				req, err := decodeRequest(msg.Data)
				if err != nil {
					t.Fatal(err)
				}
				if req.op == opDone {
					if _, err := f.wait(t, 5*time.Second); err != nil {
						t.Fatalf("Fetch: %v", err)
					}
					if len(got.pages) != len(fx.pages) {
						t.Fatalf("sink saw %d pages, want %d", len(got.pages), len(fx.pages))
					}
					for i := range fx.pages {
						if !bytes.Equal(got.pages[i], fx.pages[i]) {
							t.Fatalf("page %d differs", i)
						}
					}
					if early == 0 {
						t.Fatal("no answer ever arrived ahead of its page")
					}
					return
				}
				msgs, reqs = append(msgs, msg), append(reqs, req)
			case <-time.After(100 * time.Millisecond):
				if len(msgs) == 0 {
					t.Fatal("no request and no done")
				}
				break collect // the receiver asked for all it may now
			}
		}
		for i := 1; i < len(reqs); i++ {
			if reqs[i].page > reqs[0].page {
				early++
			}
		}
		for i := len(msgs) - 1; i >= 0; i-- {
			raw.answer(t, msgs[i], reqs[i])
		}
	}
}

func TestSenderGone(t *testing.T) {
	url := queuetest.Server(t).ClientURL()
	const timeout = 400 * time.Millisecond
	t.Run("sender cancelled after 3 chunks", func(t *testing.T) {
		fx := newFixture(t, 15, smolLayout, 40)
		m := fx.manifest(t)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		s, err := NewSender(queuetest.Conn(t, url), m, fx.pages, SenderConfig{MaxChunk: 64 << 10, served: func(n int) {
			if n == 3 {
				cancel()
			}
		}})
		if err != nil {
			t.Fatal(err)
		}
		serveErr := make(chan error, 1)
		go func() { serveErr <- s.Serve(ctx) }()
		var got collector
		f := fetchAsync(t, queuetest.Conn(t, url), m, ReceiverConfig{Window: 2, RequestTimeout: timeout}, got.sink)
		took, err := f.wait(t, 10*time.Second)
		if !errors.Is(err, ErrTransfer) || took > timeout+2*time.Second {
			t.Fatalf("Fetch = %v after %v, want ErrTransfer within %v", err, took, timeout)
		}
		if err := <-serveErr; !errors.Is(err, context.Canceled) {
			t.Fatalf("Serve = %v, want context.Canceled", err)
		}
		if saw := got.seen(); len(saw) != 0 {
			t.Fatalf("sink saw pages %v of a transfer that failed in page 0", saw)
		}
	})
	t.Run("sender stops answering", func(t *testing.T) {
		fx := newFixture(t, 16, smolLayout, 40)
		m := fx.manifest(t)
		raw := newRawSender(t, queuetest.Conn(t, url), m.TransferID, fx.pages)
		var got collector
		f := fetchAsync(t, queuetest.Conn(t, url), m, ReceiverConfig{Window: 1, RequestTimeout: timeout}, got.sink)
		for range 2 {
			msg, req := raw.next(t, 5*time.Second)
			raw.answer(t, msg, req)
		}
		took, err := f.wait(t, 10*time.Second)
		if !errors.Is(err, ErrTransfer) || !strings.Contains(err.Error(), "no answer within") {
			t.Fatalf("Fetch = %v, want ErrTransfer for no answer", err)
		}
		if took < timeout || took > timeout+2*time.Second {
			t.Fatalf("Fetch gave up after %v, timeout %v", took, timeout)
		}
		// The abort reached the silent sender.
		for {
			_, req := raw.next(t, 5*time.Second)
			if req.op == opAbort {
				break
			}
		}
	})
	t.Run("no sender at all", func(t *testing.T) {
		fx := newFixture(t, 17, tinyLayout, 5)
		m := fx.manifest(t)
		start := time.Now()
		err := Fetch(context.Background(), queuetest.Conn(t, url), m, ReceiverConfig{RequestTimeout: 5 * time.Second}, (&collector{}).sink)
		if !errors.Is(err, ErrTransfer) || time.Since(start) > 6*time.Second {
			t.Fatalf("Fetch = %v after %v, want ErrTransfer", err, time.Since(start))
		}
	})
	t.Run("duplicate answer", func(t *testing.T) {
		fx := newFixture(t, 18, smolLayout, 40)
		m := fx.manifest(t)
		raw := newRawSender(t, queuetest.Conn(t, url), m.TransferID, fx.pages)
		f := fetchAsync(t, queuetest.Conn(t, url), m, ReceiverConfig{Window: 1, MaxChunk: 1000}, (&collector{}).sink)
		msg, req := raw.next(t, 5*time.Second)
		raw.answer(t, msg, req)
		raw.answer(t, msg, req)
		_, err := f.wait(t, 10*time.Second)
		if !errors.Is(err, ErrTransfer) || !strings.Contains(err.Error(), "answer to no request") {
			t.Fatalf("Fetch = %v, want ErrTransfer for a stray answer", err)
		}
	})
}

func TestReceiverGone(t *testing.T) {
	url := queuetest.Server(t).ClientURL()
	const idle = 300 * time.Millisecond
	t.Run("receiver connection dies mid-transfer", func(t *testing.T) {
		fx := newFixture(t, 19, smolLayout, 40)
		m := fx.manifest(t)
		s, err := NewSender(queuetest.Conn(t, url), m, fx.pages, SenderConfig{IdleTimeout: idle})
		if err != nil {
			t.Fatal(err)
		}
		sv := serve(t, s)
		rnc := queuetest.Conn(t, url)
		err = Fetch(context.Background(), rnc, m, ReceiverConfig{}, func(int, []byte) error {
			rnc.Close() // the decode worker dies after importing page 0
			return nil
		})
		if err == nil {
			t.Fatal("Fetch succeeded on a closed connection")
		}
		start := time.Now()
		if err := sv.wait(t, idle+5*time.Second); !errors.Is(err, ErrAbandoned) {
			t.Fatalf("Serve = %v, want ErrAbandoned", err)
		}
		if took := time.Since(start); took > idle+2*time.Second {
			t.Fatalf("Serve noticed after %v, idle timeout %v", took, idle)
		}
	})
	t.Run("no receiver ever comes", func(t *testing.T) {
		fx := newFixture(t, 20, tinyLayout, 5)
		m := fx.manifest(t)
		start := time.Now()
		err := Serve(context.Background(), queuetest.Conn(t, url), m, fx.pages, SenderConfig{StartTimeout: idle, IdleTimeout: time.Minute})
		if !errors.Is(err, ErrAbandoned) {
			t.Fatalf("Serve = %v, want ErrAbandoned", err)
		}
		if took := time.Since(start); took < idle || took > idle+2*time.Second {
			t.Fatalf("Serve gave up after %v, start timeout %v", took, idle)
		}
	})
	sinkErr := errors.New("pool exhausted")
	for _, tc := range []struct {
		name string
		sink func(cancel context.CancelFunc) func(int, []byte) error
		want error
	}{
		{"sink refuses a page", func(context.CancelFunc) func(int, []byte) error {
			return func(i int, _ []byte) error {
				if i == 1 {
					return sinkErr
				}
				return nil
			}
		}, sinkErr},
		{"receiver cancelled", func(cancel context.CancelFunc) func(int, []byte) error {
			return func(int, []byte) error { cancel(); return nil }
		}, context.Canceled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fx := newFixture(t, 21, smolLayout, 40)
			m := fx.manifest(t)
			s, err := NewSender(queuetest.Conn(t, url), m, fx.pages, SenderConfig{IdleTimeout: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			sv := serve(t, s)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if err := Fetch(ctx, queuetest.Conn(t, url), m, ReceiverConfig{}, tc.sink(cancel)); !errors.Is(err, tc.want) {
				t.Fatalf("Fetch = %v, want %v", err, tc.want)
			}
			// The sender hears the abort at once, not after its idle minute.
			if err := sv.wait(t, 5*time.Second); !errors.Is(err, ErrAborted) {
				t.Fatalf("Serve = %v, want ErrAborted", err)
			}
		})
	}
}

func TestSenderAnswersBadRequests(t *testing.T) {
	url := queuetest.Server(t).ClientURL()
	fx := newFixture(t, 22, tinyLayout, 10)
	m := fx.manifest(t)
	s, err := NewSender(queuetest.Conn(t, url), m, fx.pages, SenderConfig{IdleTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	sv := serve(t, s)
	nc := queuetest.Conn(t, url)
	for _, tc := range []struct {
		name   string
		data   []byte
		errSub string
	}{
		{"garbage", []byte("hello"), "malformed"},
		{"page out of range", request{op: opPull, page: 3, max: 10}.encode(), "page 3 out of range"},
		{"offset out of range", request{op: opPull, page: 2, offset: 1000, max: 10}.encode(), "offset 1000 out of range"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			msg, err := nc.Request(Subject(m.TransferID), tc.data, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			c, err := decodeChunk(msg.Data)
			if err != nil {
				t.Fatal(err)
			}
			if c.kind != kindError || !strings.Contains(string(c.body), tc.errSub) {
				t.Fatalf("answer kind %d %q, want an error mentioning %q", c.kind, c.body, tc.errSub)
			}
		})
	}
	if err := nc.Publish(Subject(m.TransferID), request{op: opDone}.encode()); err != nil {
		t.Fatal(err)
	}
	if err := sv.wait(t, 5*time.Second); err != nil {
		t.Fatalf("Serve = %v after done", err)
	}
}

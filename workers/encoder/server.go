package encoder

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/bulkhead-ai/bulkhead/models/tokenizer"
)

// Errors of the Server.
var (
	ErrQueueFull = errors.New("encoder: queue full")
	ErrClosed    = errors.New("encoder: server closed")
)

// ServerConfig bounds a Server. Zero values take the defaults noted.
type ServerConfig struct {
	// PassTokens bounds the tokens of one pass, all inputs together; default
	// 8192, and at least the model's window.
	PassTokens int
	// QueueSize bounds the requests waiting or running; default 256; a full
	// queue refuses with ErrQueueFull.
	QueueSize int
}

// Passer runs encoding passes over inputs of token ids: an Encoder, or a
// causal embedding model's engine.Embedder.
type Passer interface {
	Encode(inputs [][]int32) ([][]float32, error)
	Check(ids []int32) error
}

// Info is what a server's callers need to know of its model.
type Info struct {
	Tokenizer *tokenizer.Tokenizer
	Window    int     // the longest input, in tokens
	Vocab     int     // token ids run below this
	Dims      int     // the length of a vector (rank pooling: of the scores)
	Pooling   Pooling // how a vector is made
}

// Info describes the encoder's model.
func (e *Encoder) Info() Info {
	h := e.m.Hyper
	dims := h.Embd
	if h.Pooling == PoolRank {
		dims = h.Labels
	}
	return Info{Tokenizer: e.m.Tokenizer, Window: h.Context, Vocab: h.Vocab, Dims: dims, Pooling: h.Pooling}
}

// Server runs one Passer for many callers: the inputs of the requests
// waiting are gathered into passes of at most PassTokens tokens. Inputs of
// several requests and tenants share a pass (none attends to another's
// rows, so each vector is what a pass of its own would give), and the
// tenants with inputs waiting take turns, one input each, so a tenant's long
// batch does not hold another's request back for more than a pass. Embed is
// safe for concurrent use; Run drives the passes.
type Server struct {
	enc  Passer
	info Info
	cfg  ServerConfig

	mu      sync.Mutex
	tenants []string            // tenants with inputs waiting, in turn order
	waiting map[string][]*input // per tenant, in arrival order
	n       int                 // requests waiting or running
	closed  bool
	wake    chan struct{} // capacity 1

	stats Stats
}

// Stats are a Server's counters since it started.
type Stats struct {
	Passes, Inputs, Tokens uint64
	Waiting                int // requests waiting or running now
}

// request is one caller's inputs and where their vectors go.
type request struct {
	ctx  context.Context
	out  [][]float32
	left int
	err  error
	done chan struct{}
}

// input is one input of a request.
type input struct {
	req *request
	i   int
	ids []int32
}

// NewServer returns a server running enc, whose model info describes; Run
// must run for Embed to answer. The passes hold at most cfg.PassTokens
// tokens, and never fewer than info.Window.
func NewServer(enc Passer, info Info, cfg ServerConfig) (*Server, error) {
	if cfg.PassTokens < 0 || cfg.QueueSize < 0 {
		return nil, fmt.Errorf("encoder: negative server bounds %+v", cfg)
	}
	if info.Tokenizer == nil || info.Window <= 0 || info.Pooling == PoolNone {
		return nil, fmt.Errorf("%w: the model names no tokenizer, window or pooling type", ErrBadModel)
	}
	if cfg.PassTokens == 0 {
		cfg.PassTokens = 8192
	}
	cfg.PassTokens = max(cfg.PassTokens, info.Window)
	if cfg.QueueSize == 0 {
		cfg.QueueSize = 256
	}
	return &Server{enc: enc, info: info, cfg: cfg, waiting: map[string][]*input{}, wake: make(chan struct{}, 1)}, nil
}

// Info describes the server's model.
func (s *Server) Info() Info { return s.info }

// Stats returns the server's counters.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats
	st.Waiting = s.n
	return st
}

// Embed encodes a request's inputs for tenant and returns their vectors in
// order (as Encoder.Encode: pooled, not normalised). Bad inputs are refused
// before anything waits; ctx ending gives up the request (its inputs not yet
// in a pass are dropped).
func (s *Server) Embed(ctx context.Context, tenant string, inputs [][]int32) ([][]float32, error) {
	if len(inputs) == 0 {
		return nil, ErrNoInput
	}
	for i, ids := range inputs {
		if err := s.enc.Check(ids); err != nil {
			return nil, fmt.Errorf("input %d: %w", i, err)
		}
	}
	r := &request{ctx: ctx, out: make([][]float32, len(inputs)), left: len(inputs), done: make(chan struct{})}
	s.mu.Lock()
	switch {
	case s.closed:
		s.mu.Unlock()
		return nil, ErrClosed
	case s.n >= s.cfg.QueueSize:
		s.mu.Unlock()
		return nil, ErrQueueFull
	}
	s.n++
	if len(s.waiting[tenant]) == 0 {
		s.tenants = append(s.tenants, tenant)
	}
	for i, ids := range inputs {
		s.waiting[tenant] = append(s.waiting[tenant], &input{req: r, i: i, ids: ids})
	}
	s.mu.Unlock()
	s.signal()
	select {
	case <-r.done:
	case <-ctx.Done():
		s.giveUp(tenant, r, ctx.Err())
		<-r.done // a pass running its other inputs finishes them
	}
	s.mu.Lock()
	s.n--
	s.mu.Unlock()
	if r.err != nil {
		return nil, r.err
	}
	return r.out, nil
}

func (s *Server) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Close stops Run after its current pass; waiting and later requests get
// ErrClosed.
func (s *Server) Close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.signal()
}

// Run runs passes until ctx ends or Close is called; requests still waiting
// then end with ErrClosed (or their context's error).
func (s *Server) Run(ctx context.Context) {
	defer s.drain()
	for ctx.Err() == nil && !s.isClosed() {
		if batch := s.next(); batch != nil {
			s.pass(batch)
			continue
		}
		select {
		case <-ctx.Done():
		case <-s.wake:
		}
	}
}

func (s *Server) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// next takes the inputs of the next pass: the tenants in turn, one input
// each, until the pass is full; inputs of requests given up are ended
// unencoded. Nil when nothing waits.
func (s *Server) next() []*input {
	s.mu.Lock()
	defer s.mu.Unlock()
	var batch []*input
	tokens := 0
	for len(s.tenants) > 0 {
		t := s.tenants[0]
		q := s.waiting[t]
		in := q[0]
		if err := in.req.ctx.Err(); err != nil {
			s.finish(in, nil, err)
		} else {
			if tokens+len(in.ids) > s.cfg.PassTokens {
				break
			}
			tokens += len(in.ids)
			batch = append(batch, in)
		}
		s.waiting[t] = q[1:]
		s.tenants = s.tenants[1:]
		if len(s.waiting[t]) > 0 {
			s.tenants = append(s.tenants, t)
		} else {
			delete(s.waiting, t)
		}
	}
	return batch
}

// pass encodes one batch and hands each vector to its request.
func (s *Server) pass(batch []*input) {
	ids := make([][]int32, len(batch))
	tokens := 0
	for i, in := range batch {
		ids[i] = in.ids
		tokens += len(in.ids)
	}
	vecs, err := s.enc.Encode(ids)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stats.Passes++
	s.stats.Inputs += uint64(len(batch))
	s.stats.Tokens += uint64(tokens)
	for i, in := range batch {
		if err != nil {
			s.finish(in, nil, err)
		} else {
			s.finish(in, vecs[i], nil)
		}
	}
}

// finish records one input's vector or error; the request ends when its
// last input does. Called with s.mu held.
func (s *Server) finish(in *input, v []float32, err error) {
	r := in.req
	if err != nil && r.err == nil {
		r.err = err
	}
	r.out[in.i] = v
	r.left--
	if r.left == 0 {
		close(r.done)
	}
}

// giveUp ends r's inputs that are still waiting with err.
func (s *Server) giveUp(tenant string, r *request, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q, ok := s.waiting[tenant]
	if !ok {
		return
	}
	kept := q[:0]
	for _, in := range q {
		if in.req == r {
			s.finish(in, nil, err)
			continue
		}
		kept = append(kept, in)
	}
	if len(kept) > 0 {
		s.waiting[tenant] = kept
		return
	}
	delete(s.waiting, tenant)
	for i, t := range s.tenants {
		if t == tenant {
			s.tenants = append(s.tenants[:i], s.tenants[i+1:]...)
			break
		}
	}
}

// drain ends every request still waiting with ErrClosed.
func (s *Server) drain() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	for t, q := range s.waiting {
		for _, in := range q {
			s.finish(in, nil, ErrClosed)
		}
		delete(s.waiting, t)
	}
	s.tenants = nil
}

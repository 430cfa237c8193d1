package edge

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"
)

// ErrDraining is a request that reached an edge shutting down: it takes no
// new work, and a client (or load balancer) retries on another edge.
var ErrDraining = errors.New("edge: draining, retry on another edge")

// retryDraining is the Retry-After of a request refused while draining: a
// load balancer has stopped routing here within a probe or two.
const retryDraining = time.Second

// drainer tracks the requests in flight so that Drain can wait for them,
// and refuses new ones once draining.
type drainer struct {
	mu       sync.Mutex // guards draining, inflight, idle
	draining bool
	inflight map[*inflight]struct{}
	idle     chan struct{} // closed when draining and inflight is empty; nil before Drain
}

// inflight is one request being served: cancel ends it when the grace
// period of a drain runs out.
type inflight struct {
	cancel context.CancelCauseFunc
}

// enter registers a request; false means the edge is draining and the
// request must be refused.
func (d *drainer) enter(cancel context.CancelCauseFunc) (*inflight, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.draining {
		return nil, false
	}
	if d.inflight == nil {
		d.inflight = map[*inflight]struct{}{}
	}
	f := &inflight{cancel: cancel}
	d.inflight[f] = struct{}{}
	return f, true
}

func (d *drainer) leave(f *inflight) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.inflight, f)
	if d.draining && len(d.inflight) == 0 && d.idle != nil {
		close(d.idle)
		d.idle = nil
	}
}

// gate refuses every request once the edge drains (503 draining with a
// Retry-After, and Connection: close so that the client's next request
// opens a connection a load balancer can send elsewhere), and gives each
// admitted request a context that Drain cancels when its grace runs out.
func (s *Server) gate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithCancelCause(r.Context())
		defer cancel(nil)
		f, ok := s.drain.enter(cancel)
		if !ok {
			w.Header().Set("Connection", "close")
			writeErrorFor(w, r, s.refuse(r, ErrDraining))
			return
		}
		defer s.drain.leave(f)
		inner := r.WithContext(ctx)
		next.ServeHTTP(w, inner)
		r.Pattern = inner.Pattern // the route the mux matched, for observe's span name
	})
}

// Draining reports whether Drain was called: the node's /readyz fails from
// then on.
func (s *Server) Draining() bool {
	s.drain.mu.Lock()
	defer s.drain.mu.Unlock()
	return s.drain.draining
}

// InFlight is the number of requests being served now.
func (s *Server) InFlight() int {
	s.drain.mu.Lock()
	defer s.drain.mu.Unlock()
	return len(s.drain.inflight)
}

// Drain stops taking requests (each new one is refused with 503 draining
// and a Retry-After, on the listener that stays open meanwhile) and waits
// for those in flight, streams included, to finish. When ctx ends first it
// cancels them (each client gets the error the request flow gives a
// cancelled request and the job is cancelled on its worker), waits for
// their handlers to return and reports ctx's error. Calling it again waits
// again; the edge never takes requests after the first call.
func (s *Server) Drain(ctx context.Context) error {
	d := &s.drain
	d.mu.Lock()
	d.draining = true
	if len(d.inflight) == 0 {
		d.mu.Unlock()
		return nil
	}
	if d.idle == nil {
		d.idle = make(chan struct{})
	}
	idle := d.idle
	d.mu.Unlock()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
	}
	d.mu.Lock()
	for f := range d.inflight {
		f.cancel(ErrDraining)
	}
	d.mu.Unlock()
	<-idle
	return ctx.Err()
}

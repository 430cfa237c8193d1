package edge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// checkTimeout bounds each readiness check.
const checkTimeout = time.Second

// Health answers /healthz (the process is alive) and /readyz (every check
// passes and the node is not draining), without auth, for every node
// (edge, worker, billing, NATS). Checks are added while the node starts;
// each runs on every /readyz.
type Health struct {
	start    time.Time
	draining atomic.Bool

	mu     sync.Mutex // guards checks
	checks []namedCheck
}

type namedCheck struct {
	name string
	fn   func(ctx context.Context) error
}

// NewHealth returns a Health with no checks, alive from now.
func NewHealth() *Health { return &Health{start: time.Now()} }

// Add adds a readiness check named name.
func (h *Health) Add(name string, fn func(ctx context.Context) error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.checks = append(h.checks, namedCheck{name, fn})
}

// Drain marks the node as shutting down: /readyz fails from now on.
func (h *Health) Drain() { h.draining.Store(true) }

// checkResult is one check in a /readyz answer.
type checkResult struct {
	Name  string `json:"name"`
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
}

type healthAnswer struct {
	Status        string        `json:"status"`
	UptimeSeconds float64       `json:"uptime_seconds"`
	Checks        []checkResult `json:"checks,omitempty"`
}

func (h *Health) live(w http.ResponseWriter, _ *http.Request) {
	writeHealth(w, http.StatusOK, healthAnswer{Status: "alive", UptimeSeconds: time.Since(h.start).Seconds()})
}

func (h *Health) ready(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	checks := append([]namedCheck(nil), h.checks...)
	h.mu.Unlock()
	ans := healthAnswer{Status: "ready", UptimeSeconds: time.Since(h.start).Seconds()}
	results := make([]checkResult, len(checks))
	var wg sync.WaitGroup
	for i, c := range checks {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(r.Context(), checkTimeout)
			defer cancel()
			results[i] = checkResult{Name: c.name, OK: true}
			if err := c.fn(ctx); err != nil {
				results[i] = checkResult{Name: c.name, Error: err.Error()}
			}
		})
	}
	wg.Wait()
	draining := checkResult{Name: "not_draining", OK: !h.draining.Load()}
	if !draining.OK {
		draining.Error = "shutting down"
	}
	ans.Checks = append(results, draining)
	status := http.StatusOK
	for _, c := range ans.Checks {
		if !c.OK {
			ans.Status, status = "not_ready", http.StatusServiceUnavailable
		}
	}
	writeHealth(w, status, ans)
}

func writeHealth(w http.ResponseWriter, status int, a healthAnswer) {
	b, _ := json.Marshal(a)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// OpsRoutes adds /metrics (reg), /healthz and /readyz to mux; none needs
// auth.
func OpsRoutes(mux *http.ServeMux, h *Health, reg *prometheus.Registry) {
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("GET /healthz", h.live)
	mux.HandleFunc("GET /readyz", h.ready)
}

// ServeOps serves the ops routes on listen until stop is called, which shuts
// the listener down and waits. An empty listen serves nothing.
func ServeOps(log *slog.Logger, listen string, h *Health, reg *prometheus.Registry) (stop func(), err error) {
	if listen == "" {
		return func() {}, nil
	}
	ln, err := Listen(listen)
	if err != nil {
		return nil, fmt.Errorf("--metrics-listen: %w", err)
	}
	mux := http.NewServeMux()
	OpsRoutes(mux, h, reg)
	hs, err := NewHTTPServer(mux, HTTPLimits{}) // every listener has the same limits
	if err != nil {
		ln.Close()
		return nil, err
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics listener", "err", err)
		}
	}()
	log.Info("metrics and health listening", "addr", "http://"+ln.Addr().String())
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = hs.Shutdown(ctx)
		<-done
	}, nil
}

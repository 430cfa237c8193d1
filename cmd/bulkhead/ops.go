package main

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

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"

	"github.com/bulkhead-ai/bulkhead/edge"
)

// checkTimeout bounds each readiness check.
const checkTimeout = time.Second

// health answers /healthz (the process is alive) and /readyz (every check
// passes and the node is not draining), without auth. Checks are added
// while the node starts; each runs on every /readyz.
type health struct {
	start    time.Time
	draining atomic.Bool

	mu     sync.Mutex // guards checks
	checks []namedCheck
}

type namedCheck struct {
	name string
	fn   func(ctx context.Context) error
}

func newHealth() *health { return &health{start: time.Now()} }

func (h *health) add(name string, fn func(ctx context.Context) error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.checks = append(h.checks, namedCheck{name, fn})
}

// drain marks the node as shutting down: /readyz fails from now on.
func (h *health) drain() { h.draining.Store(true) }

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

func (h *health) live(w http.ResponseWriter, _ *http.Request) {
	writeHealth(w, http.StatusOK, healthAnswer{Status: "alive", UptimeSeconds: time.Since(h.start).Seconds()})
}

func (h *health) ready(w http.ResponseWriter, r *http.Request) {
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

// natsCheck passes while nc is connected.
func natsCheck(nc *nats.Conn) func(context.Context) error {
	return func(context.Context) error {
		if st := nc.Status(); st != nats.CONNECTED {
			return fmt.Errorf("NATS %s", st)
		}
		return nil
	}
}

// redisCheck passes while rdb answers a PING.
func redisCheck(rdb redis.UniversalClient) func(context.Context) error {
	return func(ctx context.Context) error {
		if err := rdb.Ping(ctx).Err(); err != nil {
			return fmt.Errorf("redis: %w", err)
		}
		return nil
	}
}

// flagCheck passes once ok holds; what says what is missing until then.
func flagCheck(ok *atomic.Bool, what string) func(context.Context) error {
	return func(context.Context) error {
		if !ok.Load() {
			return errors.New(what)
		}
		return nil
	}
}

// opsRoutes adds /metrics (reg), /healthz and /readyz to mux; none needs
// auth.
func opsRoutes(mux *http.ServeMux, h *health, reg *prometheus.Registry) {
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("GET /healthz", h.live)
	mux.HandleFunc("GET /readyz", h.ready)
}

// serveOps serves the ops routes on listen until stop is called, which shuts
// the listener down and waits. An empty listen serves nothing.
func serveOps(log *slog.Logger, listen string, h *health, reg *prometheus.Registry) (stop func(), err error) {
	if listen == "" {
		return func() {}, nil
	}
	ln, err := edge.Listen(listen)
	if err != nil {
		return nil, fmt.Errorf("--metrics-listen: %w", err)
	}
	mux := http.NewServeMux()
	opsRoutes(mux, h, reg)
	hs, err := edge.NewHTTPServer(mux, edge.HTTPLimits{}) // every listener has the same limits
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

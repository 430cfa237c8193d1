package edge

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/bulkhead-ai/bulkhead/billing/dashboard"
	"github.com/bulkhead-ai/bulkhead/billing/ledger"
	"github.com/bulkhead-ai/bulkhead/billing/price"
	"github.com/bulkhead-ai/bulkhead/billing/usage"
	"github.com/bulkhead-ai/bulkhead/edge/auth"
	"github.com/bulkhead-ai/bulkhead/edge/quota"
	"github.com/bulkhead-ai/bulkhead/models/catalog"
	"github.com/bulkhead-ai/bulkhead/queue"
)

// billingRoutes registers the dashboard and, with a ledger, the usage API
// (billing/usage) under both prefixes: scope billing:read (billing:write to
// change an API key's policy), and under /client/v4/accounts/{account_id}
// the token's own account only.
func (s *Server) billingRoutes(mux *http.ServeMux) {
	dash := dashboard.Handler()
	mux.Handle("GET /dashboard", dash)
	mux.Handle("GET /dashboard/", dash)
	if s.cfg.Ledger == nil {
		return
	}
	h, err := usage.New(s.cfg.Ledger, usage.Config{
		Authorize: func(r *http.Request) (string, error) {
			p, err := s.authenticate(r, auth.ScopeBillingRead)
			return p.Tenant, err
		},
		AuthorizeWrite: func(r *http.Request) (string, error) {
			p, err := s.authenticate(r, auth.ScopeBillingWrite)
			return p.Tenant, err
		},
		CheckWebhook: func(ctx context.Context, w *queue.Webhook) error { return s.checkWebhook(ctx, w) },
		WriteError:   s.writeUsageError,
		DailyNeurons: s.cfg.DailyNeurons,
		Now:          s.cfg.Ledger.Now,
	})
	if err != nil {
		panic(err) // both functions are given above: unreachable
	}
	for _, prefix := range []string{"", accountPrefix} {
		mux.HandleFunc("GET "+prefix+"/ai/usage", h.Usage)
		mux.HandleFunc("GET "+prefix+"/ai/usage/requests", h.Requests)
		mux.HandleFunc("GET "+prefix+"/ai/usage/keys", h.ListKeys)
		mux.HandleFunc("PUT "+prefix+"/ai/usage/keys/{key}", h.PutKey)
		mux.HandleFunc("DELETE "+prefix+"/ai/usage/keys/{key}", h.DeleteKey)
	}
}

// writeUsageError renders a usage API refusal through the error table.
func (s *Server) writeUsageError(w http.ResponseWriter, r *http.Request, err error) {
	var qe *usage.QueryError
	switch {
	case errors.As(err, &qe):
		err = &InputError{Field: qe.Param, Msg: qe.Msg}
	case errors.Is(err, ledger.ErrQuery):
		err = &InputError{Msg: err.Error()}
	case errors.Is(err, ledger.ErrUnavailable):
		err = fmt.Errorf("%w: %w", quota.ErrUnavailable, err)
	}
	writeNativeError(w, s.refuse(r, err))
}

// jobRates are the prices a job of m is admitted at; the worker bills its
// usage event with them.
func jobRates(m *catalog.Model) *queue.Rates {
	r := price.Of(m.Prices)
	return &r
}

// charge is what the quota is told a completed request cost: its request id
// makes the charge count once with billing's count of its usage event.
func charge(m *catalog.Model, id string, u queue.Usage) quota.Usage {
	micro := price.Micro(price.Of(m.Prices), price.Usage{
		PromptTokens: u.PromptTokens, CachedTokens: u.CachedTokens, CompletionTokens: u.CompletionTokens})
	return quota.Usage{Neurons: price.Neurons(micro), RequestID: id}
}

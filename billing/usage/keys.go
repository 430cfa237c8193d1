package usage

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/bulkhead-ai/bulkhead/billing/ledger"
	"github.com/bulkhead-ai/bulkhead/billing/price"
	"github.com/bulkhead-ai/bulkhead/queue"
)

// KeyStore holds a tenant's API key policies and budget alerts;
// billing/ledger.Ledger implements it.
type KeyStore interface {
	Keys(ctx context.Context, tenant string, now time.Time) ([]ledger.KeyState, error)
	Alerts(ctx context.Context, tenant string, limit int) ([]ledger.Alert, error)
	Anomalies(ctx context.Context, tenant string, limit int) ([]queue.CostAnomaly, error)
	SetKeyPolicy(ctx context.Context, tenant, key string, p ledger.KeyPolicy) error
	DeleteKeyPolicy(ctx context.Context, tenant, key string) error
}

var _ KeyStore = (*ledger.Ledger)(nil)

// MaxPolicyBytes bounds a PUT key policy's body.
const MaxPolicyBytes = 16 << 10

// Budget is one budget of a key and its spend in the current period.
type Budget struct {
	Period  string   `json:"period"` // "day" or "month" (UTC)
	Start   string   `json:"start"`  // "2006-01-02" or "2006-01"
	Neurons float64  `json:"neurons"`
	Budget  *float64 `json:"budget,omitempty"` // absent: none
	Share   *float64 `json:"share,omitempty"`  // neurons / budget
	// Alert is the highest threshold (percent) raised in this period, 0
	// for none.
	Alert int `json:"alert"`
}

// WebhookView is a key's alert webhook as shown: its secret stays hidden.
type WebhookView struct {
	URL string `json:"url"`
}

// KeyPolicyView is a key's policy as the API shows it.
type KeyPolicyView struct {
	RequestsPerMinute int          `json:"requests_per_minute"`
	MaxConcurrent     int          `json:"max_concurrent"`
	DailyNeurons      float64      `json:"daily_neurons"`
	MonthlyNeurons    float64      `json:"monthly_neurons"`
	Soft              bool         `json:"soft"`
	Webhook           *WebhookView `json:"webhook,omitempty"`
	EventSubject      string       `json:"event_subject,omitempty"`
}

// Key is one key in GET .../ai/usage/keys.
type Key struct {
	Key    string        `json:"key"`
	Policy KeyPolicyView `json:"policy"`
	Day    Budget        `json:"day"`
	Month  Budget        `json:"month"`
}

// Alert is one raised alert, as listed.
type Alert struct {
	Key       string  `json:"key"`
	Period    string  `json:"period"`
	Start     string  `json:"start"`
	Threshold int     `json:"threshold"`
	Neurons   float64 `json:"neurons"`
	Budget    float64 `json:"budget"`
	Soft      bool    `json:"soft"`
	RequestID string  `json:"request_id"`
}

// Keys is the answer of GET .../ai/usage/keys.
type Keys struct {
	Keys      []Key               `json:"keys"`
	Alerts    []Alert             `json:"alerts"`    // most recent first
	Anomalies []queue.CostAnomaly `json:"anomalies"` // most recent first
}

func budgetOf(period, start string, micro int64, budget float64, alerted int) Budget {
	b := Budget{Period: period, Start: start, Neurons: price.Neurons(micro), Alert: alerted}
	if budget > 0 {
		share := float64(micro) / float64(price.ToMicro(budget))
		b.Budget, b.Share = &budget, &share
	}
	return b
}

// highest is the highest threshold alerts raised for key in period start.
func highest(alerts []ledger.Alert, key, start string) int {
	n := 0
	for _, a := range alerts {
		if a.Key == key && a.Start == start {
			n = max(n, a.Threshold)
		}
	}
	return n
}

// ListKeys serves GET .../ai/usage/keys: each API key with a policy, its
// spend today and this month against its budgets, the alerts raised, and
// the tenant's most recent alerts.
func (h *Handler) ListKeys(w http.ResponseWriter, r *http.Request) {
	tenant, err := h.cfg.Authorize(r)
	if err != nil {
		h.cfg.WriteError(w, r, err)
		return
	}
	ks, ok := h.src.(KeyStore)
	if !ok {
		writeJSON(w, Keys{Keys: []Key{}, Alerts: []Alert{}, Anomalies: []queue.CostAnomaly{}})
		return
	}
	now := h.cfg.Now().UTC()
	states, err := ks.Keys(r.Context(), tenant, now)
	var alerts []ledger.Alert
	var anomalies []queue.CostAnomaly
	if err == nil {
		alerts, err = ks.Alerts(r.Context(), tenant, ledger.MaxAlerts)
	}
	if err == nil {
		anomalies, err = ks.Anomalies(r.Context(), tenant, ledger.MaxAlerts)
	}
	if err != nil {
		h.cfg.WriteError(w, r, err)
		return
	}
	out := keysOf(states, alerts, now)
	out.Anomalies = anomalies
	writeJSON(w, out)
}

func keysOf(states []ledger.KeyState, alerts []ledger.Alert, now time.Time) Keys {
	day, month := now.Format(time.DateOnly), now.Format("2006-01")
	out := Keys{Keys: make([]Key, 0, len(states)), Alerts: make([]Alert, 0, len(alerts)), Anomalies: []queue.CostAnomaly{}}
	for _, st := range states {
		p := st.Policy
		view := KeyPolicyView{RequestsPerMinute: p.RequestsPerMinute, MaxConcurrent: p.MaxConcurrent,
			DailyNeurons: p.DailyNeurons, MonthlyNeurons: p.MonthlyNeurons, Soft: p.Soft, EventSubject: p.EventSubject}
		if p.Webhook != nil {
			view.Webhook = &WebhookView{URL: p.Webhook.URL}
		}
		out.Keys = append(out.Keys, Key{Key: st.Key, Policy: view,
			Day:   budgetOf(queue.PeriodDay, day, st.DayMicro, p.DailyNeurons, highest(alerts, st.Key, day)),
			Month: budgetOf(queue.PeriodMonth, month, st.MonthMicro, p.MonthlyNeurons, highest(alerts, st.Key, month))})
	}
	for _, a := range alerts {
		out.Alerts = append(out.Alerts, Alert{Key: a.Key, Period: a.Period, Start: a.Start, Threshold: a.Threshold,
			Neurons: price.Neurons(a.UsedMicro), Budget: price.Neurons(a.BudgetMicro), Soft: a.Soft, RequestID: a.RequestID})
	}
	return out
}

// writeKeyStore authorizes a change to a key's policy and returns the
// store, or writes the refusal and returns nil.
func (h *Handler) writeKeyStore(w http.ResponseWriter, r *http.Request) (KeyStore, string) {
	if h.cfg.AuthorizeWrite == nil {
		h.cfg.WriteError(w, r, &QueryError{Param: "key", Msg: "key policies cannot be changed here"})
		return nil, ""
	}
	tenant, err := h.cfg.AuthorizeWrite(r)
	if err != nil {
		h.cfg.WriteError(w, r, err)
		return nil, ""
	}
	ks, ok := h.src.(KeyStore)
	if !ok {
		h.cfg.WriteError(w, r, &QueryError{Param: "key", Msg: "key policies are not stored here"})
		return nil, ""
	}
	return ks, tenant
}

// PutKey serves PUT .../ai/usage/keys/{key}: the key's policy
// (ledger.KeyPolicy as JSON; unknown fields refused), replacing any other.
func (h *Handler) PutKey(w http.ResponseWriter, r *http.Request) {
	ks, tenant := h.writeKeyStore(w, r)
	if ks == nil {
		return
	}
	key := r.PathValue("key")
	if !queue.ValidKey(key) {
		h.cfg.WriteError(w, r, &QueryError{Param: "key", Msg: fmt.Sprintf("%.80q: want 1 to %d letters, digits, '-' or '_'", key, queue.MaxKeyLen)})
		return
	}
	var p ledger.KeyPolicy
	dec := json.NewDecoder(io.LimitReader(r.Body, MaxPolicyBytes+1))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		h.cfg.WriteError(w, r, &QueryError{Param: "body", Msg: "not a key policy: " + err.Error()})
		return
	}
	if dec.More() {
		h.cfg.WriteError(w, r, &QueryError{Param: "body", Msg: "more than one JSON value"})
		return
	}
	if p.Webhook != nil && h.cfg.CheckWebhook != nil {
		if err := h.cfg.CheckWebhook(r.Context(), p.Webhook); err != nil {
			h.cfg.WriteError(w, r, err)
			return
		}
	}
	if err := ks.SetKeyPolicy(r.Context(), tenant, key, p); err != nil {
		if errors.Is(err, ledger.ErrPolicy) {
			err = &QueryError{Param: "body", Msg: strings.TrimPrefix(err.Error(), ledger.ErrPolicy.Error()+": ")}
		}
		h.cfg.WriteError(w, r, err)
		return
	}
	h.writeKey(w, r, ks, tenant, key)
}

// writeKey answers with key's state after a change.
func (h *Handler) writeKey(w http.ResponseWriter, r *http.Request, ks KeyStore, tenant, key string) {
	now := h.cfg.Now().UTC()
	states, err := ks.Keys(r.Context(), tenant, now)
	if err != nil {
		h.cfg.WriteError(w, r, err)
		return
	}
	for _, st := range states {
		if st.Key == key {
			writeJSON(w, keysOf([]ledger.KeyState{st}, nil, now).Keys[0])
			return
		}
	}
	writeJSON(w, map[string]string{"key": key, "deleted": "true"})
}

// DeleteKey serves DELETE .../ai/usage/keys/{key}: the key keeps only the
// tenant's limits.
func (h *Handler) DeleteKey(w http.ResponseWriter, r *http.Request) {
	ks, tenant := h.writeKeyStore(w, r)
	if ks == nil {
		return
	}
	key := r.PathValue("key")
	if !queue.ValidKey(key) {
		h.cfg.WriteError(w, r, &QueryError{Param: "key", Msg: fmt.Sprintf("%.80q is not a key", key)})
		return
	}
	if err := ks.DeleteKeyPolicy(r.Context(), tenant, key); err != nil {
		h.cfg.WriteError(w, r, err)
		return
	}
	h.writeKey(w, r, ks, tenant, key)
}

package meter

import "github.com/prometheus/client_golang/prometheus"

// RegisterMetrics exports m's counts (Stats) on reg as
// bulkhead_billing_events_total by result: counted, duplicate, rejected and
// retried.
func (m *Meter) RegisterMetrics(reg prometheus.Registerer) error {
	for _, r := range []struct {
		result string
		count  func(Stats) int64
	}{
		{"counted", func(s Stats) int64 { return s.Counted }},
		{"duplicate", func(s Stats) int64 { return s.Duplicates }},
		{"rejected", func(s Stats) int64 { return s.Rejected }},
		{"retried", func(s Stats) int64 { return s.Retried }},
	} {
		c := prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "bulkhead_billing_events_total",
			Help:        "Usage events the billing consumer handled, by result.",
			ConstLabels: prometheus.Labels{"result": r.result}},
			func() float64 { return float64(r.count(m.Stats())) })
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// Package promtest reads what a Prometheus registry holds, for tests: every
// series with its labels, or the sum of one metric's series that carry
// some labels. It is test support: nothing in the product imports it.
package promtest

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Series is one time series of a gathered family.
type Series struct {
	Name   string            // the family's name
	Labels map[string]string // its labels, constant ones included
	Value  float64           // a counter's or gauge's value; a histogram's or summary's sample count
}

// Gather returns every series g holds, failing t if gathering fails.
func Gather(t testing.TB, g prometheus.Gatherer) []Series {
	t.Helper()
	families, err := g.Gather()
	if err != nil {
		t.Fatalf("gathering metrics: %v", err)
	}
	var out []Series
	for _, f := range families {
		for _, m := range f.GetMetric() {
			labels := make(map[string]string, len(m.GetLabel()))
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			out = append(out, Series{Name: f.GetName(), Labels: labels, Value: value(m)})
		}
	}
	return out
}

// Sum returns the sum of the values of name's series whose labels include
// every pair of labels (all of name's series when labels is empty); 0 when
// none match.
func Sum(t testing.TB, g prometheus.Gatherer, name string, labels map[string]string) float64 {
	t.Helper()
	var sum float64
next:
	for _, s := range Gather(t, g) {
		if s.Name != name {
			continue
		}
		for k, v := range labels {
			if s.Labels[k] != v {
				continue next
			}
		}
		sum += s.Value
	}
	return sum
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Histogram != nil:
		return float64(m.Histogram.GetSampleCount())
	case m.Summary != nil:
		return float64(m.Summary.GetSampleCount())
	case m.Untyped != nil:
		return m.Untyped.GetValue()
	}
	return 0
}

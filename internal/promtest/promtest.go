// Package promtest reads a /metrics answer in tests with Prometheus's official text parser
// (github.com/prometheus/common/expfmt), so that a test checks what a scraper would read.
package promtest

import (
	"strings"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Metrics is a parsed exposition.
type Metrics struct {
	t    testing.TB
	body string
	// value finds a sample by family name and label pairs: a gauge's or a counter's value, or a
	// histogram's or a summary's sample count.
	value func(name string, labels []string) (float64, bool)
	has   func(name string) bool
}

// Parse parses body, failing the test when the official parser refuses it.
func Parse(t testing.TB, body []byte) Metrics {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		t.Fatalf("the Prometheus text parser refuses the exposition: %v\n%s", err, body)
	}
	m := Metrics{t: t, body: string(body)}
	m.has = func(name string) bool { return fams[name] != nil }
	m.value = func(name string, labels []string) (float64, bool) {
		f := fams[name]
		if f == nil {
			return 0, false
		}
	metrics:
		for _, s := range f.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				found := false
				for _, l := range s.GetLabel() {
					found = found || (l.GetName() == labels[i] && l.GetValue() == labels[i+1])
				}
				if !found {
					continue metrics
				}
			}
			switch {
			case s.Gauge != nil:
				return s.GetGauge().GetValue(), true
			case s.Counter != nil:
				return s.GetCounter().GetValue(), true
			case s.Histogram != nil:
				return float64(s.GetHistogram().GetSampleCount()), true
			case s.Summary != nil:
				return float64(s.GetSummary().GetSampleCount()), true
			case s.Untyped != nil:
				return s.GetUntyped().GetValue(), true
			}
		}
		return 0, false
	}
	return m
}

// Value is the sample of family name whose labels include the name/value pairs labels; the test
// fails when there is none.
func (m Metrics) Value(name string, labels ...string) float64 {
	m.t.Helper()
	v, ok := m.value(name, labels)
	if !ok {
		m.t.Fatalf("no %s%v in\n%s", name, labels, m.body)
	}
	return v
}

// Has says whether the exposition holds the family name.
func (m Metrics) Has(name string) bool { return m.has(name) }

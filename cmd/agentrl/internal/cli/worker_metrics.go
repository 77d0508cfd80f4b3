package cli

import (
	"net/http"
	"sync/atomic"

	"github.com/agentrl/agentrl/dist"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// workerMetrics is `agentrl worker --metrics`: Prometheus text of what the worker did, read
// from its counters when scraped. Until the worker has its first weights (live not yet called),
// it reports the process alone and agentrl_worker_ready 0.
type workerMetrics struct {
	run   string
	probe atomic.Pointer[workerProbe]
}

type workerProbe struct {
	stats   func() dist.WorkerStats
	version func() int32
}

var (
	workerEpisodesDesc = prometheus.NewDesc("agentrl_worker_tasks_total",
		"Tasks the worker finished, by outcome: stored (its trajectory published and the task acknowledged), returned (given back to the queue, e.g. at shutdown or on a failure to publish), terminated (refused as malformed or for another run).",
		[]string{"run", "outcome"}, nil)
	workerVersionDesc = prometheus.NewDesc("agentrl_worker_policy_version", "Policy version of the weights the worker generates with.", []string{"run"}, nil)
	workerReadyDesc   = prometheus.NewDesc("agentrl_worker_ready", "1 once the worker has loaded the run's weights and takes tasks.", []string{"run"}, nil)
)

// live is pipeline.WorkerOptions.Live.
func (m *workerMetrics) live(stats func() dist.WorkerStats, version func() int32) {
	m.probe.Store(&workerProbe{stats: stats, version: version})
}

func (m *workerMetrics) Describe(ch chan<- *prometheus.Desc) {
	ch <- workerEpisodesDesc
	ch <- workerVersionDesc
	ch <- workerReadyDesc
}

func (m *workerMetrics) Collect(ch chan<- prometheus.Metric) {
	p := m.probe.Load()
	if p == nil {
		ch <- prometheus.MustNewConstMetric(workerReadyDesc, prometheus.GaugeValue, 0, m.run)
		return
	}
	ch <- prometheus.MustNewConstMetric(workerReadyDesc, prometheus.GaugeValue, 1, m.run)
	st := p.stats()
	for _, o := range []struct {
		outcome string
		n       int64
	}{{"stored", st.Done}, {"returned", st.Nacked}, {"terminated", st.Terminated}} {
		ch <- prometheus.MustNewConstMetric(workerEpisodesDesc, prometheus.CounterValue, float64(o.n), m.run, o.outcome)
	}
	ch <- prometheus.MustNewConstMetric(workerVersionDesc, prometheus.GaugeValue, float64(p.version()), m.run)
}

// handler serves the worker's metrics with the process's and the Go runtime's.
func (m *workerMetrics) handler() http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(m, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
}

package serve

import (
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metrics are the server's Prometheus metrics, in a registry of its own (no global state).
type metrics struct {
	reg              *prometheus.Registry
	requests         *prometheus.CounterVec
	latency          *prometheus.HistogramVec
	ttft             prometheus.Histogram
	promptTokens     prometheus.Counter
	completionTokens prometheus.Counter
	queued, running  level
	weightUpdates    *prometheus.CounterVec
	handler          http.Handler
}

func newMetrics(s *Server) *metrics {
	reg := prometheus.NewRegistry()
	f := func(c prometheus.Collector) { reg.MustRegister(c) }
	m := &metrics{reg: reg}
	m.requests = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "agentrl_serve_requests_total",
		Help: "HTTP requests answered, by route and status code."}, []string{"route", "code"})
	m.latency = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "agentrl_serve_request_duration_seconds",
		Help: "Time from a request's arrival to its last byte, by route.", Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 14)}, []string{"route"})
	m.ttft = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "agentrl_serve_time_to_first_token_seconds",
		Help: "Time from submitting a generation to its first token (queueing and prefill).", Buckets: prometheus.ExponentialBuckets(0.0005, 2.5, 14)})
	m.promptTokens = prometheus.NewCounter(prometheus.CounterOpts{Name: "agentrl_serve_prompt_tokens_total", Help: "Prompt tokens of generation requests."})
	m.completionTokens = prometheus.NewCounter(prometheus.CounterOpts{Name: "agentrl_serve_completion_tokens_total", Help: "Tokens generated."})
	m.weightUpdates = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "agentrl_serve_weight_updates_total",
		Help: "Weight updates by result (ok, rewind: a newer epoch at a version not above the last, stale, failed)."}, []string{"result"})
	for _, c := range []prometheus.Collector{m.requests, m.latency, m.ttft, m.promptTokens, m.completionTokens, m.weightUpdates} {
		f(c)
	}
	f(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "agentrl_serve_slots", Help: "Sequences the engine decodes together."},
		func() float64 { return float64(s.opts.Slots) }))
	f(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "agentrl_serve_batch_occupancy", Help: "Running generations over slots."},
		func() float64 { return float64(m.running.Load()) / float64(s.opts.Slots) }))
	f(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "agentrl_serve_queue_depth", Help: "Generations waiting for a slot (no token yet)."},
		func() float64 { return float64(m.queued.Load()) }))
	f(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "agentrl_serve_running", Help: "Generations decoding in a slot."},
		func() float64 { return float64(m.running.Load()) }))
	f(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "agentrl_serve_model_version", Help: "Policy version of the weights in use."},
		func() float64 { return float64(s.Version()) }))
	f(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "agentrl_serve_weights_epoch", Help: "Epoch of the weights in use (the publishing trainer's; 0: none named)."},
		func() float64 { return float64(s.Epoch()) }))
	f(collectors.NewGoCollector())
	f(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	// OpenMetrics when the scraper's Accept header asks for it (Prometheus does), the text
	// format otherwise.
	m.handler = promhttp.HandlerFor(reg, promhttp.HandlerOpts{EnableOpenMetrics: true})
	return m
}

// level is a gauge kept as an atomic, read by the GaugeFuncs.
type level struct{ atomic.Int64 }

func (l *level) Inc() { l.Add(1) }
func (l *level) Dec() { l.Add(-1) }

func (m *metrics) observe(route string, status int, d time.Duration) {
	if status == 0 {
		status = http.StatusOK
	}
	m.requests.WithLabelValues(route, strconv.Itoa(status)).Inc()
	m.latency.WithLabelValues(route).Observe(d.Seconds())
}

func (s *Server) handleMetrics(w http.ResponseWriter, r *http.Request) error {
	s.met.handler.ServeHTTP(w, r)
	return nil
}

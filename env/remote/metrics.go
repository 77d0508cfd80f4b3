package remote

import (
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// serverMetrics are the server's Prometheus metrics (GET /metrics), in a registry of its own.
type serverMetrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	ended    *prometheus.CounterVec
	handler  http.Handler
}

func newServerMetrics(s *Server) *serverMetrics {
	reg := prometheus.NewRegistry()
	m := &serverMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "agentrl_env_requests_total",
			Help: "Requests answered, by route and HTTP status code."}, []string{"route", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "agentrl_env_request_duration_seconds",
			Help:    "Time from a request's arrival to its answer, by route (a reset or step includes the environment's work).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2.5, 14)}, []string{"route"}),
		ended: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "agentrl_env_sessions_ended_total",
			Help: "Sessions the server ended itself, by reason: expired (idle past the idle timeout) or evicted (to make room for a reset)."}, []string{"reason"}),
	}
	reg.MustRegister(m.requests, m.duration, m.ended,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "agentrl_env_sessions", Help: "Live sessions."},
			func() float64 { return float64(s.Sessions()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "agentrl_env_max_sessions", Help: "Most sessions open at once."},
			func() float64 { return float64(s.opts.MaxSessions) }),
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.ended.WithLabelValues("expired")
	m.ended.WithLabelValues("evicted")
	m.handler = promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	return m
}

func (m *serverMetrics) observe(route string, status int, d time.Duration) {
	if status == 0 {
		status = http.StatusOK
	}
	m.requests.WithLabelValues(route, strconv.Itoa(status)).Inc()
	m.duration.WithLabelValues(route).Observe(d.Seconds())
}

// statusWriter remembers the status code a handler answered with.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

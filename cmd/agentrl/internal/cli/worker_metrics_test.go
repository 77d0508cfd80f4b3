package cli

import (
	"io"
	"net/http/httptest"
	"testing"

	"github.com/agentrl/agentrl/dist"
	"github.com/agentrl/agentrl/internal/promtest"
)

// agentrl worker's /metrics is Prometheus text the official parser reads: not ready before the
// worker has weights, then its task counters and policy version as the worker's probe reads them.
func TestWorkerMetrics(t *testing.T) {
	m := &workerMetrics{run: "calc"}
	h := m.handler()
	scrape := func() promtest.Metrics {
		t.Helper()
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		body, _ := io.ReadAll(rec.Body)
		return promtest.Parse(t, body)
	}
	before := scrape()
	if v := before.Value("agentrl_worker_ready", "run", "calc"); v != 0 {
		t.Fatalf("ready %v before the worker started", v)
	}
	if before.Has("agentrl_worker_tasks_total") || !before.Has("process_cpu_seconds_total") {
		t.Fatal("before the worker starts: want the process's metrics and no task counters")
	}
	stats := dist.WorkerStats{Done: 7, Nacked: 2, Terminated: 1}
	version := int32(3)
	m.live(func() dist.WorkerStats { return stats }, func() int32 { return version })
	stats.Done, version = 9, 4 // read when scraped
	got := scrape()
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"agentrl_worker_ready", []string{"run", "calc"}, 1},
		{"agentrl_worker_tasks_total", []string{"run", "calc", "outcome", "stored"}, 9},
		{"agentrl_worker_tasks_total", []string{"outcome", "returned"}, 2},
		{"agentrl_worker_tasks_total", []string{"outcome", "terminated"}, 1},
		{"agentrl_worker_policy_version", []string{"run", "calc"}, 4},
	} {
		if v := got.Value(c.name, c.labels...); v != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, v, c.want)
		}
	}
}

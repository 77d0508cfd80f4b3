package remote

import (
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/agentrl/agentrl/internal/promtest"
)

// GET /metrics is Prometheus text that the official parser reads: requests by route and status,
// their durations, live sessions and the sessions the server expired.
func TestServerMetrics(t *testing.T) {
	ts := newTestServer(t, ServerOptions{IdleTimeout: time.Minute})
	_, a := ts.do(t, "POST", "/reset", `{"seed":1}`)
	ts.do(t, "POST", "/reset", `{"seed":2}`)
	ts.do(t, "POST", "/step", `{"session_id":"`+a["session_id"].(string)+`","action":"50"}`)
	ts.do(t, "POST", "/step", `{"session_id":"nope","action":"1"}`)
	ts.clock.Advance(2 * time.Minute)
	ts.ExpireIdle()
	ts.do(t, "POST", "/reset", `{"seed":3}`)

	resp, err := http.Get(ts.http.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET /metrics: %d %s", resp.StatusCode, body)
	}
	m := promtest.Parse(t, body)
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"agentrl_env_requests_total", []string{"route", "/reset", "code", "200"}, 3},
		{"agentrl_env_requests_total", []string{"route", "/step", "code", "200"}, 1},
		{"agentrl_env_requests_total", []string{"route", "/step", "code", "404"}, 1},
		{"agentrl_env_request_duration_seconds", []string{"route", "/step"}, 2},
		{"agentrl_env_sessions", nil, 1},
		{"agentrl_env_max_sessions", nil, 256},
		{"agentrl_env_sessions_ended_total", []string{"reason", "expired"}, 2},
		{"agentrl_env_sessions_ended_total", []string{"reason", "evicted"}, 0},
	} {
		if got := m.Value(c.name, c.labels...); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	if !m.Has("process_cpu_seconds_total") || !m.Has("go_goroutines") {
		t.Error("no process or Go runtime metrics")
	}
}

package remote

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeClock is a settable clock for idle expiry.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }

func (c *fakeClock) Advance(d time.Duration) { c.mu.Lock(); c.now = c.now.Add(d); c.mu.Unlock() }

type testServer struct {
	*Server
	http    *httptest.Server
	release chan struct{}
	news    atomic.Int64
	closes  atomic.Int64
	clock   *fakeClock
}

func newTestServer(t *testing.T, opts ServerOptions) *testServer {
	t.Helper()
	ts := &testServer{release: make(chan struct{}), clock: &fakeClock{now: time.Unix(1e9, 0)}}
	if opts.Clock == nil {
		opts.Clock = ts.clock
	}
	srv, err := NewServer(guessSpec(ts.release, &ts.news, &ts.closes), opts)
	if err != nil {
		t.Fatal(err)
	}
	ts.Server = srv
	ts.http = httptest.NewServer(srv)
	t.Cleanup(func() {
		close(ts.release)
		ts.http.Close()
		srv.Close()
	})
	return ts
}

// do sends a raw request and decodes the JSON answer.
func (ts *testServer) do(t *testing.T, method, path, body string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, ts.http.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("%s %s: content type %q, body %s", method, path, ct, raw)
	}
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("%s %s: answer is not JSON: %s", method, path, raw)
	}
	return resp.StatusCode, out
}

func errCode(m map[string]any) string {
	e, _ := m["error"].(map[string]any)
	c, _ := e["code"].(string)
	return c
}

func TestServerRequests(t *testing.T) {
	ts := newTestServer(t, ServerOptions{MaxBodyBytes: 1024})
	_, opened := ts.do(t, "POST", "/reset", `{"seed": 5}`)
	id, _ := opened["session_id"].(string)
	if id == "" {
		t.Fatalf("reset answer %v", opened)
	}
	_, done := ts.do(t, "POST", "/reset", `{"seed": 6, "session_id": "done-1"}`)
	if done["session_id"] != "done-1" {
		t.Fatalf("chosen session id not kept: %v", done)
	}
	for _, g := range []string{"0", "50", "25", "75", "12", "37", "62", "87"} {
		ts.do(t, "POST", "/step", `{"session_id":"done-1","action":"`+g+`"}`)
	}
	cases := []struct {
		name, method, path, body string
		status                   int
		code                     string
	}{
		{"health", "GET", "/health", "", 200, ""},
		{"metadata", "GET", "/metadata", "", 200, ""},
		{"schema", "GET", "/schema", "", 200, ""},
		{"state", "GET", "/state?session_id=" + id, "", 200, ""},
		{"step", "POST", "/step", `{"session_id":"` + id + `","action":"50"}`, 200, ""},
		{"unknown path", "GET", "/nope", "", 404, CodeNotFound},
		{"wrong method", "GET", "/step", "", 405, CodeMethodNotAllowed},
		{"wrong method reset", "PUT", "/reset", `{"seed":1}`, 405, CodeMethodNotAllowed},
		{"bad json", "POST", "/step", `{"session_id":`, 400, CodeBadRequest},
		{"unknown field", "POST", "/reset", `{"seed":1,"sed":2}`, 400, CodeBadRequest},
		{"trailing data", "POST", "/reset", `{"seed":1} {"seed":2}`, 400, CodeBadRequest},
		{"missing seed", "POST", "/reset", `{}`, 400, CodeBadRequest},
		{"seed not integer", "POST", "/reset", `{"seed":1.5}`, 400, CodeBadRequest},
		{"bad session id", "POST", "/reset", `{"seed":1,"session_id":"a b"}`, 400, CodeBadRequest},
		{"duplicate session", "POST", "/reset", `{"seed":1,"session_id":"done-1"}`, 409, CodeSessionExists},
		{"missing action", "POST", "/step", `{"session_id":"` + id + `"}`, 400, CodeBadRequest},
		{"missing session", "POST", "/step", `{"action":"1"}`, 400, CodeBadRequest},
		{"unknown session", "POST", "/step", `{"session_id":"nope","action":"1"}`, 404, CodeSessionNotFound},
		{"state unknown", "GET", "/state?session_id=nope", "", 404, CodeSessionNotFound},
		{"too large", "POST", "/step", `{"session_id":"` + id + `","action":"` + strings.Repeat("x", 2000) + `"}`, 413, CodeTooLarge},
		{"after done", "POST", "/step", `{"session_id":"done-1","action":"1"}`, 409, CodeEpisodeDone},
		{"env error", "POST", "/step", `{"session_id":"` + id + `","action":"crash"}`, 500, CodeEnvError},
		{"close delete", "DELETE", "/close?session_id=done-1", "", 200, ""},
		{"closed session", "GET", "/state?session_id=done-1", "", 404, CodeSessionNotFound},
		{"close post", "POST", "/close", `{"session_id":"` + id + `"}`, 200, ""},
		{"close again", "POST", "/close", `{"session_id":"` + id + `"}`, 404, CodeSessionNotFound},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			status, body := ts.do(t, c.method, c.path, c.body)
			if status != c.status || errCode(body) != c.code {
				t.Fatalf("%s %s: %d %v, want %d %q", c.method, c.path, status, body, c.status, c.code)
			}
			if status >= 400 {
				if msg, _ := body["error"].(map[string]any)["message"].(string); msg == "" {
					t.Fatalf("error without a message: %v", body)
				}
			}
		})
	}
}

func TestServerMetadataAndSchema(t *testing.T) {
	ts := newTestServer(t, ServerOptions{IdleTimeout: time.Minute, MaxSessions: 3})
	_, md := ts.do(t, "GET", "/metadata", "")
	want := map[string]any{"name": "guess", "protocol": float64(ProtocolVersion), "max_sessions": float64(3),
		"idle_timeout_ms": float64(60000), "train": map[string]any{"lo": float64(0), "hi": float64(1000)}}
	for k, v := range want {
		got, _ := json.Marshal(md[k])
		exp, _ := json.Marshal(v)
		if string(got) != string(exp) {
			t.Errorf("metadata %s = %s, want %s", k, got, exp)
		}
	}
	_, schema := ts.do(t, "GET", "/schema", "")
	for _, k := range []string{"action", "observation", "transition", "state", "reset_request", "step_request", "error"} {
		if _, ok := schema[k].(map[string]any); !ok {
			t.Errorf("schema lacks %q", k)
		}
	}
}

func TestServerIdleExpiry(t *testing.T) {
	ts := newTestServer(t, ServerOptions{IdleTimeout: time.Minute})
	_, a := ts.do(t, "POST", "/reset", `{"seed":1}`)
	ts.clock.Advance(40 * time.Second)
	_, b := ts.do(t, "POST", "/reset", `{"seed":2}`)
	ts.clock.Advance(30 * time.Second) // a idle 70s, b 30s
	if n := ts.ExpireIdle(); n != 1 {
		t.Fatalf("expired %d sessions, want 1", n)
	}
	status, body := ts.do(t, "POST", "/step", `{"session_id":"`+a["session_id"].(string)+`","action":"1"}`)
	if status != 410 || errCode(body) != CodeSessionExpired {
		t.Fatalf("step on expired session: %d %v", status, body)
	}
	if status, _ := ts.do(t, "POST", "/step", `{"session_id":"`+b["session_id"].(string)+`","action":"1"}`); status != 200 {
		t.Fatalf("live session: %d", status)
	}
	if ts.Sessions() != 1 {
		t.Fatalf("%d sessions, want 1", ts.Sessions())
	}
}

func TestServerMaxSessions(t *testing.T) {
	ts := newTestServer(t, ServerOptions{MaxSessions: 2, IdleTimeout: time.Minute})
	ts.do(t, "POST", "/reset", `{"seed":1}`)
	ts.do(t, "POST", "/reset", `{"seed":2}`)
	status, body := ts.do(t, "POST", "/reset", `{"seed":3}`)
	if status != 503 || errCode(body) != CodeTooManySessions {
		t.Fatalf("third session: %d %v", status, body)
	}
	ts.clock.Advance(2 * time.Minute) // idle sessions make room for a new one
	if status, body := ts.do(t, "POST", "/reset", `{"seed":3}`); status != 200 {
		t.Fatalf("after expiry: %d %v", status, body)
	}
}

func TestServerReusesEnvironments(t *testing.T) {
	ts := newTestServer(t, ServerOptions{MaxIdleEnvs: 2})
	for i := range 10 {
		_, r := ts.do(t, "POST", "/reset", `{"seed":`+string(rune('0'+i))+`}`)
		ts.do(t, "POST", "/close", `{"session_id":"`+r["session_id"].(string)+`"}`)
	}
	if n := ts.news.Load(); n != 1 {
		t.Fatalf("made %d environments for 10 sequential sessions, want 1", n)
	}
	// A session whose env failed does not give the env back.
	_, r := ts.do(t, "POST", "/reset", `{"seed":1}`)
	ts.do(t, "POST", "/step", `{"session_id":"`+r["session_id"].(string)+`","action":"crash"}`)
	ts.do(t, "POST", "/close", `{"session_id":"`+r["session_id"].(string)+`"}`)
	ts.do(t, "POST", "/reset", `{"seed":1}`)
	if n, c := ts.news.Load(), ts.closes.Load(); n != 2 || c != 1 {
		t.Fatalf("after a failure: %d made, %d closed; want 2 and 1", n, c)
	}
	ts.Close()
	if n, c := ts.news.Load(), ts.closes.Load(); c != n {
		t.Fatalf("after Close: %d made, %d closed", n, c)
	}
	if status, body := ts.do(t, "POST", "/reset", `{"seed":1}`); status != 503 || errCode(body) != CodeShuttingDown {
		t.Fatalf("reset after Close: %d %v", status, body)
	}
}

func TestNewServerRejectsBadOptions(t *testing.T) {
	for name, o := range map[string]ServerOptions{
		"idle": {IdleTimeout: -1}, "sessions": {MaxSessions: -1}, "body": {MaxBodyBytes: -1}, "step": {StepTimeout: -1},
		"read header": {ReadHeaderTimeout: -1}, "read": {ReadTimeout: -1}, "write": {WriteTimeout: -1}, "conn idle": {ConnIdleTimeout: -1},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := NewServer(guessSpec(nil, nil, nil), o); err == nil {
				t.Fatal("accepted")
			}
		})
	}
}

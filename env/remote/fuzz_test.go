package remote

import (
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// Any request body on any endpoint gets a JSON answer: 2xx, or a 4xx for the client's mistake,
// or a 5xx only when the environment itself failed or timed out (the guess env's "crash" and
// "hang"). Never a panic.
func FuzzServerRequest(f *testing.F) {
	for _, s := range []struct{ method, path, body string }{
		{"POST", "/reset", `{"seed":1}`},
		{"POST", "/reset", `{"seed":1,"session_id":"a"}`},
		{"POST", "/reset", `{"seed":"1"}`},
		{"POST", "/reset", `{"seed":1}{"seed":2}`},
		{"POST", "/step", `{"session_id":"a","action":"5"}`},
		{"POST", "/step", `{"session_id":"a","action":{"b64":"/w=="}}`},
		{"POST", "/step", `{"session_id":"a","action":{"b64":"%%"}}`},
		{"POST", "/step", `{"session_id":"a","action":"crash"}`},
		{"POST", "/step", `{"session_id":"a","action":null,"x":1}`},
		{"GET", "/state?session_id=a", ``},
		{"POST", "/close", `{"session_id":"a"}`},
		{"DELETE", "/close?session_id=a", ``},
		{"GET", "/metadata", ``},
		{"PUT", "/health", `[]`},
		{"POST", "/reset", "\xff\xfe"},
	} {
		f.Add(s.method, s.path, s.body)
	}
	srv, err := NewServer(guessSpec(nil, nil, nil), ServerOptions{MaxSessions: 4, MaxBodyBytes: 1 << 12, StepTimeout: time.Second})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { srv.Close() })
	f.Fuzz(func(t *testing.T, method, path, body string) {
		if !strings.HasPrefix(path, "/") {
			path = "/" + path
		}
		req, err := http.NewRequest(method, "http://x"+path, strings.NewReader(body))
		if err != nil {
			return // not a request a client could send
		}
		w := httptest.NewRecorder()
		srv.ServeHTTP(w, req)
		if !json.Valid(w.Body.Bytes()) {
			t.Fatalf("%s %s %q: answer is not JSON: %q", method, path, body, w.Body.String())
		}
		if w.Code >= 500 && !strings.Contains(body, "crash") && !strings.Contains(body, "hang") {
			t.Fatalf("%s %s %q: %d %s", method, path, body, w.Code, w.Body.String())
		}
		// Keep the table from filling up with the fuzzer's sessions.
		for _, id := range openSessions(srv) {
			srv.endSession(id)
		}
	})
}

func openSessions(s *Server) []*session {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*session, 0, len(s.sessions))
	for _, sess := range s.sessions {
		out = append(out, sess)
	}
	return out
}

// The wire's text and number decoders accept what the encoders write and refuse the rest without
// panicking; what they accept re-encodes to a value that decodes the same.
func FuzzWireValues(f *testing.F) {
	for _, s := range []string{`"a"`, `{"b64":"/w=="}`, `{"b64":1}`, `"NaN"`, `"+Inf"`, `1e400`, `-0`, `null`, `[]`, `"\ud800"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var s text
		if err := json.Unmarshal(data, &s); err == nil {
			b, err := json.Marshal(s)
			if err != nil {
				t.Fatalf("text %q: re-encode: %v", s, err)
			}
			var back text
			if err := json.Unmarshal(b, &back); err != nil || back != s {
				t.Fatalf("text %q → %s → %q, %v", s, b, back, err)
			}
		}
		var n number
		if err := json.Unmarshal(data, &n); err == nil {
			b, err := json.Marshal(n)
			if err != nil {
				t.Fatalf("number %v: re-encode: %v", n, err)
			}
			var back number
			if err := json.Unmarshal(b, &back); err != nil || math.Float64bits(float64(back)) != math.Float64bits(float64(n)) {
				t.Fatalf("number %v → %s → %v, %v", n, b, back, err)
			}
		}
	})
}

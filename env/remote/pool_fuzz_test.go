package remote

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/agentrl/agentrl/env"
)

// A pool given any answer to /metadata, /reset or /step (any status, any body) returns a result
// or an error, never panics or hangs; a reset that fails, a step that fails and a metadata that
// is refused are errors, and an accepted step has a finite reward or is refused. The default
// suite runs the seeds; `go test -run=^$ -fuzz=FuzzPoolAnswers ./env/remote` explores.
func FuzzPoolAnswers(f *testing.F) {
	good := `{"protocol":1,"name":"g","train":{"lo":0,"hi":10},"heldout":{"lo":10,"hi":20}}`
	for _, s := range []struct {
		route  string
		status int
		body   string
	}{
		{"/step", 200, `{"session_id":"s","observation":"ok","role":"env","reward":1,"done":true,"info":{"success":"true"}}`},
		{"/step", 200, `<html><body>hello</body></html>`},
		{"/step", 200, `{"session_id":"s","observation":{"b64":"/w=="},"role":"tool","reward":"NaN","done":false}`},
		{"/step", 200, `{"role":"assistant"}`},
		{"/step", 500, `{"error":{"code":"env_error","message":"boom"}}`},
		{"/step", 200, `{"reward":1e999}`},
		{"/reset", 200, `{"session_id":"","observation":{"system":"a","text":"b"}}`},
		{"/reset", 409, `{"error":{"code":"session_exists"}}`},
		{"/reset", 200, `[]`},
		{"/metadata", 200, `{"protocol":1,"name":"g","train":{"lo":0,"hi":10},"heldout":{"lo":5,"hi":20}}`},
		{"/metadata", 200, `{"protocol":1,"name":"g","train":{"lo":0,"hi":10},"heldout":{"lo":10,"hi":20},"tools":[{"name":""}]}`},
		{"/metadata", 200, good},
		{"/metadata", 404, `not found`},
	} {
		f.Add(s.route, s.status, []byte(s.body))
	}
	var mu sync.Mutex
	var route string
	var status int
	var body []byte
	srv, err := NewServer(guessSpec(nil, nil, nil), ServerOptions{})
	if err != nil {
		f.Fatal(err)
	}
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		rt, st, b := route, status, body
		mu.Unlock()
		if r.URL.Path == rt {
			w.WriteHeader(st)
			w.Write(b)
			return
		}
		srv.ServeHTTP(w, r)
	}))
	f.Cleanup(func() {
		hs.Close()
		srv.Close()
	})
	f.Fuzz(func(t *testing.T, rt string, st int, b []byte) {
		if st < 200 || st > 599 || len(b) > 1<<16 {
			return
		}
		mu.Lock()
		route, status, body = rt, st, b
		mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		p, err := OpenPool(ctx, "fz", PoolConfig{URL: hs.URL, Unreachable: 300 * time.Millisecond, Timeout: 2 * time.Second}, nil)
		if err != nil {
			if rt != "/metadata" {
				t.Fatalf("open with a sound /metadata: %v", err)
			}
			return
		}
		defer p.Close()
		if rt == "/metadata" && (st > 299 || checkMetadataJSON(b) != nil) {
			t.Fatalf("metadata %d %q accepted", st, b)
		}
		e, _ := p.Spec().New()
		defer e.(env.Closer).Close()
		if _, err := e.Reset(ctx, 1); err != nil {
			if rt != "/reset" && !errors.Is(err, ErrUnreachable) {
				t.Fatalf("reset with a sound /reset: %v", err)
			}
			return
		}
		tr, err := e.Step(ctx, "5")
		if err == nil && (math.IsNaN(tr.Reward) || math.IsInf(tr.Reward, 0)) && rt != "/step" {
			t.Fatalf("a non-finite reward %v from the guess env", tr.Reward)
		}
		if ctx.Err() != nil {
			t.Fatalf("the pool hung on %s %d %q", rt, st, b)
		}
	})
}

// checkMetadataJSON decodes and checks b as the client does.
func checkMetadataJSON(b []byte) error {
	var md Metadata
	if err := json.Unmarshal(b, &md); err != nil {
		return err
	}
	return checkMetadata(md)
}

package remote

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// A full server makes room by ending the least recently used session idle for at least
// EvictIdle, long before the idle timeout; its client hears why. Sessions used more recently are
// never evicted: then a full server still answers 503.
func TestServerEvictsLeastRecentlyUsed(t *testing.T) {
	ts := newTestServer(t, ServerOptions{MaxSessions: 3, IdleTimeout: 10 * time.Minute, EvictIdle: 30 * time.Second})
	id := func(m map[string]any) string { s, _ := m["session_id"].(string); return s }
	_, a := ts.do(t, "POST", "/reset", `{"seed":1}`)
	ts.clock.Advance(10 * time.Second)
	_, b := ts.do(t, "POST", "/reset", `{"seed":2}`)
	ts.clock.Advance(10 * time.Second)
	_, c := ts.do(t, "POST", "/reset", `{"seed":3}`)
	ts.clock.Advance(5 * time.Second) // a idle 25s, b 15s, c 5s: none evictable
	if status, body := ts.do(t, "POST", "/reset", `{"seed":4}`); status != 503 || errCode(body) != CodeTooManySessions {
		t.Fatalf("reset with every session recently used: %d %v", status, body)
	}
	ts.clock.Advance(30 * time.Second) // a idle 55s, b 45s, c 35s: all evictable
	if status, _ := ts.do(t, "POST", "/step", `{"session_id":"`+id(a)+`","action":"1"}`); status != 200 {
		t.Fatalf("step a: %d", status) // a is now the most recently used; b the least
	}
	status, d := ts.do(t, "POST", "/reset", `{"seed":4}`)
	if status != 200 {
		t.Fatalf("reset on a full server with idle sessions: %d %v", status, d)
	}
	status, body := ts.do(t, "POST", "/step", `{"session_id":"`+id(b)+`","action":"1"}`)
	msg, _ := body["error"].(map[string]any)["message"].(string)
	if status != 410 || errCode(body) != CodeSessionEvicted || !strings.Contains(msg, "evicted") || !strings.Contains(msg, "least recently used") {
		t.Fatalf("step on the evicted session: %d %v", status, body)
	}
	for _, s := range []map[string]any{a, c, d} {
		if status, body := ts.do(t, "POST", "/step", `{"session_id":"`+id(s)+`","action":"1"}`); status != 200 {
			t.Fatalf("step on a live session: %d %v", status, body)
		}
	}
	if ts.Sessions() != 3 {
		t.Fatalf("%d sessions, want 3", ts.Sessions())
	}
}

// A session in the middle of an environment call is in use, however long ago it last answered.
func TestServerNeverEvictsABusySession(t *testing.T) {
	ts := newTestServer(t, ServerOptions{MaxSessions: 2, EvictIdle: time.Second})
	_, a := ts.do(t, "POST", "/reset", `{"seed":1}`)
	ts.clock.Advance(time.Second)
	_, b := ts.do(t, "POST", "/reset", `{"seed":2}`)
	done := make(chan struct{})
	go func() {
		defer close(done)
		resp, err := http.Post(ts.http.URL+"/step", "application/json", strings.NewReader(`{"session_id":"`+a["session_id"].(string)+`","action":"hang"}`))
		if err == nil {
			resp.Body.Close()
		}
	}()
	for { // until the hanging step holds a
		if status, body := ts.do(t, "GET", "/state?session_id="+a["session_id"].(string), ""); status == 409 && errCode(body) == CodeSessionBusy {
			break
		}
		time.Sleep(time.Millisecond)
	}
	ts.clock.Advance(time.Minute)
	if status, body := ts.do(t, "POST", "/reset", `{"seed":3}`); status != 200 {
		t.Fatalf("reset: %d %v", status, body)
	}
	if status, body := ts.do(t, "POST", "/step", `{"session_id":"`+b["session_id"].(string)+`","action":"1"}`); status != 410 || errCode(body) != CodeSessionEvicted {
		t.Fatalf("b: %d %v, want it evicted rather than the busy a", status, body)
	}
	ts.http.CloseClientConnections() // ends the hanging step: its request's context ends
	<-done
}

// The client of an evicted session gets ErrSessionEvicted, and closing it is not an error.
func TestClientSessionEvicted(t *testing.T) {
	ctx := context.Background()
	ts := newTestServer(t, ServerOptions{MaxSessions: 1, EvictIdle: time.Second})
	a, b := dial(t, ts.http.URL, ClientOptions{}), dial(t, ts.http.URL, ClientOptions{})
	if _, err := a.Reset(ctx, 1); err != nil {
		t.Fatal(err)
	}
	ts.clock.Advance(2 * time.Second)
	if _, err := b.Reset(ctx, 2); err != nil {
		t.Fatalf("reset on a full server with an idle session: %v", err)
	}
	_, err := a.Step(ctx, "1")
	if !errors.Is(err, ErrSessionEvicted) || !strings.Contains(err.Error(), "evicted") {
		t.Fatalf("step on the evicted session: %v", err)
	}
	if err := a.Close(); err != nil {
		t.Fatalf("close of the evicted session: %v", err)
	}
}

// serveLoopback serves srv on a loopback port until the test ends.
func serveLoopback(t *testing.T, srv *Server) string {
	t.Helper()
	ln, err := Listen("127.0.0.1:0", false)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return ln.Addr().String()
}

// A client that sends its headers and then trickles the request (its body, or the headers
// themselves) is disconnected at the read timeouts, not kept for minutes.
func TestServeCutsOffSlowRequests(t *testing.T) {
	srv, err := NewServer(guessSpec(nil, nil, nil), ServerOptions{ReadHeaderTimeout: 200 * time.Millisecond, ReadTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	addr := serveLoopback(t, srv)
	for name, head := range map[string]string{
		"body":    "POST /step HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{",
		"headers": "POST /step HTTP/1.1\r\nHost: x\r\n",
	} {
		t.Run(name, func(t *testing.T) {
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			if _, err := io.WriteString(conn, head); err != nil {
				t.Fatal(err)
			}
			stop := make(chan struct{})
			defer close(stop)
			go func() { // a byte every 20ms: always sending, never done
				tick := time.NewTicker(20 * time.Millisecond)
				defer tick.Stop()
				for {
					select {
					case <-stop:
						return
					case <-tick.C:
						if _, err := io.WriteString(conn, " "); err != nil {
							return
						}
					}
				}
			}()
			// A generous bound: only "closed at all" is asserted, not how fast.
			conn.SetReadDeadline(time.Now().Add(20 * time.Second))
			_, err = io.Copy(io.Discard, conn)
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatalf("the server kept a trickling connection open for 20s with a %v read timeout", srv.opts.ReadTimeout)
			}
		})
	}
}

// The read timeout bounds reading the request, not the environment's work after it: a step that
// outlasts it is not cancelled.
func TestServeReadTimeoutSparesLongSteps(t *testing.T) {
	release := make(chan struct{})
	srv, err := NewServer(guessSpec(release, nil, nil), ServerOptions{ReadTimeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + serveLoopback(t, srv)
	c := dial(t, url, ClientOptions{})
	if _, err := c.Reset(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		_, err := c.Step(context.Background(), "hang")
		errc <- err
	}()
	for srv.Sessions() == 0 || !busy(srv) {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(5 * srv.opts.ReadTimeout) // the step runs well past the read timeout
	close(release)
	if err := <-errc; err == nil || !strings.Contains(err.Error(), "released") {
		t.Fatalf("step: %v, want the environment's own answer (released), not a cancellation", err)
	}
}

// busy reports whether some session of srv is in an environment call.
func busy(srv *Server) bool {
	srv.mu.Lock()
	defer srv.mu.Unlock()
	for _, sess := range srv.sessions {
		if !sess.mu.TryLock() {
			return true
		}
		sess.mu.Unlock()
	}
	return false
}

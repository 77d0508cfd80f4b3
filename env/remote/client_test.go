package remote

import (
	"context"
	"errors"
	"math"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentrl/agentrl/env"
	"github.com/agentrl/agentrl/traj"
)

func dial(t *testing.T, url string, opts ClientOptions) *Client {
	t.Helper()
	c, err := Dial(url, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// playLocal and playRemote must agree transition for transition.
func TestClientMatchesLocal(t *testing.T) {
	ts := newTestServer(t, ServerOptions{})
	spec := guessSpec(nil, nil, nil)
	c := dial(t, ts.http.URL, ClientOptions{})
	ctx := context.Background()
	for seed := int64(0); seed < 20; seed++ {
		local, _ := spec.New()
		want, err := env.Play(ctx, local, spec.Expert(seed, 0.3, expertRand(seed)), seed, 20)
		if err != nil {
			t.Fatal(err)
		}
		got, err := env.Play(ctx, c, spec.Expert(seed, 0.3, expertRand(seed)), seed, 20)
		if err != nil {
			t.Fatal(err)
		}
		if !equalEpisodes(want, got) {
			t.Fatalf("seed %d: remote episode %+v differs from local %+v", seed, got, want)
		}
	}
}

func TestClientCarriesExactValues(t *testing.T) {
	ts := newTestServer(t, ServerOptions{})
	c := dial(t, ts.http.URL, ClientOptions{})
	ctx := context.Background()
	if _, err := c.Reset(ctx, 1); err != nil {
		t.Fatal(err)
	}
	for _, action := range []string{"echo \xff\xfe\x00 bytes", "echo plain \"quoted\" \u2028 text", "echo " + strings.Repeat("é", 1000)} {
		tr, err := c.Step(ctx, action)
		if err != nil {
			t.Fatal(err)
		}
		if tr.Observation != action || tr.Role != traj.RoleTool || tr.Info["raw"] != action ||
			len(tr.ToolCalls) != 1 || tr.ToolCalls[0].Arguments != action {
			t.Fatalf("echo of %q came back as %+v", action, tr)
		}
	}
	tr, err := c.Step(ctx, "nan")
	if err != nil || !math.IsNaN(tr.Reward) {
		t.Fatalf("NaN reward: %v %v", tr.Reward, err)
	}
}

func TestClientErrors(t *testing.T) {
	ctx := context.Background()
	t.Run("step before reset", func(t *testing.T) {
		ts := newTestServer(t, ServerOptions{})
		c := dial(t, ts.http.URL, ClientOptions{})
		if _, err := c.Step(ctx, "1"); !errors.Is(err, env.ErrNotReset) {
			t.Fatalf("err %v", err)
		}
	})
	t.Run("step after done", func(t *testing.T) {
		ts := newTestServer(t, ServerOptions{})
		c := dial(t, ts.http.URL, ClientOptions{})
		c.Reset(ctx, 3)
		var tr env.Transition
		var err error
		for i := 0; !tr.Done && err == nil; i++ {
			tr, err = c.Step(ctx, "x")
		}
		if _, err := c.Step(ctx, "1"); !errors.Is(err, env.ErrEpisodeDone) {
			t.Fatalf("err %v", err)
		}
	})
	t.Run("env crash", func(t *testing.T) {
		ts := newTestServer(t, ServerOptions{})
		c := dial(t, ts.http.URL, ClientOptions{})
		c.Reset(ctx, 3)
		_, err := c.Step(ctx, "crash")
		var re *Error
		if !errors.Is(err, ErrEnv) || !errors.As(err, &re) || re.Status != 500 || !strings.Contains(re.Message, "simulator crashed") {
			t.Fatalf("err %v", err)
		}
	})
	t.Run("server killed mid-episode", func(t *testing.T) {
		ts := newTestServer(t, ServerOptions{})
		c := dial(t, ts.http.URL, ClientOptions{})
		if _, err := c.Reset(ctx, 3); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Step(ctx, "50"); err != nil {
			t.Fatal(err)
		}
		ts.http.CloseClientConnections()
		ts.http.Close()
		tr, err := c.Step(ctx, "25")
		if err == nil {
			t.Fatalf("step on a dead server returned %+v", tr)
		}
	})
	t.Run("hanging server times out", func(t *testing.T) {
		ts := newTestServer(t, ServerOptions{})
		c := dial(t, ts.http.URL, ClientOptions{Timeout: 100 * time.Millisecond})
		c.Reset(ctx, 3)
		_, err := c.Step(ctx, "hang")
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err %v, want a deadline", err)
		}
	})
	t.Run("env timeout on the server", func(t *testing.T) {
		ts := newTestServer(t, ServerOptions{StepTimeout: 50 * time.Millisecond})
		c := dial(t, ts.http.URL, ClientOptions{})
		c.Reset(ctx, 3)
		_, err := c.Step(ctx, "hang")
		var re *Error
		if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, ErrEnv) || !errors.As(err, &re) || re.Status != 504 {
			t.Fatalf("err %v", err)
		}
	})
	t.Run("caller context", func(t *testing.T) {
		ts := newTestServer(t, ServerOptions{})
		c := dial(t, ts.http.URL, ClientOptions{})
		c.Reset(ctx, 3)
		cctx, cancel := context.WithCancel(ctx)
		go func() { time.Sleep(20 * time.Millisecond); cancel() }()
		if _, err := c.Step(cctx, "hang"); !errors.Is(err, context.Canceled) {
			t.Fatalf("err %v", err)
		}
	})
	t.Run("expired session", func(t *testing.T) {
		ts := newTestServer(t, ServerOptions{IdleTimeout: time.Minute})
		c := dial(t, ts.http.URL, ClientOptions{})
		c.Reset(ctx, 3)
		ts.clock.Advance(2 * time.Minute)
		ts.ExpireIdle()
		_, err := c.Step(ctx, "1")
		if !errors.Is(err, ErrSessionExpired) || !strings.Contains(err.Error(), "expired") {
			t.Fatalf("err %v", err)
		}
		if _, err := c.Reset(ctx, 4); err != nil {
			t.Fatalf("reset after expiry: %v", err)
		}
	})
	t.Run("oversized action", func(t *testing.T) {
		ts := newTestServer(t, ServerOptions{MaxBodyBytes: 4096})
		c := dial(t, ts.http.URL, ClientOptions{})
		c.Reset(ctx, 3)
		_, err := c.Step(ctx, strings.Repeat("9", 5000))
		var re *Error
		if !errors.Is(err, ErrTooLarge) || !errors.As(err, &re) || re.Status != 413 {
			t.Fatalf("err %v", err)
		}
	})
	t.Run("full server", func(t *testing.T) {
		ts := newTestServer(t, ServerOptions{MaxSessions: 1})
		a, b := dial(t, ts.http.URL, ClientOptions{}), dial(t, ts.http.URL, ClientOptions{})
		a.Reset(ctx, 1)
		if _, err := b.Reset(ctx, 2); !errors.Is(err, ErrUnavailable) {
			t.Fatalf("err %v", err)
		}
	})
	t.Run("not a server", func(t *testing.T) {
		hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Write([]byte("<html>hello</html>"))
		}))
		defer hs.Close()
		c := dial(t, hs.URL, ClientOptions{})
		if _, err := c.Reset(ctx, 1); !errors.Is(err, ErrProtocol) {
			t.Fatalf("err %v", err)
		}
		if _, err := Spec(hs.URL, ClientOptions{}); !errors.Is(err, ErrProtocol) {
			t.Fatalf("Spec: %v", err)
		}
	})
	t.Run("bad url", func(t *testing.T) {
		for _, u := range []string{"", "ftp://x", "127.0.0.1:8931", "http://"} {
			if _, err := Dial(u, ClientOptions{}); err == nil {
				t.Errorf("Dial(%q) accepted", u)
			}
		}
	})
}

func TestClientResetEndsPreviousSession(t *testing.T) {
	ts := newTestServer(t, ServerOptions{})
	c := dial(t, ts.http.URL, ClientOptions{})
	ctx := context.Background()
	for seed := range int64(5) {
		if _, err := c.Reset(ctx, seed); err != nil {
			t.Fatal(err)
		}
	}
	st, err := c.State(ctx)
	if err != nil || st.Seed != 4 || st.SessionID != c.SessionID() {
		t.Fatalf("state %+v %v", st, err)
	}
	if n := ts.Sessions(); n != 1 {
		t.Fatalf("%d sessions open after 5 resets, want 1", n)
	}
	c.Close()
	if n := ts.Sessions(); n != 0 {
		t.Fatalf("%d sessions open after Close", n)
	}
	if _, err := c.Reset(ctx, 1); err == nil {
		t.Fatal("reset after Close succeeded")
	}
}

func TestConcurrentSessions(t *testing.T) {
	ts := newTestServer(t, ServerOptions{})
	spec := guessSpec(nil, nil, nil)
	remoteSpec, err := Spec(ts.http.URL, ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			e, err := remoteSpec.New()
			if err != nil {
				t.Error(err)
				return
			}
			defer e.(env.Closer).Close()
			local, _ := spec.New()
			for i := range 5 {
				seed := int64(g*100 + i)
				want, err1 := env.Play(ctx, local, spec.Expert(seed, 0.5, expertRand(seed)), seed, 20)
				got, err2 := env.Play(ctx, e, spec.Expert(seed, 0.5, expertRand(seed)), seed, 20)
				if err1 != nil || err2 != nil || !equalEpisodes(want, got) {
					t.Errorf("seed %d: local %v / remote %v, equal %v", seed, err1, err2, equalEpisodes(want, got))
					return
				}
			}
		})
	}
	wg.Wait()
	if n := ts.Sessions(); n != 0 {
		t.Fatalf("%d sessions left open", n)
	}
}

func TestNoGoroutineLeak(t *testing.T) {
	before := runtime.NumGoroutine()
	func() {
		srv, err := NewServer(guessSpec(nil, nil, nil), ServerOptions{})
		if err != nil {
			t.Fatal(err)
		}
		hs := httptest.NewServer(srv)
		defer hs.Close()
		defer srv.Close()
		var clients []*Client
		for range 8 {
			c, err := Dial(hs.URL, ClientOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.Reset(context.Background(), 1); err != nil {
				t.Fatal(err)
			}
			clients = append(clients, c)
		}
		for _, c := range clients {
			if err := c.Close(); err != nil {
				t.Fatal(err)
			}
		}
	}()
	// Connection goroutines notice their closed sockets asynchronously; wait without a deadline
	// that a busy machine could miss, by polling a bounded number of times with growing sleeps.
	n := runtime.NumGoroutine()
	for wait := time.Millisecond; n > before && wait < 8*time.Second; wait *= 2 {
		time.Sleep(wait)
		n = runtime.NumGoroutine()
	}
	if n > before {
		buf := make([]byte, 1<<20)
		t.Fatalf("%d goroutines after Close, %d before:\n%s", n, before, buf[:runtime.Stack(buf, true)])
	}
}

package remote

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentrl/agentrl/env"
	"github.com/agentrl/agentrl/env/envtest"
)

// guessServer serves the guess task, with wrap (when not nil) in front of the server.
func guessServer(t *testing.T, wrap func(http.Handler) http.Handler) *httptest.Server {
	t.Helper()
	srv, err := NewServer(guessSpec(nil, nil, nil), ServerOptions{MaxIdleEnvs: -1})
	if err != nil {
		t.Fatal(err)
	}
	var h http.Handler = srv
	if wrap != nil {
		h = wrap(srv)
	}
	hs := httptest.NewServer(h)
	t.Cleanup(func() {
		hs.CloseClientConnections()
		hs.Close()
		srv.Close()
	})
	return hs
}

func openPool(t *testing.T, cfg PoolConfig, onDead func(error)) *Pool {
	t.Helper()
	p, err := OpenPool(context.Background(), "myenv", cfg, onDead)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// deadURL is an address nothing listens on.
func deadURL(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return "http://" + addr
}

// TestPoolSuite runs the shared environment suite on a pool whose expert and corpus come from
// the server (POST /expert), not from the local spec.
func TestPoolSuite(t *testing.T) {
	hs := guessServer(t, nil)
	p := openPool(t, PoolConfig{URL: hs.URL}, nil)
	if !p.Metadata().Expert {
		t.Fatal("the guess server's metadata does not offer its expert")
	}
	spec := p.Spec()
	if spec.Name != "myenv" || spec.Train != (env.SeedRange{Lo: 0, Hi: 1000}) {
		t.Fatalf("spec %+v", spec)
	}
	// The kept-alive connections are the pool's, shared by every instance; the suite's leak check
	// wants an instance's Close to leave no goroutine, so each Close here also drops the idle ones.
	suite := spec
	suite.New = func() (env.Env, error) {
		e, err := spec.New()
		return closeIdle{e, p}, err
	}
	envtest.Run(t, suite)
	if c := spec.Corpus(300); len(c) != 300 || !strings.Contains(strings.Join(c, " "), "I think of a number") {
		t.Fatalf("corpus of %d samples without the task's text", len(c))
	}
}

// TestPoolLeastOutstanding: sessions spread over the replicas, at most max_sessions each, and a
// reset beyond that waits for a slot.
func TestPoolLeastOutstanding(t *testing.T) {
	var hits [2]atomic.Int64
	a := guessServer(t, countResets(&hits[0]))
	b := guessServer(t, countResets(&hits[1]))
	p := openPool(t, PoolConfig{URL: a.URL, Replicas: []string{b.URL}, MaxSessions: 3}, nil)
	ctx := context.Background()
	var envs []env.Env
	for i := range 6 {
		e, _ := p.Spec().New()
		if _, err := e.Reset(ctx, int64(i)); err != nil {
			t.Fatal(err)
		}
		envs = append(envs, e)
	}
	if hits[0].Load() != 3 || hits[1].Load() != 3 {
		t.Fatalf("resets per replica %d and %d, want 3 and 3", hits[0].Load(), hits[1].Load())
	}
	extra, _ := p.Spec().New()
	tctx, cancel := context.WithTimeout(ctx, 150*time.Millisecond)
	defer cancel()
	if _, err := extra.Reset(tctx, 9); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a reset beyond max_sessions on every replica: %v, want a wait until the deadline", err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := extra.Reset(ctx, 9)
		done <- err
	}()
	time.Sleep(50 * time.Millisecond)
	envs[5].(env.Closer).Close() // resets alternate a, b, a, …: the sixth is b's
	if err := <-done; err != nil {
		t.Fatalf("reset after a slot freed: %v", err)
	}
	if hits[1].Load() != 4 {
		t.Fatalf("the freed slot was replica b's; it got %d resets, want 4", hits[1].Load())
	}
	for _, e := range append(envs, extra) {
		e.(env.Closer).Close()
	}
}

func countResets(n *atomic.Int64) func(http.Handler) http.Handler {
	return func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/reset" {
				n.Add(1)
			}
			h.ServeHTTP(w, r)
		})
	}
}

// TestPoolDeadReplica: a replica that never answers is skipped; when every replica stops
// answering, resets fail with ErrUnreachable after the unreachable window and onDead is called once.
func TestPoolDeadReplica(t *testing.T) {
	hs := guessServer(t, nil)
	var dead atomic.Int64
	var deadErr error
	p := openPool(t, PoolConfig{URL: deadURL(t), Replicas: []string{hs.URL}, Unreachable: 400 * time.Millisecond, Timeout: time.Second},
		func(err error) { dead.Add(1); deadErr = err })
	ctx := context.Background()
	for i := range 5 {
		e, _ := p.Spec().New()
		if _, err := e.Reset(ctx, int64(i)); err != nil {
			t.Fatalf("reset with one live replica: %v", err)
		}
		e.(env.Closer).Close()
	}
	hs.CloseClientConnections()
	hs.Close()
	start := time.Now()
	e, _ := p.Spec().New()
	_, err := e.Reset(ctx, 1)
	if !errors.Is(err, ErrUnreachable) || dead.Load() != 1 || !errors.Is(deadErr, ErrUnreachable) {
		t.Fatalf("reset with no live replica: %v (onDead called %d times)", err, dead.Load())
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Fatalf("gave up after %v", el)
	}
	if _, err := e.Reset(ctx, 2); !errors.Is(err, ErrUnreachable) || dead.Load() != 1 {
		t.Fatalf("a dead pool: %v, onDead %d times", err, dead.Load())
	}
	if p.Failures()["connection"] == 0 {
		t.Fatalf("failures %v count no connection failure", p.Failures())
	}
}

// TestPoolUnreachableAtStart: OpenPool says which servers did not answer.
func TestPoolUnreachableAtStart(t *testing.T) {
	u := deadURL(t)
	_, err := OpenPool(context.Background(), "myenv", PoolConfig{URL: u, Unreachable: 300 * time.Millisecond}, nil)
	if !errors.Is(err, ErrUnreachable) || !strings.Contains(err.Error(), u) {
		t.Fatalf("open with no server: %v", err)
	}
}

// TestPoolBadServers: answers a server must not give are env errors with their reason counted,
// never a reward; the pool does not hang on a server that stops mid-body.
func TestPoolBadServers(t *testing.T) {
	ctx := context.Background()
	t.Run("html", func(t *testing.T) {
		hs := guessServer(t, func(h http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/step" {
					w.Header().Set("Content-Type", "text/html")
					w.Write([]byte("<html><body>Welcome to nginx!</body></html>"))
					return
				}
				h.ServeHTTP(w, r)
			})
		})
		p := openPool(t, PoolConfig{URL: hs.URL}, nil)
		e, _ := p.Spec().New()
		defer e.(env.Closer).Close()
		if _, err := e.Reset(ctx, 3); err != nil {
			t.Fatal(err)
		}
		if _, err := e.Step(ctx, "5"); !errors.Is(err, ErrProtocol) {
			t.Fatalf("an HTML step answer: %v", err)
		}
		if p.Failures()["bad_answer"] != 1 {
			t.Fatalf("failures %v", p.Failures())
		}
	})
	t.Run("html_502", func(t *testing.T) {
		hs := guessServer(t, func(h http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/step" {
					w.WriteHeader(http.StatusBadGateway)
					w.Write([]byte("<html>502 Bad Gateway</html>"))
					return
				}
				h.ServeHTTP(w, r)
			})
		})
		p := openPool(t, PoolConfig{URL: hs.URL}, nil)
		e, _ := p.Spec().New()
		defer e.(env.Closer).Close()
		e.Reset(ctx, 3)
		_, err := e.Step(ctx, "5")
		var re *Error
		if !errors.As(err, &re) || re.Status != 502 || p.Failures()["http_502"] != 1 {
			t.Fatalf("a proxy's 502: %v, failures %v", err, p.Failures())
		}
	})
	t.Run("hang_mid_body", func(t *testing.T) {
		release := make(chan struct{})
		defer close(release)
		hs := guessServer(t, func(h http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/step" {
					w.Header().Set("Content-Type", "application/json")
					w.Write([]byte(`{"session_id": "x", "observ`))
					w.(http.Flusher).Flush()
					select {
					case <-release:
					case <-r.Context().Done():
					}
					return
				}
				h.ServeHTTP(w, r)
			})
		})
		p := openPool(t, PoolConfig{URL: hs.URL, Timeout: 200 * time.Millisecond}, nil)
		e, _ := p.Spec().New()
		defer e.(env.Closer).Close()
		e.Reset(ctx, 3)
		start := time.Now()
		_, err := e.Step(ctx, "5")
		if err == nil || time.Since(start) > 3*time.Second || p.Failures()["timeout"] != 1 {
			t.Fatalf("a step that hangs mid-body: %v after %v, failures %v", err, time.Since(start), p.Failures())
		}
	})
	t.Run("reset_changes_task", func(t *testing.T) {
		var n atomic.Int64
		hs := guessServer(t, func(h http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/reset" && n.Add(1) == 2 {
					writeJSON(w, 200, resetResponse{SessionID: "other", Observation: wireObservation{Text: "another task"}})
					return
				}
				h.ServeHTTP(w, r)
			})
		})
		p := openPool(t, PoolConfig{URL: hs.URL}, nil)
		e, _ := p.Spec().New()
		defer e.(env.Closer).Close()
		if _, err := e.Reset(ctx, 7); err != nil {
			t.Fatal(err)
		}
		if _, err := e.Reset(ctx, 7); !errors.Is(err, ErrResetChanged) || p.Failures()["reset_changed_task"] != 1 {
			t.Fatalf("a reset to another task for seed 7: %v, failures %v", err, p.Failures())
		}
	})
	t.Run("undeclared_tool", func(t *testing.T) {
		hs := guessServer(t, func(h http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/metadata" {
					writeJSON(w, 200, Metadata{Protocol: 1, Name: "guess", Train: Range{0, 1000}, Heldout: Range{1000, 1100},
						Tools: []ToolInfo{{Name: "calculator"}}})
					return
				}
				h.ServeHTTP(w, r)
			})
		})
		p := openPool(t, PoolConfig{URL: hs.URL}, nil)
		e, _ := p.Spec().New()
		defer e.(env.Closer).Close()
		e.Reset(ctx, 3)
		if _, err := e.Step(ctx, "echo hi"); !errors.Is(err, ErrProtocol) || !strings.Contains(err.Error(), `"echo"`) {
			t.Fatalf("a tool the metadata does not list: %v", err)
		}
	})
}

// TestPoolLyingMetadata: metadata that cannot be true, or replicas that disagree, fail OpenPool
// with a message naming the problem.
func TestPoolLyingMetadata(t *testing.T) {
	serve := func(md Metadata) string {
		hs := guessServer(t, func(h http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/metadata" {
					writeJSON(w, 200, md)
					return
				}
				h.ServeHTTP(w, r)
			})
		})
		return hs.URL
	}
	good := Metadata{Protocol: 1, Name: "guess", Train: Range{0, 1000}, Heldout: Range{1000, 1100}}
	for name, tc := range map[string]struct {
		md   Metadata
		want string
	}{
		"overlap":  {Metadata{Protocol: 1, Name: "guess", Train: Range{0, 1000}, Heldout: Range{500, 1100}}, "overlap"},
		"empty":    {Metadata{Protocol: 1, Name: "guess", Train: Range{5, 5}, Heldout: Range{1000, 1100}}, "non-empty"},
		"protocol": {Metadata{Protocol: 7, Name: "guess", Train: Range{0, 1}, Heldout: Range{1, 2}}, "protocol 7"},
		"unnamed":  {Metadata{Protocol: 1, Train: Range{0, 1}, Heldout: Range{1, 2}}, "without a name"},
		"tools":    {Metadata{Protocol: 1, Name: "g", Train: Range{0, 1}, Heldout: Range{1, 2}, Tools: []ToolInfo{{Name: "a"}, {Name: "a"}}}, "twice"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := OpenPool(context.Background(), "myenv", PoolConfig{URL: serve(tc.md), Unreachable: time.Second}, nil)
			if !errors.Is(err, ErrProtocol) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("%v, want a protocol error saying %q", err, tc.want)
			}
		})
	}
	other := good
	other.Heldout = Range{2000, 2100}
	_, err := OpenPool(context.Background(), "myenv", PoolConfig{URL: serve(good), Replicas: []string{serve(other)}}, nil)
	if err == nil || !strings.Contains(err.Error(), "another environment") {
		t.Fatalf("replicas that disagree: %v", err)
	}
}

// TestPoolAPIKey: the key named by api_key travels as a bearer token; an unset variable is an
// error naming it, and a wrong key is refused at start.
func TestPoolAPIKey(t *testing.T) {
	hs := guessServer(t, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Authorization") != "Bearer s3cret" {
				writeError(w, errorf(http.StatusUnauthorized, "unauthorized", "bad key"))
				return
			}
			h.ServeHTTP(w, r)
		})
	})
	t.Setenv("POOL_TEST_KEY", "s3cret")
	p := openPool(t, PoolConfig{URL: hs.URL, APIKey: "${POOL_TEST_KEY}"}, nil)
	e, _ := p.Spec().New()
	if _, err := e.Reset(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	e.(env.Closer).Close()
	if _, err := OpenPool(context.Background(), "myenv", PoolConfig{URL: hs.URL, APIKey: "${POOL_TEST_UNSET}"}, nil); err == nil || !strings.Contains(err.Error(), "POOL_TEST_UNSET") {
		t.Fatalf("an unset key variable: %v", err)
	}
	t.Setenv("POOL_TEST_KEY", "wrong")
	if _, err := OpenPool(context.Background(), "myenv", PoolConfig{URL: hs.URL, APIKey: "${POOL_TEST_KEY}"}, nil); err == nil || !strings.Contains(err.Error(), "401") {
		t.Fatalf("a wrong key: %v", err)
	}
}

func TestPoolConfigValidate(t *testing.T) {
	for _, c := range []PoolConfig{
		{}, {URL: "ftp://x"}, {URL: "http://"}, {URL: "http://a:1?x=1"}, {URL: "http://u:p@a:1"},
		{URL: "http://a:1", Replicas: []string{"http://a:1"}}, {URL: "http://a:1", APIKey: "literal"},
		{URL: "http://a:1", Timeout: -1}, {URL: "http://a:1", MaxSessions: -1}, {URL: "http://a:1", MaxSessions: MaxPoolSessions + 1},
		{URL: "http://a:1", Unreachable: -time.Second},
	} {
		if err := c.Validate(); err == nil {
			t.Errorf("%+v validates", c)
		}
	}
	if err := (PoolConfig{URL: "http://127.0.0.1:9000", Replicas: []string{"https://b:1"}, APIKey: "${K}", Timeout: time.Second, MaxSessions: 8}).Validate(); err != nil {
		t.Error(err)
	}
}

// TestPoolConcurrentEpisodes runs many episodes at once through two replicas under -race.
func TestPoolConcurrentEpisodes(t *testing.T) {
	a, b := guessServer(t, nil), guessServer(t, nil)
	p := openPool(t, PoolConfig{URL: a.URL, Replicas: []string{b.URL}, MaxSessions: 4}, nil)
	spec := p.Spec()
	var wg sync.WaitGroup
	var ok atomic.Int64
	for i := range 32 {
		wg.Go(func() {
			e, _ := spec.New()
			defer e.(env.Closer).Close()
			ep, err := env.Play(context.Background(), e, spec.Expert(int64(i), 0, expertRand(int64(i))), int64(i), 10)
			if err == nil && ep.Success {
				ok.Add(1)
			}
		})
	}
	wg.Wait()
	if ok.Load() != 32 {
		t.Fatalf("%d of 32 expert episodes succeeded", ok.Load())
	}
	if p.Episodes() != 32 {
		t.Fatalf("episodes %d", p.Episodes())
	}
}

type closeIdle struct {
	env.Env
	p *Pool
}

func (c closeIdle) Close() error {
	err := c.Env.(env.Closer).Close()
	c.p.Close()
	return err
}

// A replica that did not answer at start and later serves another environment is never used.
func TestPoolLateReplicaDisagrees(t *testing.T) {
	good := guessServer(t, nil)
	var lying atomic.Bool
	late := guessServer(t, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !lying.Load() {
				conn, _, _ := w.(http.Hijacker).Hijack()
				conn.Close()
				return
			}
			if r.URL.Path == "/metadata" {
				writeJSON(w, 200, Metadata{Protocol: 1, Name: "other", Train: Range{0, 5}, Heldout: Range{5, 6}})
				return
			}
			h.ServeHTTP(w, r)
		})
	})
	p := openPool(t, PoolConfig{URL: good.URL, Replicas: []string{late.URL}, MaxSessions: 1}, nil)
	lying.Store(true)
	time.Sleep(150 * time.Millisecond) // past the late replica's first backoff
	ctx := context.Background()
	e1, _ := p.Spec().New()
	if _, err := e1.Reset(ctx, 1); err != nil {
		t.Fatal(err)
	}
	defer e1.(env.Closer).Close()
	// The good replica is full: the next reset meets the late one, which disagrees.
	e2, _ := p.Spec().New()
	defer e2.(env.Closer).Close()
	tctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if _, err := e2.Reset(tctx, 2); !errors.Is(err, ErrProtocol) || !strings.Contains(err.Error(), "another environment") {
		t.Fatalf("a reset meeting the disagreeing replica: %v", err)
	}
	e1.(env.Closer).Close()
	if _, err := e2.Reset(ctx, 2); err != nil {
		t.Fatalf("after the good replica freed a slot: %v", err)
	}
}

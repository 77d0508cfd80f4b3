package pipeline

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentrl/agentrl/env/remote"
	"github.com/agentrl/agentrl/env/remote/remotetest"
)

// A run trains on the Python reference environment over HTTP end to end: the supervised phase
// on its expert's demonstrations (POST /expert), RL steps on its episodes, evaluation on its
// held-out seeds, every episode through the pool, with the calculator calls the server made.
func TestRemoteEnvRun(t *testing.T) {
	u := remotetest.StartArith(t)
	entry := fmt.Sprintf("[{name: arith, weight: 1, remote: {url: %q, max_sessions: 8}}]", u)
	cfg := tinyConfig(t, t.TempDir(), "phases.sft.envs="+entry, "phases.rl.envs=[{name: arith, weight: 1}]",
		"phases.rl.steps=2", "eval.tasks=4", "eval.samples=1")
	var out lockedBuilder
	run, err := NewRun(cfg, Options{Envs: testEnvs(), Out: &out})
	if err != nil {
		t.Fatal(err)
	}
	sum, err := run.Train(context.Background())
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if len(sum.Evals) != 3 {
		t.Fatalf("%d evaluations", len(sum.Evals))
	}
	log := out.String()
	for _, want := range []string{`env arith: remote "arith" at [` + u + `]`, "episodes started"} {
		if !strings.Contains(log, want) {
			t.Errorf("the log does not say %q:\n%s", want, log)
		}
	}
	calls, rl, failed := 0, 0, 0
	for _, tr := range readTrajs(t, run.Dir) {
		if tr.Env != "arith" {
			t.Fatalf("episode %s of env %q", tr.ID, tr.Env)
		}
		if tr.Status.Failed() {
			failed++
			t.Errorf("episode %s failed: %s", tr.ID, tr.Error)
		}
		for _, kv := range tr.Meta {
			if kv.Key == "phase" && kv.Value == "rl" {
				rl++
			}
		}
		for _, turn := range tr.Turns {
			for _, c := range turn.ToolCalls {
				if c.Name == "calculator" && c.Result != "" {
					calls++
				}
			}
		}
	}
	if rl < 2*2*4 || calls == 0 { // dynamic sampling may draw more rounds
		t.Fatalf("%d rl episodes (want at least 16), %d calculator calls answered", rl, calls)
	}
}

// A run whose remote environment stops answering stops with an error naming the server, after
// the unreachable window, not with rewards of 0: here the server answers /metadata and then
// drops every connection.
func TestRemoteEnvUnreachableStopsRun(t *testing.T) {
	spec, err := testEnvs().Lookup("calc")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := remote.NewServer(spec, remote.ServerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/metadata" {
			srv.ServeHTTP(w, r)
			return
		}
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close()
		}
	}))
	defer hs.Close()
	entry := fmt.Sprintf("[{name: gone, weight: 1, remote: {url: %q, unreachable: 1s, timeout: 2s}}]", hs.URL)
	cfg := tinyConfig(t, t.TempDir(), "phases.sft.envs="+entry, "phases.rl.envs=[{name: gone, weight: 1}]")
	var out lockedBuilder
	run, err := NewRun(cfg, Options{Envs: testEnvs(), Out: &out})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start := time.Now()
	_, err = run.Train(ctx)
	if !errors.Is(err, remote.ErrUnreachable) || !strings.Contains(err.Error(), hs.URL) {
		t.Fatalf("train with a dead environment: %v\n%s", err, out.String())
	}
	if el := time.Since(start); el > time.Minute {
		t.Fatalf("stopped after %v", el)
	}
}

type lockedBuilder struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuilder) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuilder) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

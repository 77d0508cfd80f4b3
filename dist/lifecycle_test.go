package dist

import (
	"net"
	"strings"
	"testing"
	"time"
)

// Item 24 of issue 29: a taken listen port is said at once, not as "not ready after 10s".
func TestServerTakenPort(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	start := time.Now()
	_, err = StartServer(ServerConfig{StoreDir: t.TempDir(), Port: ln.Addr().(*net.TCPAddr).Port})
	if err == nil || !strings.Contains(err.Error(), "address already in use") || time.Since(start) > 5*time.Second {
		t.Fatalf("a taken port: %v after %v", err, time.Since(start))
	}
}

// Item 3 of issue 29: a run's state on the server, as a worker sees it: absent until its learner
// sets it up, then ready, then finished once the learner marks it, until a learner starts it again.
func TestRunLifecycle(t *testing.T) {
	ctx := ctxFor(t, 30*time.Second)
	s := startServer(t)
	l := connect(t, s.URL(), s.LearnerToken())
	w := connect(t, s.URL(), s.WorkerToken())
	const run = "life"
	state := func() RunState {
		t.Helper()
		st, err := w.Run(ctx, run)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	if st := state(); st != RunAbsent {
		t.Fatalf("before setup: %v", st)
	}
	if err := l.SetupRun(ctx, RunConfig{Run: run}); err != nil {
		t.Fatal(err)
	}
	if err := l.PutRolloutSettings(ctx, run, []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	if st := state(); st != RunReady {
		t.Fatalf("after setup: %v", st)
	}
	fin := w.WatchFinished(ctx, run, 50*time.Millisecond)
	if err := l.MarkFinished(ctx, run); err != nil {
		t.Fatal(err)
	}
	select {
	case <-fin:
	case <-time.After(5 * time.Second):
		t.Fatal("the worker did not see the learner finish")
	}
	if st := state(); st != RunFinished {
		t.Fatalf("after MarkFinished: %v", st)
	}
	if err := l.ClearFinished(ctx, run); err != nil {
		t.Fatal(err)
	}
	if st := state(); st != RunReady {
		t.Fatalf("after ClearFinished: %v", st)
	}
}

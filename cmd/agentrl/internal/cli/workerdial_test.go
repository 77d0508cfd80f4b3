package cli

import (
	"context"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentrl/agentrl/dist"
)

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// Items 3 and 24 of issue 29: a worker started before its learner's server waits, saying so, and
// connects once the server answers; an outage of the server is reported, and so is the recovery.
func TestWorkerWaitsForTheLearnersServer(t *testing.T) {
	port := freePort(t)
	store := t.TempDir()
	var log syncBuffer
	type result struct {
		conn *dist.Conn
		err  error
	}
	done := make(chan result, 1)
	url := "nats://127.0.0.1:" + strconv.Itoa(port)
	go func() {
		c, err := dialLearner(context.Background(), url, dist.Auth{Token: "tok"}, time.Minute, &log)
		done <- result{c, err}
	}()
	time.Sleep(1500 * time.Millisecond)
	srv, err := dist.StartServer(dist.ServerConfig{StoreDir: store, Port: port, WorkerToken: "tok"})
	if err != nil {
		t.Fatal(err)
	}
	var res result
	select {
	case res = <-done:
	case <-time.After(30 * time.Second):
		t.Fatalf("the worker did not connect once the server answered:\n%s", log.String())
	}
	if res.err != nil {
		t.Fatalf("dial: %v\n%s", res.err, log.String())
	}
	defer res.conn.Close()
	if !strings.Contains(log.String(), "no server answers at "+url+" yet") || !strings.Contains(log.String(), "trying again in") {
		t.Errorf("the worker did not say it waits:\n%s", log.String())
	}
	srv.Shutdown()
	waitFor(t, &log, "lost the connection to the server")
	srv, err = dist.StartServer(dist.ServerConfig{StoreDir: store, Port: port, WorkerToken: "tok"})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	waitFor(t, &log, "reconnected to")
}

func waitFor(t *testing.T, log *syncBuffer, want string) {
	t.Helper()
	for range 200 {
		if strings.Contains(log.String(), want) {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("the worker's log never said %q:\n%s", want, log.String())
}

// Item 24 of issue 29: a missing token is told apart from a wrong one, a server that never comes
// is given up after the wait, and a run name that cannot be one is refused before connecting.
func TestWorkerDiagnostics(t *testing.T) {
	srv, err := dist.StartServer(dist.ServerConfig{StoreDir: t.TempDir(), WorkerToken: "right"})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	var log syncBuffer
	_, err = dialLearner(context.Background(), srv.URL(), dist.Auth{}, time.Second, &log)
	if err == nil || !strings.Contains(err.Error(), "requires credentials and none were given") {
		t.Errorf("no token: %v", err)
	}
	_, err = dialLearner(context.Background(), srv.URL(), dist.Auth{Token: "wrong"}, time.Second, &log)
	if err == nil || !strings.Contains(err.Error(), "refused this worker's token") {
		t.Errorf("wrong token: %v", err)
	}
	start := time.Now()
	_, err = dialLearner(context.Background(), "nats://127.0.0.1:"+strconv.Itoa(freePort(t)), dist.Auth{Token: "x"}, 2*time.Second, &log)
	if err == nil || !strings.Contains(err.Error(), "no server answers") || time.Since(start) > 10*time.Second {
		t.Errorf("no server: %v after %v", err, time.Since(start))
	}
	out, err := runCLI(t, "worker", "--connect", srv.URL(), "--run", "../x", "--token", "right")
	if err == nil || !strings.Contains(err.Error(), "--run") || !strings.Contains(err.Error(), "only letters") {
		t.Errorf("--run ../x: %v\n%s", err, out)
	}
}

// Item 26 of issue 29: eval refuses a --max-context that leaves no room for the prompt, as train
// does.
func TestEvalRefusesAContextWithoutRoomForThePrompt(t *testing.T) {
	ck := tinyCheckpoint(t, "What is 1 + 2? Answer: 3")
	out, err := runCLI(t, "eval", "--checkpoint", ck, "--env", "calc", "--tasks", "2", "--k", "0", "--max-context", "10")
	if err == nil || !strings.Contains(err.Error(), "--max-context 10 leaves no room for calc's prompt") {
		t.Fatalf("eval --max-context 10: %v\n%s", err, out)
	}
}

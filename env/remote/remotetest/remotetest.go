// Package remotetest starts the Python reference environment (examples/envs/arith) for tests,
// so the protocol is exercised from a server agentrl did not write.
package remotetest

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// Python is the interpreter the reference environment runs under.
const Python = "/usr/bin/python3"

// ArithScript is the reference server's path.
func ArithScript() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..", "examples", "envs", "arith", "server.py")
}

// StartArith runs the reference server on a free loopback port with extra arguments and returns
// its base URL; the server is killed when the test ends. The test is skipped when Python is
// absent.
func StartArith(t testing.TB, extra ...string) string {
	t.Helper()
	if _, err := os.Stat(Python); err != nil {
		t.Skipf("%s is absent: the Python reference environment cannot run", Python)
	}
	cmd := exec.Command(Python, append([]string{ArithScript(), "--port", "0"}, extra...)...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	line := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		if sc.Scan() {
			line <- sc.Text()
		}
		close(line)
	}()
	select {
	case l, ok := <-line:
		u, found := strings.CutPrefix(l, "listening on ")
		if !ok || !found {
			t.Fatalf("the reference server said %q, not where it listens", l)
		}
		return u
	case <-time.After(30 * time.Second):
		t.Fatal("the reference server did not start within 30s")
	}
	return ""
}

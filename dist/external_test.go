package dist

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// natsServerBinary finds a nats-server executable: on PATH (Debian's nats-server package), or
// built from the module in a temporary directory (about a minute on two cores; not with -short).
func natsServerBinary(t *testing.T) string {
	for _, p := range []string{"nats-server", "/usr/sbin/nats-server"} {
		if path, err := exec.LookPath(p); err == nil {
			return path
		}
	}
	if testing.Short() {
		t.Skip("no nats-server on PATH (Debian package nats-server); building one is skipped with -short")
	}
	bin := filepath.Join(t.TempDir(), "nats-server")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/nats-io/nats-server/v2").CombinedOutput()
	if err != nil {
		t.Skipf("cannot build nats-server: %v\n%s", err, out)
	}
	return bin
}

func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// TestChaosExternalServer runs the chaos test against a separate nats-server process, restarted
// (SIGTERM), with user credentials in the URLs instead of tokens. (Killed with SIGKILL, Debian's
// nats-server 2.9.10 kept some acknowledged tasks in the work queue and never delivered them
// again; every trajectory survived. The learner's consumer sweeps such tasks: Conn.SweepTasks.)
func TestChaosExternalServer(t *testing.T) {
	bin := natsServerBinary(t)
	dir := t.TempDir()
	port := freePort(t)
	lp, wp := NewToken(), NewToken()
	conf := filepath.Join(dir, "nats.conf")
	cfg := NATSServerConfig(fmt.Sprintf("127.0.0.1:%d", port), filepath.Join(dir, "js"), NATSUser{User: "learner", Password: lp}, NATSUser{User: "worker", Password: wp})
	if err := os.WriteFile(conf, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	var cmd *exec.Cmd
	start := func() {
		cmd = exec.Command(bin, "-c", conf) // its log goes nowhere
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		for i := 0; ; i++ {
			c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second)
			if err == nil {
				c.Close()
				return
			}
			if i > 100 {
				t.Fatalf("nats-server did not listen: %v", err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	start()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	url := func(user, pass string) string { return fmt.Sprintf("nats://%s:%s@127.0.0.1:%d", user, pass, port) }
	runChaos(t, &chaosServer{url: url("learner", lp), workerURL: url("worker", wp), restart: func(t *testing.T) {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
		start()
	}})
}

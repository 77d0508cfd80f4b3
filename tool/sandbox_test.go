package tool

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// newTestSandbox returns a sandbox with lim, skipping only when bubblewrap is not installed at
// all (scripts/setup installs it; CI must run these tests). Any other failure to set up the
// sandbox fails the test.
func newTestSandbox(t testing.TB, lim SandboxLimits) *Sandbox {
	t.Helper()
	if _, err := exec.LookPath("bwrap"); err != nil {
		t.Skip("bubblewrap is not installed (run scripts/setup): sandbox tests skipped")
	}
	sb, err := NewSandbox(lim)
	if err != nil {
		t.Fatalf("NewSandbox: %v", err)
	}
	return sb
}

func runOK(t *testing.T, sb *Sandbox, code string) RunResult {
	t.Helper()
	res, err := sb.Run(context.Background(), code)
	if err != nil {
		t.Fatalf("Run(%q): %v", code, err)
	}
	return res
}

func TestSandboxRunsCode(t *testing.T) {
	sb := newTestSandbox(t, DefaultSandboxLimits())
	tests := []struct {
		name, code       string
		exit             int
		stdout, inStderr string
		notInStderr      string
	}{
		{name: "print", code: "print(sum(range(10)))", stdout: "45\n"},
		{name: "main guard", code: "if __name__ == '__main__':\n    print('main')", stdout: "main\n"},
		{name: "unicode", code: "print('héllo ✓')", stdout: "héllo ✓\n"},
		{name: "stdin is empty", code: "import sys; print(repr(sys.stdin.read()))", stdout: "''\n"},
		{name: "exception", code: "def f():\n    return 1/0\nf()", exit: 1, inStderr: "ZeroDivisionError", notInStderr: "<string>"},
		{name: "traceback names the file", code: "x = 1\nraise ValueError('bad')", exit: 1, inStderr: `File "main.py", line 2`},
		{name: "syntax error", code: "def f(:\n  pass", exit: 1, inStderr: "SyntaxError"},
		{name: "sys.exit", code: "import sys; print('a'); sys.exit(3)", exit: 3, stdout: "a\n"},
		{name: "stdlib", code: "import json, math, itertools, collections, re; print(json.dumps([math.gcd(12, 18)]))", stdout: "[6]\n"},
		{name: "tmp is writable", code: "open('/tmp/f', 'w').write('x'); print(open('/tmp/f').read())", stdout: "x\n"},
		{name: "subprocess works", code: "import subprocess; print(subprocess.run(['/usr/bin/python3', '-c', 'print(7)'], capture_output=True, text=True).stdout, end='')", stdout: "7\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res := runOK(t, sb, tc.code)
			if res.ExitCode != tc.exit || res.Limit != LimitNone {
				t.Fatalf("exit %d limit %q, want exit %d; stderr:\n%s", res.ExitCode, res.Limit, tc.exit, res.Stderr)
			}
			if tc.stdout != "" && res.Stdout != tc.stdout {
				t.Errorf("stdout %q, want %q", res.Stdout, tc.stdout)
			}
			if tc.inStderr != "" && !strings.Contains(res.Stderr, tc.inStderr) {
				t.Errorf("stderr lacks %q:\n%s", tc.inStderr, res.Stderr)
			}
			if tc.notInStderr != "" && strings.Contains(res.Stderr, tc.notInStderr) {
				t.Errorf("stderr shows %q (the bootstrap frame):\n%s", tc.notInStderr, res.Stderr)
			}
		})
	}
}

// TestSandboxEscapes tries to get out. Every snippet prints BLOCKED when the attempt fails the
// way it should, and something else when it succeeds.
func TestSandboxEscapes(t *testing.T) {
	sb := newTestSandbox(t, DefaultSandboxLimits())
	repo, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan struct{}, 1)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
			accepted <- struct{}{}
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	t.Setenv("AGENTRL_SANDBOX_SECRET", "leaked")

	tests := []struct{ name, code string }{
		{"read /etc/shadow", "open('/etc/shadow').read()"},
		{"read /etc/passwd", "open('/etc/passwd').read()"},
		{"list /root", "import os; os.listdir('/root')"},
		{"list the repository", fmt.Sprintf("import os; os.listdir(%q)", repo)},
		{"read this test file", fmt.Sprintf("open(%q).read()", repo+"/sandbox_test.go")},
		{"list /home", "import os; os.listdir('/home')"},
		{"write /usr", "open('/usr/evil', 'w').write('x')"},
		{"write /", "open('/evil', 'w').write('x')"},
		{"write /dev", "open('/dev/evil', 'w').write('x')"},
		{"write /proc", "open('/proc/evil', 'w').write('x')"},
		{"make a directory in /", "import os; os.mkdir('/evil')"},
		{"chmod /usr/bin", "import os; os.chmod('/usr/bin/python3', 0o777)"},
		{"connect to a host listener", fmt.Sprintf("import socket; socket.create_connection(('127.0.0.1', %d), timeout=2)", port)},
		{"connect outside", "import socket; socket.create_connection(('1.1.1.1', 53), timeout=2)"},
		{"resolve a name", "import socket; socket.getaddrinfo('example.com', 80)"},
		{"new user namespace", "import os; os.unshare(os.CLONE_NEWUSER)"},
		{"mount", "import ctypes; l = ctypes.CDLL(None, use_errno=True); assert l.mount(b'none', b'/usr', b'tmpfs', 0, None) == 0"},
		{"setuid root", "import os; os.setuid(0)"},
		{"raise the process limit", "import resource as R; R.setrlimit(R.RLIMIT_NPROC, (1 << 20, 1 << 20))"},
		{"raise the memory limit", "import resource as R; R.setrlimit(R.RLIMIT_AS, (-1, -1))"},
		{"see host processes", "import os; pids = [p for p in os.listdir('/proc') if p.isdigit()]; assert len(pids) > 10, pids"},
		{"host environment", "import os; os.environ['AGENTRL_SANDBOX_SECRET']"},
		{"readiness fd", "import os; os.write(3, b'x')"},
		{"kill the test process", fmt.Sprintf("import os; os.kill(%d, 9); assert os.getpid() != %d", os.Getpid(), os.Getpid())},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code := "try:\n" + indent(tc.code) + "\n    print('ESCAPED')\nexcept BaseException as e:\n    print('BLOCKED', type(e).__name__, e)\n"
			res := runOK(t, sb, code)
			if !strings.HasPrefix(res.Stdout, "BLOCKED") {
				t.Fatalf("escape succeeded: stdout %q stderr %q", res.Stdout, res.Stderr)
			}
		})
	}
	select {
	case <-accepted:
		t.Fatal("the host listener accepted a connection from the sandbox")
	default:
	}

	t.Run("identity", func(t *testing.T) {
		res := runOK(t, sb, "import os\nprint(os.getuid(), os.getgid())\nprint(' '.join(sorted(os.listdir('/'))))\nprint(open('/proc/self/uid_map').read().strip())")
		lines := strings.Split(strings.TrimSpace(res.Stdout), "\n")
		if len(lines) != 3 {
			t.Fatalf("stdout %q stderr %q", res.Stdout, res.Stderr)
		}
		if lines[0] != "65534 65534" {
			t.Errorf("uid gid %q, want 65534 65534", lines[0])
		}
		for _, name := range strings.Fields(lines[1]) {
			switch name {
			case "bin", "sbin", "lib", "lib32", "lib64", "libx32", "usr", "proc", "dev", "tmp":
			default:
				t.Errorf("root directory shows %q: %q", name, lines[1])
			}
		}
		// The host uid behind the mapping is not visible from inside (bwrap nests a second
		// user namespace for --disable-userns); TestSandboxProcessLimit proves it is not root.
		if fields := strings.Fields(lines[2]); len(fields) != 3 || fields[0] != "65534" || fields[2] != "1" {
			t.Errorf("uid_map %q: want a single mapping of uid 65534", lines[2])
		}
	})

	t.Run("kill the sandbox parent", func(t *testing.T) {
		res := runOK(t, sb, "import os, signal\nfor pid in (os.getppid(), 1, -1):\n    try:\n        os.kill(pid, signal.SIGKILL)\n    except OSError:\n        pass\nprint('alive')")
		// kill(-1) takes the code down with everything else it may signal; the host side must
		// just report that, and the next run must work.
		if res.Limit != LimitNone || (res.ExitCode != 0 && res.ExitCode != 128+9) {
			t.Fatalf("unexpected result %+v", res)
		}
		if again := runOK(t, sb, "print(1)"); again.Stdout != "1\n" {
			t.Fatalf("sandbox broken after kill attempt: %+v", again)
		}
	})
}

func indent(code string) string {
	return "    " + strings.ReplaceAll(code, "\n", "\n    ")
}

func TestSandboxLimits(t *testing.T) {
	// The wall-clock limit is far above the CPU limit so that on a loaded machine the limit
	// under test, not the clock, ends each run; only the sleep case uses a short one.
	lim := DefaultSandboxLimits()
	lim.CPUSeconds = 1
	lim.Timeout = 5 * time.Minute
	sb := newTestSandbox(t, lim)

	t.Run("memory bomb", func(t *testing.T) {
		res := runOK(t, sb, "x = list(range(1 << 30))\nprint(len(x))")
		if res.ExitCode == 0 || !strings.Contains(res.Stderr, "MemoryError") {
			t.Fatalf("memory bomb not stopped by MemoryError: %+v", res)
		}
	})
	t.Run("bytes bomb", func(t *testing.T) {
		res := runOK(t, sb, "x = b'x' * (1 << 30)")
		if !strings.Contains(res.Stderr, "MemoryError") {
			t.Fatalf("allocation of 1 GiB not refused: %+v", res)
		}
	})
	t.Run("busy loop hits the CPU limit", func(t *testing.T) {
		res := runOK(t, sb, "while True:\n    pass")
		if res.Limit != LimitCPU {
			t.Fatalf("limit %q exit %d, want cpu", res.Limit, res.ExitCode)
		}
	})
	t.Run("sleep hits the wall-clock limit", func(t *testing.T) {
		short := lim
		short.Timeout = time.Second
		res := runOK(t, newTestSandbox(t, short), "import time\nprint('start', flush=True)\ntime.sleep(600)")
		if res.Limit != LimitTime || res.Stdout != "start\n" {
			t.Fatalf("limit %q stdout %q, want time and the output so far", res.Limit, res.Stdout)
		}
	})
	t.Run("detached child is killed too", func(t *testing.T) {
		// A child in its own session that outlives the interpreter must not keep the run alive.
		res := runOK(t, sb, "import os, time\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(600)\nprint('parent done')")
		if res.Stdout != "parent done\n" || res.ExitCode != 0 {
			t.Fatalf("%+v", res)
		}
	})
	t.Run("output flood", func(t *testing.T) {
		res := runOK(t, sb, "while True:\n    print('x' * 1000)")
		if res.Limit != LimitOutput || !res.StdoutTruncated {
			t.Fatalf("limit %q truncated %v, want output", res.Limit, res.StdoutTruncated)
		}
		if len(res.Stdout) > lim.OutputBytes+100 || !strings.Contains(res.Stdout, "bytes truncated") {
			t.Fatalf("stdout %d bytes, cap %d, marker present %v", len(res.Stdout), lim.OutputBytes, strings.Contains(res.Stdout, "bytes truncated"))
		}
	})
	t.Run("large output is truncated, run completes", func(t *testing.T) {
		res := runOK(t, sb, "print('a' * 20000)\nprint('END')")
		if res.ExitCode != 0 || !res.StdoutTruncated || !strings.HasSuffix(res.Stdout, "END\n") || !strings.HasPrefix(res.Stdout, "aaaa") {
			t.Fatalf("exit %d truncated %v stdout head %q tail %q", res.ExitCode, res.StdoutTruncated, res.Stdout[:10], res.Stdout[len(res.Stdout)-10:])
		}
	})
	t.Run("file size limit", func(t *testing.T) {
		res := runOK(t, sb, "f = open('/tmp/big', 'wb')\nf.write(b'x' * (2 << 20))\nf.close()")
		if res.ExitCode != 1 || !strings.Contains(res.Stderr, "File too large") {
			t.Fatalf("exit %d stderr %q, want EFBIG", res.ExitCode, res.Stderr)
		}
	})
	t.Run("tmpfs is bounded", func(t *testing.T) {
		res := runOK(t, sb, "import errno\ntry:\n    for i in range(100):\n        open('/tmp/f%d' % i, 'wb').write(b'x' * (1 << 19))\nexcept OSError as e:\n    print('full', e.errno == errno.ENOSPC)")
		if res.Stdout != "full True\n" {
			t.Fatalf("tmpfs not bounded: %+v", res)
		}
	})
	t.Run("open files limit", func(t *testing.T) {
		res := runOK(t, sb, "fs = []\ntry:\n    for i in range(1000):\n        fs.append(open('/dev/null'))\nexcept OSError as e:\n    print('limited', len(fs) < 64)")
		if res.Stdout != "limited True\n" {
			t.Fatalf("open files not limited: %+v", res)
		}
	})
}

// TestSandboxProcessLimit proves RLIMIT_NPROC binds even though the tests may run as root: the
// number of forks that succeed is exactly the limit minus the sandbox's init and the
// interpreter, for two different limits.
func TestSandboxProcessLimit(t *testing.T) {
	const forks = `import os, time
n = 0
for i in range(200):
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        time.sleep(600)  # killed with the sandbox when the parent exits
        os._exit(0)
    n += 1
print(n)`
	for _, procs := range []int{6, 12} {
		t.Run(strconv.Itoa(procs), func(t *testing.T) {
			lim := DefaultSandboxLimits()
			lim.Processes = procs
			res := runOK(t, newTestSandbox(t, lim), forks)
			if got, want := strings.TrimSpace(res.Stdout), strconv.Itoa(procs-2); got != want {
				t.Fatalf("forks %q, want %s (limit %d); stderr %q", got, want, procs, res.Stderr)
			}
		})
	}
	t.Run("fork bomb", func(t *testing.T) {
		lim := DefaultSandboxLimits()
		lim.CPUSeconds, lim.Timeout = 1, 5*time.Second
		sb := newTestSandbox(t, lim)
		res := runOK(t, sb, "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass")
		if res.ExitCode == 0 && res.Limit == LimitNone {
			t.Fatalf("fork bomb ended cleanly: %+v", res)
		}
		if again := runOK(t, sb, "print(2)"); again.Stdout != "2\n" {
			t.Fatalf("sandbox broken after fork bomb: %+v", again)
		}
	})
}

func TestSandboxConcurrentRuns(t *testing.T) {
	sb := newTestSandbox(t, DefaultSandboxLimits())
	var wg sync.WaitGroup
	errs := make(chan error, 6)
	for i := range 6 {
		wg.Go(func() {
			res, err := sb.Run(context.Background(), fmt.Sprintf("print(%d * 3)", i))
			if err != nil {
				errs <- err
				return
			}
			if want := fmt.Sprintf("%d\n", i*3); res.Stdout != want {
				errs <- fmt.Errorf("run %d: stdout %q, want %q", i, res.Stdout, want)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestSandboxContextCancel(t *testing.T) {
	sb := newTestSandbox(t, DefaultSandboxLimits())
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		time.Sleep(300 * time.Millisecond)
		cancel()
	}()
	_, err := sb.Run(ctx, "import time; time.sleep(60)")
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v, want context.Canceled", err)
	}
	if errors.Is(err, ErrInfra) {
		t.Fatalf("cancellation reported as an infrastructure failure: %v", err)
	}
}

func TestSandboxRefusesWithoutSandbox(t *testing.T) {
	tests := []struct {
		name string
		opts []SandboxOption
	}{
		{"missing bwrap", []SandboxOption{WithBwrap("/nonexistent/bwrap")}},
		{"bwrap that fails", []SandboxOption{WithBwrap("/usr/bin/false")}},
		{"interpreter outside the mounts", []SandboxOption{WithBwrap("/usr/bin/false"), WithPython("/root/.pyenv/shims/python3")}},
		{"relative interpreter", []SandboxOption{WithPython("python3")}},
		{"missing interpreter", []SandboxOption{WithPython("/usr/bin/no-such-python")}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sb, err := NewSandbox(DefaultSandboxLimits(), tc.opts...)
			if err == nil {
				t.Fatalf("NewSandbox succeeded: %+v", sb)
			}
			if !errors.Is(err, ErrInfra) || !errors.Is(err, ErrSandboxUnavailable) {
				t.Fatalf("error %v is not an infrastructure error", err)
			}
		})
	}
}

func TestSandboxBadInput(t *testing.T) {
	sb := newTestSandbox(t, DefaultSandboxLimits())
	tests := []struct{ name, code string }{
		{"empty", ""},
		{"blank", "  \n\t"},
		{"too large", strings.Repeat("#", DefaultSandboxLimits().CodeBytes+1)},
		{"invalid utf-8", "print('\xff')"},
		{"nul byte", "print(1)\x00"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := sb.Run(context.Background(), tc.code)
			if err == nil {
				t.Fatal("bad code accepted")
			}
			if errors.Is(err, ErrInfra) {
				t.Fatalf("bad input reported as infrastructure failure: %v", err)
			}
		})
	}
}

func TestSandboxLimitsValidate(t *testing.T) {
	mod := func(f func(*SandboxLimits)) SandboxLimits {
		l := DefaultSandboxLimits()
		f(&l)
		return l
	}
	tests := []struct {
		name string
		lim  SandboxLimits
		ok   bool
	}{
		{"defaults", DefaultSandboxLimits(), true},
		{"zero", SandboxLimits{}, false},
		{"no timeout", mod(func(l *SandboxLimits) { l.Timeout = 0 }), false},
		{"two processes", mod(func(l *SandboxLimits) { l.Processes = 2 }), false},
		{"tiny memory", mod(func(l *SandboxLimits) { l.MemoryBytes = 1 << 20 }), false},
		{"negative output", mod(func(l *SandboxLimits) { l.OutputBytes = -1 }), false},
		{"few files", mod(func(l *SandboxLimits) { l.OpenFiles = 3 }), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.lim.Validate(); (err == nil) != tc.ok {
				t.Fatalf("Validate() = %v, want ok=%v", err, tc.ok)
			}
		})
	}
}

package tool

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
)

// DefaultPython is the interpreter the sandbox runs: the system's, under /usr, never one from
// a user's home (pyenv shims and virtualenvs are invisible inside the sandbox anyway).
const DefaultPython = "/usr/bin/python3"

// Sandbox runs untrusted Python 3 code in a child process confined by bubblewrap (namespaces,
// a read-only view of /usr only, a small tmpfs on /tmp, no network) and resource limits (CPU,
// address space, processes, file size, open files), with a wall-clock timeout after which the
// whole process tree is killed. It never runs code any other way: when bubblewrap or user
// namespaces are unavailable every call fails with a *SandboxError.
//
// A Sandbox is safe for concurrent use; each Run is a fresh process with nothing shared.
type Sandbox struct {
	bwrap  string
	python string
	limits SandboxLimits
	layout []string // read-only root mounts, computed once
	// hostUID, when the host process is root, gives each run its own unprivileged uid outside
	// the sandbox: the kernel exempts tasks of the host's root user from RLIMIT_NPROC, and
	// a user namespace created by root maps the sandbox uid to root.
	hostUID func() uint32
}

// SandboxOption adjusts NewSandbox.
type SandboxOption func(*Sandbox)

// WithPython sets the interpreter path; it must lie under /usr, /bin or /lib*.
func WithPython(path string) SandboxOption { return func(s *Sandbox) { s.python = path } }

// WithBwrap sets the bubblewrap binary instead of looking up "bwrap" on PATH.
func WithBwrap(path string) SandboxOption { return func(s *Sandbox) { s.bwrap = path } }

// probed remembers, per bwrap+python pair, that a sandbox has run code successfully in this
// process; failures are not remembered, so a fixed host recovers without a restart.
var probed sync.Map

// NewSandbox checks that bubblewrap and the interpreter exist and that a sandbox actually
// starts here (once per process), and returns a Sandbox with the given limits.
func NewSandbox(lim SandboxLimits, opts ...SandboxOption) (*Sandbox, error) {
	if err := lim.Validate(); err != nil {
		return nil, err
	}
	s := &Sandbox{python: DefaultPython, limits: lim}
	for _, o := range opts {
		o(s)
	}
	if s.bwrap == "" {
		p, err := exec.LookPath("bwrap")
		if err != nil {
			return nil, &SandboxError{Op: "probe", Err: fmt.Errorf("bubblewrap (bwrap) not found on PATH; install the Debian package bubblewrap (scripts/setup): %w", err)}
		}
		s.bwrap = p
	}
	if err := checkUnderMounts(s.python); err != nil {
		return nil, &SandboxError{Op: "probe", Err: err}
	}
	if fi, err := os.Stat(s.python); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
		return nil, &SandboxError{Op: "probe", Err: fmt.Errorf("interpreter %s is not an executable file (install python3-minimal)", s.python)}
	}
	s.layout = rootLayout()
	if os.Geteuid() == 0 {
		s.hostUID = nextHostUID
	}
	key := s.bwrap + "\x00" + s.python
	if _, ok := probed.Load(key); !ok {
		if err := s.probe(); err != nil {
			return nil, err
		}
		probed.Store(key, true)
	}
	return s, nil
}

// Limits returns the limits every run of s is held to.
func (s *Sandbox) Limits() SandboxLimits { return s.limits }

// probe runs a program that must print a fixed line; anything else means the sandbox is not
// usable here.
func (s *Sandbox) probe() error {
	res, err := s.Run(context.Background(), `print("sandbox-ok")`)
	if err != nil {
		return err
	}
	if res.ExitCode != 0 || strings.TrimSpace(res.Stdout) != "sandbox-ok" {
		return &SandboxError{Op: "probe", Err: fmt.Errorf("test program failed: exit %d, stdout %q, stderr %q", res.ExitCode, res.Stdout, res.Stderr)}
	}
	return nil
}

// hostUIDBase starts a range of host uids that no account uses; a run's uid is drawn from it
// by process id and a counter, so concurrent runs, here or in other processes, do not share a
// process budget.
const hostUIDBase = 0x60000000

var uidCounter atomic.Uint32

func nextHostUID() uint32 {
	return hostUIDBase + (uint32(os.Getpid())&0xffff)<<12 + uidCounter.Add(1)&0xfff
}

package tool

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"
)

// Limit names which limit stopped a run.
type Limit string

const (
	LimitNone   Limit = ""
	LimitTime   Limit = "time"   // wall-clock timeout
	LimitCPU    Limit = "cpu"    // RLIMIT_CPU (SIGXCPU)
	LimitOutput Limit = "output" // output flood, killed early
)

// RunResult is what a run of code produced. A non-zero exit, an exception or a limit hit is
// the code's doing and lands here; only a sandbox failure is an error from Run.
type RunResult struct {
	Stdout, Stderr                   string
	StdoutTruncated, StderrTruncated bool
	// ExitCode is the interpreter's exit status, or 128+n when signal n killed it.
	ExitCode int
	// Limit is set when a limit stopped the run.
	Limit   Limit
	Elapsed time.Duration
}

// OK reports a clean exit within every limit.
func (r RunResult) OK() bool { return r.ExitCode == 0 && r.Limit == LimitNone }

// Run executes code (Python 3 source) in a fresh sandbox. The error is non-nil only when the
// code could not be run at all: bad input (empty, too large, not UTF-8, NUL bytes), a sandbox
// that failed to start (*SandboxError), or ctx ending first (wrapping ctx.Err()).
func (s *Sandbox) Run(ctx context.Context, code string) (RunResult, error) {
	if err := s.checkCode(code); err != nil {
		return RunResult{}, err
	}
	if err := ctx.Err(); err != nil {
		return RunResult{}, fmt.Errorf("python sandbox: %w", err)
	}
	release, err := acquireSandbox(ctx)
	if err != nil {
		return RunResult{}, err
	}
	defer release()
	readyR, readyW, err := os.Pipe()
	if err != nil {
		return RunResult{}, &SandboxError{Op: "start", Err: fmt.Errorf("readiness pipe: %w", err)}
	}
	defer readyR.Close()

	cmd := exec.Command(s.bwrap, s.bwrapArgs()...)
	cmd.Dir = "/"
	cmd.Env = []string{}
	cmd.Stdin = strings.NewReader(code)
	cmd.ExtraFiles = []*os.File{readyW} // fd 3 inside; the bootstrap writes "ok" there
	cmd.SysProcAttr = s.sysProcAttr()
	// Grandchildren that somehow kept a pipe open must not hold Wait forever.
	cmd.WaitDelay = 2 * time.Second

	var (
		killOnce sync.Once
		limitMu  sync.Mutex
		limit    Limit
	)
	kill := func(why Limit) {
		killOnce.Do(func() {
			limitMu.Lock()
			limit = why
			limitMu.Unlock()
			killGroup(cmd)
		})
	}
	stdout := newCappedBuffer(s.limits.OutputBytes, func() { kill(LimitOutput) })
	stderr := newCappedBuffer(s.limits.OutputBytes, func() { kill(LimitOutput) })
	cmd.Stdout, cmd.Stderr = stdout, stderr

	start := time.Now()
	if err := cmd.Start(); err != nil {
		readyW.Close()
		return RunResult{}, &SandboxError{Op: "start", Err: fmt.Errorf("%s: %w", s.bwrap, err)}
	}
	readyW.Close() // only the child holds the write end now; EOF comes when it closes it

	readyCh := make(chan bool, 1)
	go func() {
		// Only the first two bytes count: they come from the bootstrap before the code runs,
		// so nothing the code writes later (say through /proc/1/fd) can undo them.
		var b [2]byte
		_, err := io.ReadFull(readyR, b[:])
		readyCh <- err == nil && string(b[:]) == "ok"
	}()

	runCtx, cancel := context.WithTimeout(ctx, s.limits.Timeout)
	defer cancel()
	done := make(chan struct{})
	var watcher sync.WaitGroup
	watcher.Go(func() {
		select {
		case <-runCtx.Done():
			kill(LimitTime)
		case <-done:
		}
	})
	waitErr := cmd.Wait()
	close(done)
	watcher.Wait()
	elapsed := time.Since(start)
	ready := <-readyCh

	limitMu.Lock()
	hit := limit
	limitMu.Unlock()
	if ctx.Err() != nil {
		// The caller gave up; what the code did no longer matters.
		return RunResult{}, fmt.Errorf("python sandbox: %w", ctx.Err())
	}
	errText, _ := stderr.String()
	if !ready {
		return RunResult{}, &SandboxError{Op: "start", Err: fmt.Errorf("sandbox did not start the code (%v, limit %q): %s", waitErr, hit, strings.TrimSpace(errText))}
	}
	res := RunResult{Elapsed: elapsed, Limit: hit, Stderr: errText}
	res.Stdout, res.StdoutTruncated = stdout.String()
	_, res.StderrTruncated = stderr.String()
	res.ExitCode = exitCode(cmd.ProcessState)
	if res.Limit == LimitNone {
		// bwrap reports a child killed by signal n as exit status 128+n. (RLIMIT_FSIZE shows
		// up as an OSError instead: Python ignores SIGXFSZ so that write fails with EFBIG.)
		if res.ExitCode == 128+int(sigXCPU) {
			res.Limit = LimitCPU
		}
	}
	var exitErr *exec.ExitError
	if waitErr != nil && !errors.As(waitErr, &exitErr) && !errors.Is(waitErr, exec.ErrWaitDelay) {
		return RunResult{}, &SandboxError{Op: "run", Err: waitErr}
	}
	return res, nil
}

// exitCode folds a signal death of bwrap itself (our SIGKILL) into the 128+n convention.
func exitCode(ps *os.ProcessState) int {
	if ps == nil {
		return -1
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}

func (s *Sandbox) checkCode(code string) error {
	switch {
	case strings.TrimSpace(code) == "":
		return errors.New("python sandbox: code is empty")
	case len(code) > s.limits.CodeBytes:
		return fmt.Errorf("python sandbox: code is %d bytes, over the limit of %d", len(code), s.limits.CodeBytes)
	case !utf8.ValidString(code):
		return errors.New("python sandbox: code is not valid UTF-8")
	case strings.IndexByte(code, 0) >= 0:
		return errors.New("python sandbox: code contains a NUL byte")
	}
	return nil
}

// Summary renders the result compactly for a model: stdout, then stderr when there is any,
// then the exit status or the limit when the run did not end cleanly.
func (r RunResult) Summary() string {
	var b strings.Builder
	b.WriteString(r.Stdout)
	if r.Stderr != "" {
		if b.Len() > 0 && !strings.HasSuffix(b.String(), "\n") {
			b.WriteByte('\n')
		}
		b.WriteString("[stderr]\n")
		b.WriteString(r.Stderr)
	}
	status := ""
	switch r.Limit {
	case LimitTime:
		status = "[killed: time limit exceeded]"
	case LimitCPU:
		status = "[killed: CPU time limit exceeded]"
	case LimitOutput:
		status = "[killed: output limit exceeded]"
	default:
		if r.ExitCode != 0 {
			status = fmt.Sprintf("[exit status %d]", r.ExitCode)
		}
	}
	if status != "" {
		if b.Len() > 0 && !strings.HasSuffix(b.String(), "\n") {
			b.WriteByte('\n')
		}
		b.WriteString(status)
	}
	if b.Len() == 0 {
		return "[no output]"
	}
	return b.String()
}

package remote

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// Process is a local learner process (`python -m agentrl_learner`) that this process started.
type Process struct {
	// URL is where it listens.
	URL  string
	cmd  *exec.Cmd
	done chan struct{}
	err  error
	log  *os.File
}

// ProcessOptions say how to start a local learner.
type ProcessOptions struct {
	// Python is the interpreter (e.g. /usr/bin/python3).
	Python string
	// Path, when set, is put first on PYTHONPATH (the folder holding agentrl_learner, such as
	// the repository's learners/torch).
	Path string
	// Args are the learner's arguments after --listen and --ready-file (--model DIR, …).
	Args []string
	// Log is the file its standard output and error go to.
	Log string
	// Env is added to the environment (NAME=value), e.g. the key's variable.
	Env []string
	// StartTimeout bounds the wait for it to listen (default 2 minutes: loading a model).
	StartTimeout time.Duration
	// Listen is the address to listen on (default 127.0.0.1:0, a free port).
	Listen string
}

// Start runs the learner (on a loopback port of its choosing unless o.Listen names one) and waits until it listens; a
// learner that exits or does not listen in time is an error quoting the end of its log.
func Start(ctx context.Context, o ProcessOptions) (*Process, error) {
	if o.Python == "" {
		return nil, errors.New("learn/remote: no python interpreter to start the learner with")
	}
	if o.StartTimeout <= 0 {
		o.StartTimeout = 2 * time.Minute
	}
	if err := os.MkdirAll(filepath.Dir(o.Log), 0o755); err != nil {
		return nil, err
	}
	logf, err := os.OpenFile(o.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	ready := o.Log + ".ready"
	_ = os.Remove(ready)
	listen := o.Listen
	if listen == "" {
		listen = "127.0.0.1:0"
	}
	args := append([]string{"-m", "agentrl_learner", "--listen", listen, "--ready-file", ready}, o.Args...)
	cmd := exec.Command(o.Python, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = append(os.Environ(), o.Env...)
	if o.Path != "" {
		pp := o.Path
		if old := os.Getenv("PYTHONPATH"); old != "" {
			pp += string(os.PathListSeparator) + old
		}
		cmd.Env = append(cmd.Env, "PYTHONPATH="+pp)
	}
	ownGroup(cmd)
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("learn/remote: start the learner: %w", err)
	}
	p := &Process{cmd: cmd, done: make(chan struct{}), log: logf}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	deadline := time.NewTimer(o.StartTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if b, err := os.ReadFile(ready); err == nil && strings.HasSuffix(string(b), "\n") {
			p.URL = "http://" + strings.TrimSpace(string(b))
			_ = os.Remove(ready)
			return p, nil
		}
		select {
		case <-p.done:
			p.log.Close()
			return nil, fmt.Errorf("learn/remote: the learner exited before listening (%v); its log %s ends:\n%s", p.err, o.Log, tail(o.Log))
		case <-deadline.C:
			p.Stop()
			return nil, fmt.Errorf("learn/remote: the learner did not listen within %v; its log %s ends:\n%s", o.StartTimeout, o.Log, tail(o.Log))
		case <-ctx.Done():
			p.Stop()
			return nil, ctx.Err()
		case <-tick.C:
		}
	}
}

// tail is the end of a log file, for error messages.
func tail(path string) string {
	b, _ := os.ReadFile(path)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

// Done is closed when the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Kill ends the process at once (SIGKILL), as a crash would, and waits for it.
func (p *Process) Kill() {
	p.signal(sigKill)
	<-p.done
}

// Stop asks the process to end (SIGTERM), kills it after 10 seconds, and waits for it.
func (p *Process) Stop() {
	select {
	case <-p.done:
	default:
		p.signal(sigTerm)
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			p.signal(sigKill)
			<-p.done
		}
	}
	p.log.Close()
}

// Pause stops the process (SIGSTOP) without ending it: a learner that stops answering. Resume
// continues it.
func (p *Process) Pause() {
	p.signal(sigStop)
	p.waitStopped(2 * time.Second)
}

// Resume continues a paused process.
func (p *Process) Resume() { p.signal(sigCont) }

//go:build !unix

package remote

import (
	"os/exec"
	"time"
)

type sysSignal int

const (
	sigKill sysSignal = iota
	sigTerm
	sigStop
	sigCont
)

func ownGroup(*exec.Cmd) {}

// signal ends the learner for sigKill and sigTerm; stopping and continuing a process are
// unix's alone.
func (p *Process) signal(sig sysSignal) {
	if sig == sigKill || sig == sigTerm {
		_ = p.cmd.Process.Kill()
	}
}

// waitStopped has nothing to wait for where a process cannot be paused.
func (p *Process) waitStopped(time.Duration) {}

//go:build unix

package remote

import (
	"os/exec"
	"syscall"
)

const (
	sigKill = syscall.SIGKILL
	sigTerm = syscall.SIGTERM
	sigStop = syscall.SIGSTOP
	sigCont = syscall.SIGCONT
)

// ownGroup starts the learner in a process group of its own, so that its signals reach the
// workers it may start (torch's) and none reach this process.
func ownGroup(cmd *exec.Cmd) { cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} }

// signal sends sig to the learner's process group.
func (p *Process) signal(sig syscall.Signal) { _ = syscall.Kill(-p.cmd.Process.Pid, sig) }

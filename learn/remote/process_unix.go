//go:build unix

package remote

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"
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

// waitStopped waits, at most max, until the learner's process is stopped: SIGSTOP is delivered
// asynchronously, and a thread running on another core goes on until it next enters the kernel.
// Where /proc is absent it returns at once.
func (p *Process) waitStopped(max time.Duration) {
	path := fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid)
	for end := time.Now().Add(max); time.Now().Before(end); time.Sleep(time.Millisecond) {
		stat, err := os.ReadFile(path)
		if err != nil {
			return
		}
		// The state follows the command name, which is in parentheses and may hold spaces.
		if i := bytes.LastIndexByte(stat, ')'); i >= 0 && i+2 < len(stat) && (stat[i+2] == 'T' || stat[i+2] == 't') {
			return
		}
	}
}

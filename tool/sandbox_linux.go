package tool

import (
	"errors"
	"os/exec"
	"syscall"
)

// sysProcAttr puts bwrap in its own process group (so a timeout kills the whole group), kills
// it if this process dies, and, when running as root, drops to a per-run unprivileged uid.
func (s *Sandbox) sysProcAttr() *syscall.SysProcAttr {
	attr := &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if s.hostUID != nil {
		uid := s.hostUID()
		attr.Credential = &syscall.Credential{Uid: uid, Gid: uid, NoSetGroups: false, Groups: []uint32{}}
	}
	return attr
}

// killGroup sends SIGKILL to bwrap's process group. bwrap's init inside the sandbox dies with
// it (--die-with-parent), and with that init the kernel kills everything in the pid namespace,
// including processes that started their own session.
func killGroup(cmd *exec.Cmd) {
	if cmd.Process == nil {
		return
	}
	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		_ = cmd.Process.Kill()
	}
}

// sigXCPU is the signal of RLIMIT_CPU.
const sigXCPU = syscall.SIGXCPU

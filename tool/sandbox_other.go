//go:build !linux

package tool

import (
	"os/exec"
	"syscall"
)

// The sandbox runs on Linux alone (bubblewrap and user namespaces); elsewhere its probe fails
// with bwrap absent, and these keep the package building so the rest of agentrl runs.

func (s *Sandbox) sysProcAttr() *syscall.SysProcAttr { return nil }

func killGroup(cmd *exec.Cmd) {
	if cmd.Process != nil {
		_ = cmd.Process.Kill()
	}
}

// sigXCPU is Linux's SIGXCPU: bwrap's exit status speaks of the Linux child it ran.
const sigXCPU = syscall.Signal(24)

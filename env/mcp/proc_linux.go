package mcp

import "syscall"

// dieWithParent has the kernel kill the server when this process dies.
func dieWithParent() *syscall.SysProcAttr { return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} }

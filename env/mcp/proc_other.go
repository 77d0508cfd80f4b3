//go:build !linux

package mcp

import "syscall"

// dieWithParent: only Linux kills a child with its parent (Pdeathsig); elsewhere Close and
// the connection's deadlines end the server.
func dieWithParent() *syscall.SysProcAttr { return nil }

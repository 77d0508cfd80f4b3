//go:build unix

package mcptest

import (
	"errors"
	"syscall"
)

// ProcessGone reports whether pid no longer exists (the server exited and was reaped).
func ProcessGone(pid int) bool {
	return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}

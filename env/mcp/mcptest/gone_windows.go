package mcptest

import "os"

// ProcessGone reports whether pid no longer exists (the server exited and was reaped).
func ProcessGone(pid int) bool {
	p, err := os.FindProcess(pid)
	if err != nil {
		return true
	}
	_ = p.Release()
	return false
}

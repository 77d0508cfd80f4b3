//go:build unix

package bench

import (
	"syscall"
	"time"
)

// cpuTime is the process's user+system CPU time; on a shared machine CPU time per step is
// steadier than wall time, which includes waiting for cores other processes hold.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

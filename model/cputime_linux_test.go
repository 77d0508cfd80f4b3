package model

import "golang.org/x/sys/unix"

// processCPUSeconds is the CPU time of the whole process (every thread). On the shared benchmark
// machine wall time includes the time other processes hold the cores; CPU time per token is
// far less affected.
func processCPUSeconds() float64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_PROCESS_CPUTIME_ID, &ts); err != nil {
		return 0
	}
	return float64(ts.Sec) + float64(ts.Nsec)*1e-9
}

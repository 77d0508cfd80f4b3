package kernels

import "golang.org/x/sys/unix"

// threadCPUSeconds is the CPU time of the calling OS thread. On the shared benchmark machine
// wall time includes the time other processes hold the core; single-threaded benchmarks lock
// their goroutine to a thread and also report GFLOP/s per CPU-second, which that noise
// affects far less.
func threadCPUSeconds() float64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return 0
	}
	return float64(ts.Sec) + float64(ts.Nsec)*1e-9
}

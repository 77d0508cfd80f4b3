//go:build !linux

package kernels

// threadCPUSeconds is unavailable here; benchmarks then omit the per-CPU-second metric.
func threadCPUSeconds() float64 { return 0 }

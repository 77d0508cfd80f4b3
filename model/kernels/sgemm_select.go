package kernels

import "sync"

// kernelOverride, when non-nil, replaces the automatic choice (tests force each path with it).
var kernelOverride *microKernel

var (
	bestOnce sync.Once
	best     *microKernel
)

// activeKernel is the fastest microkernel this CPU runs: the first of availableKernels.
func activeKernel() *microKernel {
	if kernelOverride != nil {
		return kernelOverride
	}
	bestOnce.Do(func() { best = availableKernels()[0] })
	return best
}

// SgemmKernel names the microkernel Sgemm uses on this machine (for logs and benchmarks).
func SgemmKernel() string { return activeKernel().name }

package kernels

import "sync"

// elemOverride, when non-nil, replaces the automatic choice (tests force each path with it).
var elemOverride *elemKernel

var (
	bestElemOnce sync.Once
	bestElem     *elemKernel
)

// activeElem is the fastest elementwise implementation this CPU runs: the first of
// availableElemKernels.
func activeElem() *elemKernel {
	if elemOverride != nil {
		return elemOverride
	}
	bestElemOnce.Do(func() { bestElem = availableElemKernels()[0] })
	return bestElem
}

// ElemKernel names the elementwise kernels in use on this machine (for logs and benchmarks).
func ElemKernel() string { return activeElem().name }

// expSum writes dst[i] = e^(src[i] − shift) (expf's bits) and returns the sum of the
// exponentials added in the fixed order of expSumGo. dst may be src.
func expSum(dst, src []float32, shift float32) float32 {
	if len(dst) < len(src) {
		panic("kernels: expSum destination shorter than source")
	}
	return activeElem().expSum(dst, src, shift)
}

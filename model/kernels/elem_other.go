//go:build !amd64 || purego

package kernels

// availableElemKernels lists the elementwise implementations this build can run, fastest first.
// Without the amd64 assembly only the portable Go one exists.
func availableElemKernels() []*elemKernel { return []*elemKernel{&goElem} }

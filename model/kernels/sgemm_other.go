//go:build !amd64 || purego

package kernels

// availableKernels lists the microkernels this build can run, fastest first. Without the amd64
// assembly only the portable Go kernel exists.
func availableKernels() []*microKernel { return []*microKernel{&goKernel} }

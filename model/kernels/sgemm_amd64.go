//go:build amd64 && !purego

package kernels

func availableKernels() []*microKernel { return []*microKernel{&goKernel} }

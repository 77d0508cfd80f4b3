//go:build !amd64 || purego

package kernels

// availableKernels lists the microkernels this build can run, fastest first. Without the amd64
// assembly only the portable Go kernel exists.
func availableKernels() []*microKernel { return []*microKernel{&goKernel} }

func transposeStrip(dst, src []float32, ld, kb, w, width int) {
	transposeStripGo(dst, src, ld, kb, w, width, 0)
}

func copyStrip(dst, src []float32, ld, kb, w, width int) { copyStripGo(dst, src, ld, kb, w, width) }

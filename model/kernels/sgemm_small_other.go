//go:build !amd64 || purego

package kernels

// smallNNFor is nil without the amd64 assembly: the NN small-m path runs smallGoNN.
func smallNNFor(*microKernel) *smallNNKernel { return nil }

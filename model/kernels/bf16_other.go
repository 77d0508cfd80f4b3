//go:build !amd64 || purego

package kernels

// bf16For is nil without the amd64 assembly: SgemmBF16 runs the Go kernels.
func bf16For(*microKernel) *bf16Family { return nil }

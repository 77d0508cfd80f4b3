//go:build amd64 && !purego

package kernels

import "golang.org/x/sys/cpu"

//go:generate go run ./internal/bf16gen -out bf16_amd64.s -stubs bf16_stubs_amd64.go -pkg kernels

// The bfloat16-weight kernels (bf16gen): the NN small-m kernels' tiles, 12 rows × 32 columns on
// AVX-512 and 6 × 16 on AVX2, with B widened from bfloat16 in registers.
var (
	bf16AVX512 = bf16Family{name: "avx512", width: 32, fns: []func(int, *float32, int, *uint16, int, *float32, int, float32, float32){
		bf16NNavx512_1, bf16NNavx512_2, bf16NNavx512_3, bf16NNavx512_4,
		bf16NNavx512_5, bf16NNavx512_6, bf16NNavx512_7, bf16NNavx512_8,
		bf16NNavx512_9, bf16NNavx512_10, bf16NNavx512_11, bf16NNavx512_12,
	}, gemv: []bf16GemvKernel{
		{8, bf16Gemvavx512_8},
		{4, bf16Gemvavx512_4},
		{2, bf16Gemvavx512_2},
	}}
	bf16AVX2 = bf16Family{name: "avx2", width: 16, fns: []func(int, *float32, int, *uint16, int, *float32, int, float32, float32){
		bf16NNavx2_1, bf16NNavx2_2, bf16NNavx2_3,
		bf16NNavx2_4, bf16NNavx2_5, bf16NNavx2_6,
	}, gemv: []bf16GemvKernel{
		{6, bf16Gemvavx2_6},
		{4, bf16Gemvavx2_4},
		{2, bf16Gemvavx2_2},
	}}
)

// The AVX-512 family hands the columns left after its 32-wide panels to the AVX2 one (both one
// FMA chain per element), as the float32 NN kernels do.
func init() {
	if cpu.X86.HasAVX2 && cpu.X86.HasFMA {
		bf16AVX512.narrow = &bf16AVX2
	}
}

// bf16For is the bfloat16 family of kern's instruction set (the float32 microkernel decides
// which instruction set a run uses); nil means the Go kernels.
func bf16For(kern *microKernel) *bf16Family {
	switch kern {
	case &avx512Kernel:
		return &bf16AVX512
	case &avx2Kernel:
		return &bf16AVX2
	}
	return nil
}

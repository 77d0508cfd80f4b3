//go:build amd64 && !purego

package kernels

import "golang.org/x/sys/cpu"

// The small-m NN kernels, indexed by row count less one: the blocked kernels' tiles (12×32 on
// AVX-512, 6×16 on AVX2) with A and B read in place.
var (
	smallNNAVX512 = smallNNKernel{width: 32, fns: []func(int, *float32, int, *float32, int, *float32, int, float32, float32){
		sgemmSmallNNavx512_1, sgemmSmallNNavx512_2, sgemmSmallNNavx512_3, sgemmSmallNNavx512_4,
		sgemmSmallNNavx512_5, sgemmSmallNNavx512_6, sgemmSmallNNavx512_7, sgemmSmallNNavx512_8,
		sgemmSmallNNavx512_9, sgemmSmallNNavx512_10, sgemmSmallNNavx512_11, sgemmSmallNNavx512_12,
	}, pfns: []func(int, *float32, int, *float32, int, *float32, int, float32, float32, int){
		sgemmSmallNNPFavx512_1, sgemmSmallNNPFavx512_2, sgemmSmallNNPFavx512_3, sgemmSmallNNPFavx512_4,
		sgemmSmallNNPFavx512_5, sgemmSmallNNPFavx512_6, sgemmSmallNNPFavx512_7, sgemmSmallNNPFavx512_8,
		sgemmSmallNNPFavx512_9, sgemmSmallNNPFavx512_10, sgemmSmallNNPFavx512_11, sgemmSmallNNPFavx512_12,
	}, gemv: []gemvKernel{
		{8, sgemvPackedavx512_8},
		{4, sgemvPackedavx512_4},
		{2, sgemvPackedavx512_2},
	}}
	smallNNAVX2 = smallNNKernel{width: 16, fns: []func(int, *float32, int, *float32, int, *float32, int, float32, float32){
		sgemmSmallNNavx2_1, sgemmSmallNNavx2_2, sgemmSmallNNavx2_3,
		sgemmSmallNNavx2_4, sgemmSmallNNavx2_5, sgemmSmallNNavx2_6,
	}, pfns: []func(int, *float32, int, *float32, int, *float32, int, float32, float32, int){
		sgemmSmallNNPFavx2_1, sgemmSmallNNPFavx2_2, sgemmSmallNNPFavx2_3,
		sgemmSmallNNPFavx2_4, sgemmSmallNNPFavx2_5, sgemmSmallNNPFavx2_6,
	}, gemv: []gemvKernel{
		{6, sgemvPackedavx2_6},
		{4, sgemvPackedavx2_4},
		{2, sgemvPackedavx2_2},
	}}
)

// The AVX-512 kernels hand narrow products to the AVX2 ones where the CPU has both: the NN
// small-m family the columns left after its 32-wide panels, the blocked kernel products of at
// most 16 columns. Both come from one generator (the same operations per element) and the
// blocked kernels share kc, so results keep their bits.
func init() {
	if cpu.X86.HasAVX2 && cpu.X86.HasFMA {
		smallNNAVX512.narrow = &smallNNAVX2
		avx512Kernel.narrow = &avx2Kernel
	}
}

// smallNNFor is the NN small-m family of kern's instruction set; nil means smallGoNN.
func smallNNFor(kern *microKernel) *smallNNKernel {
	switch kern {
	case &avx512Kernel:
		return &smallNNAVX512
	case &avx2Kernel:
		return &smallNNAVX2
	}
	return nil
}

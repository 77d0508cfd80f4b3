package kernels

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestNarrowKernelKeepsBits: handing a narrow product to a kernel's narrow partner changes no
// bit of C. The partner must slice k as the kernel does, and every element must come out of the
// same FMA chain and store, for every transpose, scalar pair, row count and worker count; k
// spans several slices so the slicing is exercised.
func TestNarrowKernelKeepsBits(t *testing.T) {
	for _, kern := range availableKernels() {
		if kern.narrow == nil {
			continue
		}
		if kern.narrow.kc != kern.kc {
			t.Fatalf("%s: narrow kernel %s slices k by %d, not %d", kern.name, kern.narrow.name, kern.narrow.kc, kern.kc)
		}
		seed := uint64(0)
		for _, m := range []int{17, 40, 131} {
			for _, n := range []int{1, 7, 16} {
				for _, k := range []int{5, 16, 385, 900} {
					for _, tr := range [][2]bool{{false, false}, {false, true}, {true, false}, {true, true}} {
						for _, ab := range [][2]float32{{1, 0}, {0.5, 1}, {-1.25, 0.75}} {
							seed++
							tc := gemmCase{m, n, k, tr[0], tr[1], ab[0], ab[1], int(seed % 3)}
							o := tc.operands(rand.New(rand.NewPCG(seed, 0x9a77)))
							run := func(narrow *microKernel, workers int) []float32 {
								saved := kern.narrow
								kern.narrow = narrow
								defer func() { kern.narrow = saved }()
								withKernel(t, kern, workers)
								c := slices.Clone(o.c)
								Sgemm(tc.transA, tc.transB, m, n, k, tc.alpha, o.a, o.lda, o.b, o.ldb, tc.beta, c, o.ldc)
								return c
							}
							want := run(nil, 1)
							for _, workers := range []int{1, 2, 3} {
								got := run(kern.narrow, workers)
								for i := range want {
									if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
										t.Fatalf("%s %+v workers=%d: C[%d] = %v with %s, %v without", kern.name, tc, workers, i, got[i], kern.narrow.name, want[i])
									}
								}
							}
						}
					}
				}
			}
		}
	}
}

package kernels

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestSgemmSplitKMatchesSgemm: SgemmSplitK is Sgemm bit for bit for beta 0 and 1, at weight
// gradient shapes (A transposed, k of several slices, the last one short) and the other
// transpositions, alpha 1 and not, on every microkernel and on one worker or several.
func TestSgemmSplitKMatchesSgemm(t *testing.T) {
	rng := rand.New(rand.NewPCG(16, 16))
	for _, kern := range availableKernels() {
		for _, nw := range []int{1, 3} {
			withKernel(t, kern, nw)
			for _, tr := range [][2]bool{{true, false}, {false, false}, {true, true}, {false, true}} {
				for _, m := range []int{17, 64, 130} {
					for _, n := range []int{16, 40, 192} {
						for _, k := range []int{300, 900, 2049} {
							for _, ab := range [][2]float32{{1, 0}, {1, 1}, {0.5, 1}} {
								what := fmt.Sprintf("%s workers=%d trans=%v m=%d n=%d k=%d alpha=%v beta=%v", kern.name, nw, tr, m, n, k, ab[0], ab[1])
								lda, ldb := k, n
								if tr[0] {
									lda = m
								}
								if tr[1] {
									ldb = k
								}
								a, b, c0 := randSlice(rng, m*k, 1), randSlice(rng, k*n, 1), randSlice(rng, m*n, 1)
								want, got := append([]float32(nil), c0...), append([]float32(nil), c0...)
								Sgemm(tr[0], tr[1], m, n, k, ab[0], a, lda, b, ldb, ab[1], want, n)
								SgemmSplitK(tr[0], tr[1], m, n, k, ab[0], a, lda, b, ldb, ab[1], got, n)
								if i := sameBits(got, want); i >= 0 {
									t.Fatalf("%s: c[%d] = %v, want %v", what, i, got[i], want[i])
								}
							}
						}
					}
				}
			}
		}
	}
}

package kernels

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestThinProductsMatchSgemm: SgemmNN is Sgemm(false, false, …) and SgemmPacked is
// Sgemm(false, true, …) bit for bit at the training step's shapes (many rows against a thin
// weight), k across several of the kernels' k slices, beta 0 and 1, on every microkernel and
// with one worker or several (700 rows on three workers take SgemmNN's split by chunks of rows,
// the last chunk short).
func TestThinProductsMatchSgemm(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 15))
	for _, kern := range availableKernels() {
		for _, nw := range []int{1, 3} {
			withKernel(t, kern, nw)
			for _, m := range []int{1, 13, 40, 300, 700} {
				for _, n := range []int{16, 48, 64, 100, 192} {
					for _, k := range []int{5, 64, 192, 900} {
						for _, beta := range []float32{0, 1} {
							what := fmt.Sprintf("%s workers=%d m=%d n=%d k=%d beta=%v", kern.name, nw, m, n, k, beta)
							a, b, c0 := randSlice(rng, m*k, 1), randSlice(rng, k*n, 1), randSlice(rng, m*n, 1)
							want, got := append([]float32(nil), c0...), append([]float32(nil), c0...)
							Sgemm(false, false, m, n, k, 0.5, a, k, b, n, beta, want, n)
							SgemmNN(m, n, k, 0.5, a, k, b, n, beta, got, n)
							if i := sameBits(got, want); i >= 0 {
								t.Fatalf("SgemmNN %s: c[%d] = %v, want %v", what, i, got[i], want[i])
							}
							w := randSlice(rng, n*k, 1) // n×k, applied as A·Wᵀ
							var p PackedWeights
							p.Pack(w, n, k)
							copy(want, c0)
							copy(got, c0)
							Sgemm(false, true, m, n, k, 0.5, a, k, w, k, beta, want, n)
							SgemmPacked(m, 0.5, a, k, &p, beta, got, n)
							if i := sameBits(got, want); i >= 0 {
								t.Fatalf("SgemmPacked %s: c[%d] = %v, want %v", what, i, got[i], want[i])
							}
						}
					}
				}
			}
		}
	}
}

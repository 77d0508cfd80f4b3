package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// TestSgemmPackedBitwise: SgemmPacked must give bit for bit what Sgemm's blocked path gives for
// the same W (stored n×k, transB), for every kernel, m, slicing of k, alpha/beta and worker
// count, including ragged last panels and strided A and C (padding holds NaN).
func TestSgemmPackedBitwise(t *testing.T) {
	ms := []int{0, 1, 2, 5, 12, 13, 25, 32, 40}
	nks := [][2]int{{1, 1}, {5, 3}, {16, 16}, {33, 385}, {64, 770}, {70, 129}, {130, 7}, {0, 4}, {4, 0}}
	scalars := [][2]float32{{1, 0}, {1, 1}, {-1.5, 0.75}, {2, -0}, {0, 2}}
	for _, kern := range availableKernels() {
		t.Run(kern.name, func(t *testing.T) {
			seed := uint64(0)
			for _, nk := range nks {
				n, k := nk[0], nk[1]
				withKernel(t, kern, 1)
				rng := rand.New(rand.NewPCG(seed, 0xfacade))
				w, _ := randMatrix(rng, n, k, 0)
				var pw PackedWeights
				pw.Pack(w, n, k)
				for _, m := range ms {
					for _, ab := range scalars {
						seed++
						tc := gemmCase{m, n, k, false, true, ab[0], ab[1], int(seed % 3)}
						o := tc.operands(rand.New(rand.NewPCG(seed, 0xb17)))
						want := append([]float32(nil), o.c...)
						withKernel(t, kern, 1)
						withSmall(t, -1)
						Sgemm(false, true, m, n, k, tc.alpha, o.a, o.lda, w, max(k, 1), tc.beta, want, o.ldc)
						for _, workers := range []int{1, 2} {
							withKernel(t, kern, workers)
							got := append([]float32(nil), o.c...)
							SgemmPacked(m, tc.alpha, o.a, o.lda, &pw, tc.beta, got, o.ldc)
							for i := range got {
								if math.Float32bits(got[i]) != math.Float32bits(want[i]) && !(math.IsNaN(float64(got[i])) && math.IsNaN(float64(want[i]))) {
									t.Fatalf("%v workers=%d: C[%d] = %g, blocked Sgemm %g", tc, workers, i, got[i], want[i])
								}
							}
						}
					}
				}
			}
		})
	}
}

// TestSgemmPackedRepack: packing new weights into the same PackedWeights replaces the old ones.
func TestSgemmPackedRepack(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 3))
	w1, _ := randMatrix(rng, 40, 20, 0)
	w2, _ := randMatrix(rng, 40, 20, 0)
	a, _ := randMatrix(rng, 3, 20, 0)
	var pw PackedWeights
	pw.Pack(w1, 40, 20)
	pw.Pack(w2, 40, 20)
	got, want := make([]float32, 3*40), make([]float32, 3*40)
	SgemmPacked(3, 1, a, 20, &pw, 0, got, 40)
	Sgemm(false, true, 3, 40, 20, 1, a, 20, w2, 20, 0, want, 40)
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("C[%d] = %g after repacking, want %g", i, got[i], want[i])
		}
	}
}

// BenchmarkSgemmPacked compares SgemmPacked with Sgemm (its small-m path for m ≤ smallMaxM, the
// blocked one above) at the default model's decoding shapes: C = X·Wᵀ, W n×k (fused QKV, output,
// gate+up, down, LM head at Dim 256), m sequences decoding together.
func BenchmarkSgemmPacked(b *testing.B) {
	for _, nk := range [][2]int{{512, 256}, {256, 256}, {1376, 256}, {256, 688}, {2048, 256}} {
		for _, m := range []int{1, 32} {
			s := benchShape{fmt.Sprintf("NT_%dx%dx%d", m, nk[0], nk[1]), false, true, m, nk[0], nk[1]}
			a, w, c, lda, ldb := s.operands()
			b.Run(s.name+"/sgemm", func(b *testing.B) {
				for range b.N {
					Sgemm(false, true, s.m, s.n, s.k, 1, a, lda, w, ldb, 0, c, s.n)
				}
				reportGflops(b, s)
			})
			b.Run(s.name+"/packed", func(b *testing.B) {
				var pw PackedWeights
				pw.Pack(w, s.n, s.k)
				b.ResetTimer()
				for range b.N {
					SgemmPacked(s.m, 1, a, lda, &pw, 0, c, s.n)
				}
				reportGflops(b, s)
			})
		}
	}
}

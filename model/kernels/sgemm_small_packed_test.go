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

// TestSmallNNPrefetchKeepsBits: each prefetching NN kernel gives the bits of the plain one of its
// row count, whatever its prefetch distance, including distances far past the end of B.
func TestSmallNNPrefetchKeepsBits(t *testing.T) {
	for _, kern := range availableKernels() {
		nn := smallNNFor(kern)
		if nn == nil || nn.pfns == nil {
			continue
		}
		rng := rand.New(rand.NewPCG(7, 7))
		for rows := 1; rows <= len(nn.fns); rows++ {
			for _, kb := range []int{1, 3, 4, 9, 64} {
				for _, pfd := range []int{0, 4 * kb * nn.width, 1 << 20, -4096} {
					a, lda := randMatrix(rng, rows, kb, 3)
					b, _ := randMatrix(rng, kb, nn.width, 0)
					c0, ldc := randMatrix(rng, rows, nn.width, 5)
					want := append([]float32(nil), c0...)
					got := append([]float32(nil), c0...)
					nn.fns[rows-1](kb, &a[0], lda, &b[0], nn.width, &want[0], ldc, 1.5, 0.5)
					nn.pfns[rows-1](kb, &a[0], lda, &b[0], nn.width, &got[0], ldc, 1.5, 0.5, pfd)
					for i := range got {
						if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
							t.Fatalf("%s rows %d kb %d pfd %d: element %d is %v, want %v", kern.name, rows, kb, pfd, i, got[i], want[i])
						}
					}
				}
			}
		}
	}
}

// BenchmarkSgemmPackedStream runs the products of a decode step's weights, a whole model's
// layers one after another, so that weights larger than the caches come from memory as in
// decoding: m=1 streams them, m=32 is where the prefetching passes of smallNNPanel matter
// (measured with and without them).
// Sizes as `agentrl bench model --configs 512x8,1024x16` (QKV, O, gate+up, down per layer).
func BenchmarkSgemmPackedStream(b *testing.B) {
	for _, sz := range []struct {
		name   string
		layers int
		shapes [][2]int // n, k
	}{
		{"24M", 8, [][2]int{{1024, 512}, {512, 512}, {2752, 512}, {512, 1376}}},
		{"187M", 16, [][2]int{{2048, 1024}, {1024, 1024}, {5472, 1024}, {1024, 2736}}},
	} {
		rng := rand.New(rand.NewPCG(1, 1))
		var ws []*PackedWeights
		maxN := 0
		for range sz.layers {
			for _, s := range sz.shapes {
				w, _ := randMatrix(rng, s[0], s[1], 0)
				p := &PackedWeights{}
				p.Pack(w, s[0], s[1])
				ws = append(ws, p)
				maxN = max(maxN, s[0], s[1])
			}
		}
		for _, run := range []struct {
			m  int
			pf bool
		}{{1, true}, {32, false}, {32, true}} {
			m := run.m
			a, _ := randMatrix(rng, m, maxN, 0)
			c := make([]float32, m*maxN)
			b.Run(fmt.Sprintf("%s/m=%d/prefetch=%v", sz.name, m, run.pf), func(b *testing.B) {
				packedPrefetch = run.pf
				defer func() { packedPrefetch = true }()
				flops := 0.0
				for range b.N {
					for _, p := range ws {
						n, k := p.Dims()
						SgemmPacked(m, 1, a, k, p, 0, c, n)
						flops += 2 * float64(m) * float64(n) * float64(k)
					}
				}
				b.ReportMetric(flops/b.Elapsed().Seconds()/1e9, "GFLOP/s")
				b.ReportMetric(float64(m*b.N)/b.Elapsed().Seconds(), "rows/s")
			})
		}
	}
}

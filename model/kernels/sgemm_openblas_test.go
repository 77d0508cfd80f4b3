//go:build openblas && cgo

package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/agentrl/agentrl/model/kernels/internal/openblas"
)

// openblasQuiesce outlasts OpenBLAS's default thread spin timeout (2^28 cycles, ~75 ms at
// 3.6 GHz).
const openblasQuiesce = 150 * time.Millisecond

// BenchmarkVsOpenBLAS alternates blocks of up to eight Sgemm and eight cblas_sgemm calls at
// every benchmark shape (each block after the same pause, the order swapped every block), so
// both see the same machine load, and reports each one's GFLOP/s and their ratio. threads=1
// pins both to one core; threads=0 lets both use every core.
//
//	go test -tags openblas -run XXX -bench VsOpenBLAS ./model/kernels
func BenchmarkVsOpenBLAS(b *testing.B) {
	for _, s := range modelShapes() {
		for _, threads := range []int{0, 1} {
			b.Run(fmt.Sprintf("%s/threads=%d", s.name, threads), func(b *testing.B) {
				prevW := workerOverride
				workerOverride = threads
				openblas.SetThreads(threads)
				defer func() { workerOverride = prevW; openblas.SetThreads(0) }()
				a, bm, c, lda, ldb := s.operands()
				var ours, blas time.Duration
				ourCall := func() { Sgemm(s.transA, s.transB, s.m, s.n, s.k, 1, a, lda, bm, ldb, 0, c, s.n) }
				blasCall := func() { openblas.Sgemm(s.transA, s.transB, s.m, s.n, s.k, 1, a, lda, bm, ldb, 0, c, s.n) }
				// timeBlock times n back-to-back calls of f, as a training step makes them: OpenBLAS's
				// idle threads spin for ~2^28 cycles after a call before they sleep, holding the
				// other core, so each block starts after a pause that outlasts them, and two
				// untimed calls wake both libraries' threads (and this VM's idle cores) first.
				timeBlock := func(f func(), n int) time.Duration {
					b.StopTimer()
					if threads != 1 {
						time.Sleep(openblasQuiesce)
					}
					f()
					f()
					b.StartTimer()
					t0 := time.Now()
					for range n {
						f()
					}
					return time.Since(t0)
				}
				b.ResetTimer()
				for done, blk := 0, 0; done < b.N; blk++ {
					n := min(8, b.N-done)
					if blk%2 == 0 {
						ours += timeBlock(ourCall, n)
						blas += timeBlock(blasCall, n)
					} else {
						blas += timeBlock(blasCall, n)
						ours += timeBlock(ourCall, n)
					}
					done += n
				}
				flop := 2 * float64(s.m) * float64(s.n) * float64(s.k) * float64(b.N)
				b.ReportMetric(flop/ours.Seconds()/1e9, "ours-GFLOP/s")
				b.ReportMetric(flop/blas.Seconds()/1e9, "openblas-GFLOP/s")
				b.ReportMetric(blas.Seconds()/ours.Seconds(), "ours/openblas")
			})
		}
	}
}

// TestOpenBLASAgrees guards the comparison: both libraries must compute the same product.
func TestOpenBLASAgrees(t *testing.T) {
	for tr := 0; tr < 4; tr++ {
		tc := gemmCase{67, 45, 130, tr&1 != 0, tr&2 != 0, 0.5, 1, 2}
		o := tc.operands(rand.New(rand.NewPCG(uint64(tr), 7)))
		for i := range o.c {
			if math.IsNaN(float64(o.c[i])) {
				o.c[i] = 0 // OpenBLAS may touch C's padding lanes arithmetically; keep them finite
			}
		}
		want := append([]float32(nil), o.c...)
		openblas.Sgemm(tc.transA, tc.transB, tc.m, tc.n, tc.k, tc.alpha, o.a, o.lda, o.b, o.ldb, tc.beta, want, o.ldc)
		Sgemm(tc.transA, tc.transB, tc.m, tc.n, tc.k, tc.alpha, o.a, o.lda, o.b, o.ldb, tc.beta, o.c, o.ldc)
		for i := range want {
			if d := math.Abs(float64(want[i] - o.c[i])); d > 1e-4*(1+math.Abs(float64(want[i]))) || math.IsNaN(d) {
				t.Fatalf("%v: C[%d] = %g, OpenBLAS %g", tc, i, o.c[i], want[i])
			}
		}
	}
}

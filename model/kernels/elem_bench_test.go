package kernels

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
)

// BenchmarkExpSum is the softmax exponential over a row of n scores: expf in a scalar loop
// (the code before the vector kernels) against each implementation of expSum. It reports ns
// per element of thread CPU time.
func BenchmarkExpSum(b *testing.B) {
	for _, n := range []int{200, 2048} {
		rng := rand.New(rand.NewPCG(1, uint64(n)))
		src := randSlice(rng, n, 20)
		dst := make([]float32, n)
		b.Run(fmt.Sprintf("n=%d/expf", n), func(b *testing.B) {
			clock := startCPUClock()
			for b.Loop() {
				var sum float32
				for i, x := range src {
					e := expf(x - 1)
					dst[i] = e
					sum += e
				}
				dst[0] = sum
			}
			clock.reportPerElem(b, n)
		})
		for _, k := range availableElemKernels() {
			b.Run(fmt.Sprintf("n=%d/%s", n, k.name), func(b *testing.B) {
				clock := startCPUClock()
				for b.Loop() {
					k.expSum(dst, src, 1)
				}
				clock.reportPerElem(b, n)
			})
		}
	}
}

// BenchmarkSwiGLU is the SwiGLU forward and backward over one row of the default config's
// hidden width, per implementation, in ns per element of thread CPU time.
func BenchmarkSwiGLU(b *testing.B) {
	const n = 1024
	rng := rand.New(rand.NewPCG(2, 2))
	g, u, dy := randSlice(rng, n, 4), randSlice(rng, n, 1), randSlice(rng, n, 1)
	out, dg, du := make([]float32, n), make([]float32, n), make([]float32, n)
	for _, k := range availableElemKernels() {
		b.Run("fwd/"+k.name, func(b *testing.B) {
			clock := startCPUClock()
			for b.Loop() {
				k.swigluFwd(out, g, u)
			}
			clock.reportPerElem(b, n)
		})
		b.Run("bwd/"+k.name, func(b *testing.B) {
			clock := startCPUClock()
			for b.Loop() {
				k.swigluBwd(dg, du, dy, g, u)
			}
			clock.reportPerElem(b, n)
		})
	}
}

// reportPerElem adds ns per element of the benchmark thread's CPU time for n elements per op.
func (c cpuClock) reportPerElem(b *testing.B, n int) {
	end := threadCPUSeconds()
	runtime.UnlockOSThread()
	if c.start > 0 && end > c.start {
		b.ReportMetric((end-c.start)*1e9/float64(b.N)/float64(n), "cpu-ns/elem")
	}
}

package kernels

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
)

// benchShape is one product of the built-in model's training step (tokens per step M, Dim 256,
// Hidden 768, vocab 1024) or a square reference size.
type benchShape struct {
	name           string
	transA, transB bool
	m, n, k        int
}

func modelShapes() []benchShape {
	var shapes []benchShape
	for _, tokens := range []int{2048, 4096} {
		// Forward C = X·Wᵀ for each weight (out×in); backward dX = dY·W and dW += dYᵀ·X.
		for _, w := range [][2]int{{256, 256}, {768, 256}, {256, 768}, {1024, 256}} {
			out, in := w[0], w[1]
			shapes = append(shapes,
				benchShape{fmt.Sprintf("NT_%dx%dx%d", tokens, out, in), false, true, tokens, out, in},
				benchShape{fmt.Sprintf("NN_%dx%dx%d", tokens, in, out), false, false, tokens, in, out},
				benchShape{fmt.Sprintf("TN_%dx%dx%d", out, in, tokens), true, false, out, in, tokens},
			)
		}
	}
	for _, s := range []int{128, 512, 1024} {
		shapes = append(shapes, benchShape{fmt.Sprintf("NN_%dx%dx%d", s, s, s), false, false, s, s, s})
	}
	return shapes
}

func (s benchShape) operands() (a, b, c []float32, lda, ldb int) {
	rng := rand.New(rand.NewPCG(1, 2))
	a = make([]float32, s.m*s.k)
	b = make([]float32, s.k*s.n)
	c = make([]float32, s.m*s.n)
	for i := range a {
		a[i] = float32(rng.NormFloat64())
	}
	for i := range b {
		b[i] = float32(rng.NormFloat64())
	}
	lda, ldb = s.k, s.n
	if s.transA {
		lda = s.m
	}
	if s.transB {
		ldb = s.k
	}
	return a, b, c, lda, ldb
}

func reportGflops(b *testing.B, s benchShape) {
	b.ReportMetric(2*float64(s.m)*float64(s.n)*float64(s.k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}

// cpuClock measures one locked OS thread's CPU time across a single-threaded benchmark loop.
type cpuClock struct{ start float64 }

func startCPUClock() cpuClock {
	runtime.LockOSThread()
	return cpuClock{threadCPUSeconds()}
}

// report adds GFLOP/s per CPU-second of the benchmark thread (omitted where unavailable).
func (c cpuClock) report(b *testing.B, flopPerOp float64) {
	end := threadCPUSeconds()
	runtime.UnlockOSThread()
	if c.start > 0 && end > c.start {
		b.ReportMetric(flopPerOp*float64(b.N)/(end-c.start)/1e9, "GFLOP/cpu-s")
	}
}

// BenchmarkSgemm measures Sgemm as callers get it (best kernel, all cores) at every shape.
func BenchmarkSgemm(b *testing.B) {
	for _, s := range modelShapes() {
		b.Run(s.name, func(b *testing.B) {
			a, bm, c, lda, ldb := s.operands()
			b.ResetTimer()
			for range b.N {
				Sgemm(s.transA, s.transB, s.m, s.n, s.k, 1, a, lda, bm, ldb, 0, c, s.n)
			}
			reportGflops(b, s)
		})
	}
}

// BenchmarkSgemmPaths measures every microkernel this CPU runs, on one core and on all, at
// the M=2048 model shapes and 512³.
func BenchmarkSgemmPaths(b *testing.B) {
	for _, s := range modelShapes() {
		if s.m != 2048 && s.k != 2048 && s.m != 512 {
			continue
		}
		for _, kern := range availableKernels() {
			for _, w := range []int{1, 0} {
				b.Run(fmt.Sprintf("%s/%s/threads=%d", s.name, kern.name, w), func(b *testing.B) {
					prevK, prevW := kernelOverride, workerOverride
					kernelOverride, workerOverride = kern, w
					defer func() { kernelOverride, workerOverride = prevK, prevW }()
					a, bm, c, lda, ldb := s.operands()
					b.ResetTimer()
					clock := startCPUClock()
					for range b.N {
						Sgemm(s.transA, s.transB, s.m, s.n, s.k, 1, a, lda, bm, ldb, 0, c, s.n)
					}
					if w == 1 {
						clock.report(b, 2*float64(s.m)*float64(s.n)*float64(s.k))
					} else {
						runtime.UnlockOSThread()
					}
					reportGflops(b, s)
				})
			}
		}
	}
}

// BenchmarkSgemmRef measures the reference loops for scale.
func BenchmarkSgemmRef(b *testing.B) {
	s := benchShape{"NT_512x512x512", false, true, 512, 512, 512}
	a, bm, c, lda, ldb := s.operands()
	b.ResetTimer()
	clock := startCPUClock()
	for range b.N {
		sgemmRef(s.transA, s.transB, s.m, s.n, s.k, 1, a, lda, bm, ldb, 0, c, s.n)
	}
	clock.report(b, 2*float64(s.m)*float64(s.n)*float64(s.k))
	reportGflops(b, s)
}

// BenchmarkSgemmMicroKernel measures each microkernel alone on L1-resident packed strips
// (kc = 256): the ceiling the blocked driver can approach.
func BenchmarkSgemmMicroKernel(b *testing.B) {
	for _, kern := range availableKernels() {
		b.Run(kern.name, func(b *testing.B) {
			const kc = 256
			ap := make([]float32, kern.mr*kc)
			bp := make([]float32, kern.nr*kc)
			c := make([]float32, kern.mr*kern.nr)
			clock := startCPUClock()
			for range b.N {
				kern.fn(kc, ap, bp, c, kern.nr, 1, 0)
			}
			clock.report(b, 2*float64(kern.mr*kern.nr*kc))
			b.ReportMetric(2*float64(kern.mr*kern.nr*kc)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}

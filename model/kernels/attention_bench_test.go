package kernels

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
)

// benchSpans are the sequence lengths of benchTrainBatch-like rows: each row of T tokens filled
// with sequences of 32 to T tokens (the last one cut to fit).
func benchSpans(rows, T int) []int {
	rng := rand.New(rand.NewPCG(1, 1))
	var spans []int
	for r := 0; r < rows; r++ {
		for col := 0; col < T; {
			l := min(T-col, 32+rng.IntN(T-31))
			spans = append(spans, l)
			col += l
		}
	}
	return spans
}

// BenchmarkAttentionTrain is one layer's training attention, forward and backward, over the
// spans of an 8×256 packed batch, one thread: heads/kvHeads = 2, head dims 16 and 32.
func BenchmarkAttentionTrain(b *testing.B) {
	spans := benchSpans(8, 256)
	for _, hd := range []int{16, 32} {
		const kvHeads, nRep = 4, 2
		heads := kvHeads * nRep
		Q := (heads + 2*kvHeads) * hd
		C := heads * hd
		n := 0
		for _, l := range spans {
			n += l
		}
		rng := rand.New(rand.NewPCG(2, 2))
		qkv := randSlice(rng, n*Q, 1)
		dqkv := make([]float32, n*Q)
		out := make([]float32, n*C)
		dout := randSlice(rng, n*C, 1)
		lse := make([]float32, n*heads)
		scratch := make([]float32, 2*AttentionScratch(256, 0, hd))
		flops := 0.0
		for _, l := range spans {
			flops += float64(heads) * float64(l) * float64(l+1) / 2 * float64(hd) * 2 * 7
		}
		for _, path := range []string{"sgemm", "fused"} {
			b.Run(fmt.Sprintf("hd=%d/%s", hd, path), func(b *testing.B) {
				fusedOff = path == "sgemm"
				defer func() { fusedOff = false }()
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				t0 := threadCPUSeconds()
				for b.Loop() {
					i0 := 0
					for _, l := range spans {
						for g := 0; g < kvHeads; g++ {
							AttentionForward(out[i0*C+g*nRep*hd:], C, lse[i0*heads+g*nRep:], heads, scratch,
								qkv[i0*Q+g*nRep*hd:], Q, qkv[i0*Q+heads*hd+g*hd:], qkv[i0*Q+(heads+kvHeads)*hd+g*hd:], Q, l, 0, nRep, hd)
						}
						i0 += l
					}
					i0 = 0
					for _, l := range spans {
						for g := 0; g < kvHeads; g++ {
							AttentionBackward(dqkv[i0*Q+g*nRep*hd:], dqkv[i0*Q+heads*hd+g*hd:], dqkv[i0*Q+(heads+kvHeads)*hd+g*hd:], scratch,
								dout[i0*C+g*nRep*hd:], C, out[i0*C+g*nRep*hd:], lse[i0*heads+g*nRep:], heads,
								qkv[i0*Q+g*nRep*hd:], Q, qkv[i0*Q+heads*hd+g*hd:], qkv[i0*Q+(heads+kvHeads)*hd+g*hd:], Q, l, 0, nRep, hd)
						}
						i0 += l
					}
				}
				cpu := threadCPUSeconds() - t0
				b.ReportMetric(flops*float64(b.N)/cpu/1e9, "GFLOP/cpu-s")
				b.ReportMetric(cpu/float64(b.N)*1e3, "cpu-ms/op")
			})
		}
	}
}

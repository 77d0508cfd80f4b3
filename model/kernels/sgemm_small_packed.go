package kernels

import "fmt"

// PackedWeights is a copy of a weight matrix W (n×k, applied as x·Wᵀ) laid out for decoding:
// cut into panels of width columns of Wᵀ (rows of W), each stored k×width, so that the NN
// small-m kernels read one contiguous stream per panel, the way the blocked kernels read a
// strip that Sgemm packed. Decoding applies every weight matrix to a handful of rows per call;
// packing once per weight load instead of once per call (the blocked path) or transposing in
// registers on every call (the NT small-m path) leaves the weights' memory traffic as the cost
// of a batch-1 step and the FMAs as the cost of a larger batch.
//
// The copy is a snapshot: after W changes, Pack it again.
type PackedWeights struct {
	n, k  int
	width int          // panel width: the NN kernel's, 4 for the Go kernel
	kern  *microKernel // the microkernel whose arithmetic SgemmPacked reproduces
	data  []float32    // panel s at data[s*k*width:], row p of it at +p*width; zero-padded
}

// Pack copies w (n×k, row-major) into p, reusing p's storage when it is large enough.
func (p *PackedWeights) Pack(w []float32, n, k int) {
	checkMatrix("B", n, k, w, k)
	kern := activeKernel()
	width := 4
	if nn := smallNNFor(kern); nn != nil {
		width = nn.width
	}
	panels := (n + width - 1) / width
	p.n, p.k, p.width, p.kern = n, k, width, kern
	p.data = grow32(p.data, panels*k*width)
	if k == 0 {
		return
	}
	for s := range panels {
		j := s * width
		transposeStrip(p.data[s*k*width:(s+1)*k*width], w[j*k:], k, k, min(width, n-j), width)
	}
}

// Dims returns n and k of the packed matrix.
func (p *PackedWeights) Dims() (n, k int) { return p.n, p.k }

// SgemmPacked computes C = alpha*A·Wᵀ + beta*C for the m×k matrix A and the packed n×k weight
// W. It is bit for bit Sgemm(false, true, m, n, k, alpha, a, lda, W, k, beta, c, ldc) for every
// m, with the microkernel that was active when W was packed: every element gets the blocked
// path's k slices, FMA chains and store (TestSgemmPackedBitwise).
func SgemmPacked(m int, alpha float32, a []float32, lda int, w *PackedWeights, beta float32, c []float32, ldc int) {
	n, k := w.n, w.k
	if w.kern == nil {
		panic("kernels.SgemmPacked: weights not packed")
	}
	if m < 0 {
		panic(fmt.Sprintf("kernels.SgemmPacked: negative m=%d", m))
	}
	checkMatrix("A", m, k, a, lda)
	checkMatrix("C", m, n, c, ldc)
	if m == 0 || n == 0 {
		return
	}
	if k == 0 || alpha == 0 {
		scaleC(m, n, beta, c, ldc)
		return
	}
	kern, width := w.kern, w.width
	kc := sliceDepth(k, kern.kc)
	nn := smallNNFor(kern)
	panels := (n + width - 1) / width
	nw := maxWorkers()
	if float64(m)*float64(n)*float64(k) < packedParallelMin {
		nw = 1
	}
	parts := min(nw, panels)
	fanOut(parts, func(part int) {
		var edge []float32
		for s := part * panels / parts; s < (part+1)*panels/parts; s++ {
			j := s * width
			panel := w.data[s*k*width : (s+1)*k*width]
			cols := min(width, n-j)
			switch {
			case nn == nil:
				smallGoNN(0, cols, m, k, kc, alpha, a, lda, panel, width, beta, c[j:], ldc)
			case cols == width:
				smallNNPanel(nn, m, k, kc, alpha, a, lda, panel, width, beta, c[j:], ldc, packedPrefetch)
			default:
				// The last panel is zero-padded; its columns of C go through scratch.
				buf := getBuf(m * width)
				edge = *buf
				copyTile(edge, width, c[j:], ldc, m, cols)
				smallNNPanel(nn, m, k, kc, alpha, a, lda, panel, width, beta, edge, width, packedPrefetch)
				copyTile(c[j:], ldc, edge, width, m, cols)
				putBuf(buf)
			}
		}
	})
}

// packedPrefetch turns on smallNNPanel's prefetch of the next slice for packed weights; only
// BenchmarkSgemmPackedStream turns it off, to measure what it gives.
var packedPrefetch = true

// packedParallelMin is the multiply-adds (m·n·k) from which SgemmPacked splits its panels
// between goroutines: Sgemm's threshold. A batch-1 product of the default model (at most 2048×256)
// stays on one core: it only streams its weights, and on two shared Zen 4 cores the fan-out
// measured no faster (BenchmarkSgemmPacked).
const packedParallelMin = parallelMinFlops / 2

func grow32(s []float32, n int) []float32 {
	if cap(s) < n {
		return make([]float32, n)
	}
	return s[:n]
}

package kernels

// SgemmSplitK is Sgemm(transA, transB, …) bit for bit, for beta 0 or 1, with the product's k
// slices instead of its tiles shared out among the goroutines: for products whose C is small
// and whose k is deep, such as a thin model's weight gradients dW = dYᵀ·X (C a few hundred by a
// few dozen, k the batch's thousands of rows). Sgemm splits such a C into one panel a goroutine,
// and each panel packs the whole of the other operand, read from memory; here each goroutine
// packs only its slices of both, multiplies them into a partial C of its own, and the partials
// are then added into C slice by slice, in order, row chunks in parallel. That trades the
// packing the panels repeat for the partials' traffic, so it goes to Sgemm where the partials
// (written and read again) are more floats than the copies of the shared operand the other
// panels pack: on the 2-vCPU Xeon a dimension-64 model's down and output projections' dW took
// 25% and 16% less time this way, gate/up's (384×64) and the LM head's (512×64) more.
//
// The bits are Sgemm's because Sgemm sums each element slice by slice too: a slice's FMA chain
// from zero, then C = alpha·acc + beta·C, with beta 1 after the first slice. The first slice
// goes straight into C as there; every later one is stored alone (alpha·acc, rounded as Sgemm
// rounds it before adding C) and added to C in slice order, the same one rounding of
// C + alpha·acc. Other betas, products of one slice, products below the parallel threshold,
// one goroutine and small m (Sgemm's small-m path) go to Sgemm too.
func SgemmSplitK(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	checkSgemm(transA, transB, m, n, k, a, lda, b, ldb, c, ldc)
	kern := activeKernel()
	nw := maxWorkers()
	if m == 0 || n == 0 || k == 0 || alpha == 0 || (beta != 0 && beta != 1) || nw <= 1 || useSmall(m) ||
		2*float64(m)*float64(n)*float64(k) < parallelMinFlops || k <= kern.kc {
		Sgemm(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
		return
	}
	if kern.narrow != nil && n <= kern.narrow.nr {
		kern = kern.narrow // as Sgemm chooses
	}
	kc := sliceDepth(k, kern.kc)
	slices := (k + kc - 1) / kc
	shared := n // gemmPanels' panels are rows of C, each packing all of op(B)
	if (m+kern.mr-1)/kern.mr < (n+kern.nr-1)/kern.nr {
		shared = m
	}
	if 2*(slices-1)*m*n >= (nw-1)*k*shared {
		Sgemm(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
		return
	}
	buf := getBuf((slices - 1) * m * n)
	defer putBuf(buf)
	part := *buf
	chunks := min(4*nw, m)
	Phases(nw, []int{slices, chunks}, func(_, phase, p int) {
		if phase == 0 {
			pc := p * kc
			// Column pc of op(A) and row pc of op(B): a row of a stored k×m A, a column of a
			// stored n×k B.
			ap, bp := a[pc:], b[pc:]
			if transA {
				ap = a[pc*lda:]
			}
			if !transB {
				bp = b[pc*ldb:]
			}
			// One slice: sliceDepth(kb, kern.kc) is kb itself.
			if p == 0 {
				gemm(kern, 1, transA, transB, m, n, min(kc, k), alpha, ap, lda, bp, ldb, beta, c, ldc)
				return
			}
			gemm(kern, 1, transA, transB, m, n, min(kc, k-pc), alpha, ap, lda, bp, ldb, 0, part[(p-1)*m*n:p*m*n], n)
			return
		}
		for s := range slices - 1 {
			ps := part[s*m*n : (s+1)*m*n]
			for i := m * p / chunks; i < m*(p+1)/chunks; i++ {
				crow, prow := c[i*ldc:i*ldc+n], ps[i*n:i*n+n]
				for j, v := range prow {
					crow[j] += v
				}
			}
		}
	})
}

// Package kernels holds the hot numeric loops of the built-in model: matrix multiplication,
// attention, norms, softmax and the optimizer step. It is the only package tuned for speed;
// every kernel has a pure-Go reference that the tests compare against.
package kernels

// Sgemm computes C = alpha*op(A)*op(B) + beta*C for row-major matrices, where op(X) is X or its
// transpose. op(A) is m×k, op(B) is k×n, C is m×n; lda, ldb, ldc are row strides. Shape
// mismatches are programming errors and panic.
//
// beta == 0 overwrites C without reading it (NaN in C does not survive); alpha == 0 or k == 0
// only scales C by beta. Large products run on a blocked SIMD path (AVX-512 or AVX2+FMA on
// amd64, chosen at start-up from the CPU's features) split across GOMAXPROCS goroutines; the
// result does not depend on the number of goroutines (bitwise). Products with at most smallMaxM
// rows (decoding) take a small-m path that reads B in place; it computes every
// element with exactly the blocked path's operations, so a row of C is bitwise the same
// whatever m is and whichever rows share the call. The fast paths sum in a
// different order than sgemmRef, so results agree with it to rounding, and a zero in A times an
// Inf or NaN in B yields NaN there (IEEE) where the reference skips the zero.
func Sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	checkSgemm(transA, transB, m, n, k, a, lda, b, ldb, c, ldc)
	if emptyProduct(m, n, k, alpha, beta, c, ldc) {
		return
	}
	kern := activeKernel()
	if useSmall(m) {
		gemmSmall(kern, maxWorkers(), transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
		return
	}
	if kern.narrow != nil && n <= kern.narrow.nr {
		// e.g. attention's P·V, dQ, dK and dV with 16-dimension heads: AVX-512's 12×32 tile
		// would spend half its FMAs on padding, AVX2's 6×16 none, with the same bits.
		kern = kern.narrow
	}
	gemm(kern, maxWorkers(), transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// sgemmRef is the plain reference implementation.
func sgemmRef(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	if n == 0 {
		return // C may be an empty slice; there is nothing to write
	}
	for i := 0; i < m; i++ {
		crow := c[i*ldc : i*ldc+n]
		if beta == 0 {
			clear(crow)
		} else if beta != 1 {
			for j := range crow {
				crow[j] *= beta
			}
		}
		for p := 0; p < k; p++ {
			var av float32
			if transA {
				av = a[p*lda+i]
			} else {
				av = a[i*lda+p]
			}
			av *= alpha
			if av == 0 {
				continue
			}
			if transB {
				for j := 0; j < n; j++ {
					crow[j] += av * b[j*ldb+p]
				}
			} else {
				brow := b[p*ldb : p*ldb+n]
				for j, bv := range brow {
					crow[j] += av * bv
				}
			}
		}
	}
}

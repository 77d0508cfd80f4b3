// Package kernels holds the hot numeric loops of the built-in model: matrix multiplication,
// attention, norms, softmax and the optimizer step. It is the only package tuned for speed;
// every kernel has a pure-Go reference that the tests compare against.
package kernels

// Sgemm computes C = alpha*op(A)*op(B) + beta*C for row-major matrices, where op(X) is X or its
// transpose. op(A) is m×k, op(B) is k×n, C is m×n; lda, ldb, ldc are row strides. Shape
// mismatches are programming errors and panic.
func Sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	sgemmRef(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// sgemmRef is the plain reference implementation.
func sgemmRef(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
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

package kernels

import "fmt"

// checkSgemm panics with a message naming the offending argument when the dimensions, strides
// or slice lengths cannot describe the requested product. Like gonum, a shape mismatch is a
// programming error, not a property of the data, so it is not returned as an error.
func checkSgemm(transA, transB bool, m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
	if m < 0 || n < 0 || k < 0 {
		panic(fmt.Sprintf("kernels.Sgemm: negative dimension m=%d n=%d k=%d", m, n, k))
	}
	// Stored shapes: op(A) is m×k, so A is stored m×k, or k×m when transposed; likewise B.
	ar, ac := m, k
	if transA {
		ar, ac = k, m
	}
	br, bc := k, n
	if transB {
		br, bc = n, k
	}
	checkMatrix("A", ar, ac, a, lda)
	checkMatrix("B", br, bc, b, ldb)
	checkMatrix("C", m, n, c, ldc)
}

func checkMatrix(name string, rows, cols int, x []float32, ld int) {
	if ld < cols {
		panic(fmt.Sprintf("kernels.Sgemm: ld%s=%d is less than its %d columns", lowerName(name), ld, cols))
	}
	if rows == 0 || cols == 0 {
		return
	}
	if need := (rows-1)*ld + cols; len(x) < need {
		panic(fmt.Sprintf("kernels.Sgemm: %s has %d elements, a %d×%d matrix with stride %d needs %d",
			name, len(x), rows, cols, ld, need))
	}
}

func lowerName(name string) string {
	switch name {
	case "A":
		return "a"
	case "B":
		return "b"
	}
	return "c"
}

// emptyProduct computes a product that needs no kernel and reports whether it was one: nothing
// when m or n is zero, C = beta*C when k or alpha is.
func emptyProduct(m, n, k int, alpha, beta float32, c []float32, ldc int) bool {
	if m == 0 || n == 0 {
		return true
	}
	if k == 0 || alpha == 0 {
		scaleC(m, n, beta, c, ldc)
		return true
	}
	return false
}

// scaleC sets C = beta*C; beta == 0 clears C so that NaN or Inf already there do not survive.
func scaleC(m, n int, beta float32, c []float32, ldc int) {
	if beta == 1 {
		return
	}
	for i := 0; i < m; i++ {
		row := c[i*ldc : i*ldc+n]
		if beta == 0 {
			clear(row)
			continue
		}
		for j := range row {
			row[j] *= beta
		}
	}
}

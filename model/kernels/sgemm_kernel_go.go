package kernels

// goKernel is the portable microkernel: a 4×4 register tile (16 accumulators, about what Go's
// register allocator keeps out of memory on amd64 and arm64). It serves machines without the
// assembly kernels and the purego build tag.
var goKernel = microKernel{
	name: "go4x4",
	mr:   4, nr: 4,
	kc: 256,
	fn: microGo4x4,
}

func microGo4x4(kc int, a, b, c []float32, ldc int, alpha, beta float32) {
	a, b = a[:4*kc], b[:4*kc]
	var c00, c01, c02, c03, c10, c11, c12, c13 float32
	var c20, c21, c22, c23, c30, c31, c32, c33 float32
	// Reslicing by four each step lets the compiler drop the bounds checks in the loop body.
	for len(a) >= 4 && len(b) >= 4 {
		a0, a1, a2, a3 := a[0], a[1], a[2], a[3]
		b0, b1, b2, b3 := b[0], b[1], b[2], b[3]
		c00 += a0 * b0
		c01 += a0 * b1
		c02 += a0 * b2
		c03 += a0 * b3
		c10 += a1 * b0
		c11 += a1 * b1
		c12 += a1 * b2
		c13 += a1 * b3
		c20 += a2 * b0
		c21 += a2 * b1
		c22 += a2 * b2
		c23 += a2 * b3
		c30 += a3 * b0
		c31 += a3 * b1
		c32 += a3 * b2
		c33 += a3 * b3
		a, b = a[4:], b[4:]
	}
	storeRow4(c[0:4], c00, c01, c02, c03, alpha, beta)
	storeRow4(c[ldc:ldc+4], c10, c11, c12, c13, alpha, beta)
	storeRow4(c[2*ldc:2*ldc+4], c20, c21, c22, c23, alpha, beta)
	storeRow4(c[3*ldc:3*ldc+4], c30, c31, c32, c33, alpha, beta)
}

func storeRow4(c []float32, v0, v1, v2, v3, alpha, beta float32) {
	c = c[:4]
	c[0] = storeGo(v0, alpha, beta, c[0])
	c[1] = storeGo(v1, alpha, beta, c[1])
	c[2] = storeGo(v2, alpha, beta, c[2])
	c[3] = storeGo(v3, alpha, beta, c[3])
}

// storeGo is the new value of one element of C from its accumulated sum v. The conversions
// forbid fusing either product into the sum, so the result is the same on every architecture
// and in every caller (the Go microkernel and the Go small-m path must agree bit for bit).
func storeGo(v, alpha, beta, c float32) float32 {
	if beta == 0 {
		return float32(alpha * v)
	}
	return float32(alpha*v) + float32(beta*c)
}

package kernels

// ThinPanels is the widest product, in panels of the small-m NN kernels' width, that
// SgemmNN and SgemmPacked compute faster than Sgemm when the rows are many: those read A in
// place once for each panel of C, where Sgemm packs A once (and B on every call). For a model
// of dimension 64 (the built-in tasks' model) the backward's dX = dY·W and the forward's
// products of up to 128 output columns took 13–27% less CPU time on the 2-vCPU Xeon this way;
// at dimension 256 every product of the step took 5–18% more.
const ThinPanels = 4

// Thin reports whether a product of many rows with n columns of output is at most ThinPanels
// panels wide on this machine's kernels (false where there are no assembly kernels).
func Thin(n int) bool {
	nn := smallNNFor(activeKernel())
	return nn != nil && n <= ThinPanels*nn.width
}

// SgemmNN computes C = alpha·A·B + beta·C for row-major A (m×k), B (k×n) and C (m×n), neither
// transposed: bit for bit Sgemm(false, false, m, n, k, …), computed whatever m is on the small-m
// path, whose NN kernels read A and B where they lie and pack nothing. Thin(n) says where that is
// faster than Sgemm. Shape mismatches panic.
func SgemmNN(m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	checkSgemm(false, false, m, n, k, a, lda, b, ldb, c, ldc)
	if emptyProduct(m, n, k, alpha, beta, c, ldc) {
		return
	}
	gemmSmallNN(activeKernel(), maxWorkers(), m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

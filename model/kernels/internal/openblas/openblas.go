//go:build openblas && cgo

// Package openblas binds cblas_sgemm from Debian's libopenblas (apt-get install
// libopenblas-dev) so the kernels benchmarks can compare Sgemm with it in one run. It builds
// only under the openblas tag; default builds never link it. It lives apart from package
// kernels because a cgo package cannot also hold Go assembly.
package openblas

// #cgo LDFLAGS: -lopenblas
// #include <cblas.h>
import "C"

import "unsafe"

// Sgemm calls cblas_sgemm with kernels.Sgemm's row-major argument convention; the caller has
// already checked the shapes.
func Sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	ta, tb := uint32(C.CblasNoTrans), uint32(C.CblasNoTrans)
	if transA {
		ta = C.CblasTrans
	}
	if transB {
		tb = C.CblasTrans
	}
	C.cblas_sgemm(C.CblasRowMajor, C.enum_CBLAS_TRANSPOSE(ta), C.enum_CBLAS_TRANSPOSE(tb),
		C.blasint(m), C.blasint(n), C.blasint(k), C.float(alpha),
		(*C.float)(unsafe.Pointer(&a[0])), C.blasint(lda),
		(*C.float)(unsafe.Pointer(&b[0])), C.blasint(ldb), C.float(beta),
		(*C.float)(unsafe.Pointer(&c[0])), C.blasint(ldc))
}

// SetThreads sets OpenBLAS's thread count (0 restores one per core).
func SetThreads(n int) {
	if n <= 0 {
		n = int(C.openblas_get_num_procs())
	}
	C.openblas_set_num_threads(C.int(n))
}

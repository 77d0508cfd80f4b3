//go:build amd64 && !purego

package kernels

import "golang.org/x/sys/cpu"

//go:generate go run ./internal/gemmgen -out sgemm_amd64.s -stubs sgemm_stubs_amd64.go -pkg kernels

// The assembly kernels. kc 384 was measured on Zen 4 (32 KiB L1d, 1 MiB L2 per core) over kc
// 192–512 at the model's shapes, best or within noise of it; it is fixed because it fixes the
// bits (microKernel). The other blocks are derived from the CPU's caches (blocks.go).
var (
	avx512Kernel = microKernel{
		name: "avx512_12x32",
		mr:   12, nr: 32,
		kc:    384,
		fn:    asmKernel(sgemmKernelavx512_12x32, 12, 32),
		small: &smallAVX512,
	}
	avx2Kernel = microKernel{
		name: "avx2_6x16",
		mr:   6, nr: 16,
		kc:    384,
		fn:    asmKernel(sgemmKernelavx2_6x16, 6, 16),
		small: &smallAVX2,
	}
)

// The small-m kernels, indexed by row count less one (up to 12 rows in the 32 zmm registers,
// 6 in the 16 ymm registers, beside the eight of the in-register transpose).
var (
	smallAVX512 = smallKernel{width: 16, fns: []func(int, *float32, int, *float32, int, *float32, int, *float32, int, float32, float32){
		sgemmSmallNTavx512_1, sgemmSmallNTavx512_2, sgemmSmallNTavx512_3, sgemmSmallNTavx512_4,
		sgemmSmallNTavx512_5, sgemmSmallNTavx512_6, sgemmSmallNTavx512_7, sgemmSmallNTavx512_8,
		sgemmSmallNTavx512_9, sgemmSmallNTavx512_10, sgemmSmallNTavx512_11, sgemmSmallNTavx512_12,
	}}
	smallAVX2 = smallKernel{width: 8, fns: []func(int, *float32, int, *float32, int, *float32, int, *float32, int, float32, float32){
		sgemmSmallNTavx2_1, sgemmSmallNTavx2_2, sgemmSmallNTavx2_3,
		sgemmSmallNTavx2_4, sgemmSmallNTavx2_5, sgemmSmallNTavx2_6,
	}}
)

// availableKernels lists the microkernels this CPU runs, fastest first.
func availableKernels() []*microKernel {
	return kernelsFor(cpu.X86.HasAVX512F, cpu.X86.HasAVX2 && cpu.X86.HasFMA)
}

func kernelsFor(avx512, avx2 bool) []*microKernel {
	var ks []*microKernel
	if avx512 {
		ks = append(ks, &avx512Kernel)
	}
	if avx2 {
		ks = append(ks, &avx2Kernel)
	}
	return append(ks, &goKernel)
}

// asmKernel adapts an assembly kernel to slices. The bounds checks here are what keep the
// assembly inside its operands: packed strips hold mr*kc and nr*kc floats and C spans mr rows.
func asmKernel(f func(kc int, a, b, c *float32, ldc int, alpha, beta float32), mr, nr int) func(kc int, a, b, c []float32, ldc int, alpha, beta float32) {
	return func(kc int, a, b, c []float32, ldc int, alpha, beta float32) {
		_ = a[mr*kc-1]
		_ = b[nr*kc-1]
		_ = c[(mr-1)*ldc+nr-1]
		f(kc, &a[0], &b[0], &c[0], ldc, alpha, beta)
	}
}

// transposeStrip is transposeStripGo with the bulk (four rows by four k steps at a time) done
// by the SSE transpose4; the Go loop finishes the last k steps and the rows past a multiple
// of four.
func transposeStrip(dst, src []float32, ld, kb, w, width int) {
	blocks := kb / 4
	r := 0
	if blocks > 0 {
		for ; r+4 <= w; r += 4 {
			_ = src[(r+3)*ld+4*blocks-1]
			_ = dst[(4*blocks-1)*width+r+3]
			transpose4(&dst[r], &src[r*ld], ld, width, blocks)
			for p := 4 * blocks; p < kb; p++ {
				dst[p*width+r] = src[r*ld+p]
				dst[p*width+r+1] = src[(r+1)*ld+p]
				dst[p*width+r+2] = src[(r+2)*ld+p]
				dst[p*width+r+3] = src[(r+3)*ld+p]
			}
		}
	}
	transposeStripGo(dst, src, ld, kb, w, width, r)
}

// copyStrip is copyStripGo, with full strips of a width divisible by four (every A strip of
// the 12×32 kernel, every interior B strip) copied by copyStrided.
func copyStrip(dst, src []float32, ld, kb, w, width int) {
	if w != width || width%4 != 0 || kb == 0 {
		copyStripGo(dst, src, ld, kb, w, width)
		return
	}
	_ = src[(kb-1)*ld+w-1]
	_ = dst[kb*width-1]
	copyStrided(&dst[0], &src[0], ld, width, kb)
}

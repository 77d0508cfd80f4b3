package kernels

import (
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"
)

// microKernel is one register-blocked inner kernel together with the cache blocking that suits
// it. fn computes a full mr×nr tile of C from kc steps of packed A (mr values per step) and
// packed B (nr values per step): C = alpha*acc + beta*C, where beta == 0 must not read C.
//
// kc, the depth of the k slices, is a constant of the kernel and not of the CPU: every element
// of C sums its k slices one after another, so kc fixes the order of the additions, and with it
// the bits of every product, on every machine that runs the kernel (a learner and an inference
// server on different CPUs compute the same logprobs). The other blocks change no bit and are
// derived from the caches of the CPU at hand (blocks).
type microKernel struct {
	name   string
	mr, nr int
	kc     int
	fn     func(kc int, a, b, c []float32, ldc int, alpha, beta float32)
	small  *smallKernel // the small-m kernels of the same instruction set; nil: smallGo
	// narrow is a kernel with the same k slicing (kc) and the same operations per element but
	// a tile at most as wide as a narrow C: the blocked path hands it products of n ≤ narrow.nr
	// columns, where this kernel's wider tile would compute zero padding. Nil if none.
	narrow *microKernel

	blockOnce sync.Once
	mc, nc    int // blocks() on this CPU
}

// parallelMinFlops is the work below which goroutine fan-out and the B-packing barrier cost
// more than they save (measured with BenchmarkSgemmSquare at 64–128 on two cores).
const parallelMinFlops = 1 << 21

// workerOverride, when positive, replaces GOMAXPROCS as the goroutine count (tests use it to
// compare serial and parallel results).
var workerOverride int

func maxWorkers() int {
	if workerOverride > 0 {
		return workerOverride
	}
	return runtime.GOMAXPROCS(0)
}

// gemm is the blocked driver (the GotoBLAS loop nest): for each nc-wide column block and
// kc-deep slice of k it packs op(B) once into nr-wide strips shared by all workers, then the
// workers take mc-row blocks of op(A), pack them into mr-tall strips and sweep the tiles.
// Partitions fall on tile boundaries and every element sums over the same kc slices in the
// same order, so the result does not depend on the number of workers.
func gemm(kern *microKernel, nw int, transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	if 2*float64(m)*float64(n)*float64(k) < parallelMinFlops {
		nw = 1
	}
	if nw > 1 && gemmPanels(kern, nw, transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc) {
		return
	}
	mr, nr := kern.mr, kern.nr
	kc := sliceDepth(k, kern.kc)
	maxMC, maxNC := kern.blocks()
	nc := min(maxNC, roundUp(n, nr))
	mBlocks, mc := splitRows(m, maxMC, mr, nw)
	bbuf := getBuf(kc * nc)
	defer putBuf(bbuf)
	bpack := *bbuf
	// Each worker's buffer holds its packed A block and, after it, the scratch edge tile of
	// macroKernel (which on the stack would escape to the heap, through the kernel's function
	// value, on every call).
	abufs := make([]*[]float32, nw)
	for w := range abufs {
		abufs[w] = getBuf(mc*kc + maxTile)
	}
	defer func() {
		for _, buf := range abufs {
			putBuf(buf)
		}
	}()

	for jc := 0; jc < n; jc += nc {
		nb := min(nc, n-jc)
		strips := (nb + nr - 1) / nr
		for pc := 0; pc < k; pc += kc {
			kb := min(kc, k-pc)
			betaEff := beta
			if pc > 0 {
				betaEff = 1
			}
			// Pack op(B)[pc:pc+kb, jc:jc+nb] strip by strip, the strips shared out among workers.
			var next atomic.Int64
			fanOut(min(nw, strips), func(int) {
				for s := int(next.Add(1) - 1); s < strips; s = int(next.Add(1) - 1) {
					j := jc + s*nr
					packB(bpack[s*kb*nr:(s+1)*kb*nr], transB, b, ldb, pc, kb, j, min(nr, n-j), nr)
				}
			})
			// With fewer row blocks than workers, each row block is split by column strips too.
			parts := 1
			if mBlocks < nw {
				parts = min(nw/mBlocks, strips)
			}
			units := mBlocks * parts
			next.Store(0)
			fanOut(min(nw, units), func(w int) {
				apack, edge := (*abufs[w])[:mc*kc], (*abufs[w])[mc*kc:]
				for u := int(next.Add(1) - 1); u < units; u = int(next.Add(1) - 1) {
					ib, part := u/parts, u%parts
					i0 := ib * mc
					mb := min(mc, m-i0)
					packA(apack, transA, a, lda, i0, mb, pc, kb, mr)
					s0, s1 := part*strips/parts, (part+1)*strips/parts
					macroKernel(kern, apack, bpack, edge, i0, mb, jc, s0, s1, n, kb, alpha, betaEff, c, ldc)
				}
			})
		}
	}
}

// gemmPanels splits C along its longer side (counted in tiles) into nw panels on tile
// boundaries and runs the serial driver on each panel in its own goroutine: one fork and join
// per call, where the shared-packing driver below synchronizes twice per k slice. On this
// 2-core VM each join lets the other core idle, and waking it again costs tens of
// microseconds, which for deep products (dW = Xᵀ·dY with k in the thousands: a dozen slices)
// took a third of the time. Each panel packs its own copy of the shared operand. Tiles and k
// slices are those of the whole product, so the result is bitwise the same. It reports false,
// leaving the work to the caller, when C is too small to give every worker a tile.
func gemmPanels(kern *microKernel, nw int, transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) bool {
	mr, nr := kern.mr, kern.nr
	rowTiles, colTiles := (m+mr-1)/mr, (n+nr-1)/nr
	if rowTiles >= colTiles {
		if rowTiles < nw {
			return false
		}
		rows := (rowTiles + nw - 1) / nw * mr
		fanOut((m+rows-1)/rows, func(w int) {
			i0 := w * rows
			var ap []float32
			if transA {
				ap = a[i0:] // column i0 of the stored k×m matrix
			} else {
				ap = a[i0*lda:] // row i0
			}
			gemm(kern, 1, transA, transB, min(rows, m-i0), n, k, alpha, ap, lda, b, ldb, beta, c[i0*ldc:], ldc)
		})
		return true
	}
	if colTiles < nw {
		return false
	}
	cols := (colTiles + nw - 1) / nw * nr
	fanOut((n+cols-1)/cols, func(w int) {
		j0 := w * cols
		var bp []float32
		if transB {
			bp = b[j0*ldb:] // row j0 of the stored n×k matrix
		} else {
			bp = b[j0:] // column j0 of the stored k×n matrix
		}
		gemm(kern, 1, transA, transB, m, min(cols, n-j0), k, alpha, a, lda, bp, ldb, beta, c[j0:], ldc)
	})
	return true
}

// sliceDepth is the depth of the k slices: k cut into ceil(k/maxKC) equal slices (the last one
// shorter by the remainder), since a short last slice would pay C's load and store for little
// work. Every path slices k this way, so each element of C sums the same slices in the same order.
func sliceDepth(k, maxKC int) int {
	slices := (k + maxKC - 1) / maxKC
	return (k + slices - 1) / slices
}

// macroKernel multiplies one packed A block (rows i0..i0+mb) by B strips s0..s1 of the packed
// block starting at column jc. Full tiles go straight to C; edge tiles go through a scratch
// tile so the microkernel never touches memory outside C. The edge tile is loaded with C and
// stored by the microkernel with the caller's alpha and beta, so every element of C gets the
// same store arithmetic whether its tile is full or not, whatever m and n are. edge is the
// scratch tile, maxTile floats.
func macroKernel(kern *microKernel, apack, bpack, edge []float32, i0, mb, jc, s0, s1, n, kb int, alpha, beta float32, c []float32, ldc int) {
	mr, nr := kern.mr, kern.nr
	for s := s0; s < s1; s++ {
		j := jc + s*nr
		nre := min(nr, n-j)
		bp := bpack[s*kb*nr : (s+1)*kb*nr]
		for ir := 0; ir < mb; ir += mr {
			mre := min(mr, mb-ir)
			ap := apack[ir*kb : ir*kb+mr*kb]
			off := (i0+ir)*ldc + j
			if mre == mr && nre == nr {
				kern.fn(kb, ap, bp, c[off:off+(mr-1)*ldc+nr], ldc, alpha, beta)
				continue
			}
			tile := edge[:mr*nr]
			copyTile(tile, nr, c[off:], ldc, mre, nre)
			kern.fn(kb, ap, bp, tile, nr, alpha, beta)
			copyTile(c[off:], ldc, tile, nr, mre, nre)
		}
	}
}

// maxTile bounds mr*nr over all microkernels (the scratch edge tile lives on the stack).
const maxTile = 16 * 32

// copyTile copies a rows×cols block between row-major matrices with strides ldd and lds.
func copyTile(dst []float32, ldd int, src []float32, lds, rows, cols int) {
	for r := 0; r < rows; r++ {
		copy(dst[r*ldd:r*ldd+cols], src[r*lds:r*lds+cols])
	}
}

// splitRows chooses the row-block height: at most maxMC, a multiple of mr, and when several
// workers share the work, a block count that is a multiple of the worker count so that no
// core idles at the end.
func splitRows(m, maxMC, mr, nw int) (blocks, mc int) {
	blocks = (m + maxMC - 1) / maxMC
	if nw > 1 {
		blocks = roundUp(blocks, nw)
	}
	mc = roundUp((m+blocks-1)/blocks, mr)
	blocks = (m + mc - 1) / mc
	return blocks, mc
}

func roundUp(x, to int) int { return (x + to - 1) / to * to }

// bufPool recycles packing buffers between calls; the model calls Sgemm thousands of times per
// step with a handful of sizes.
var bufPool sync.Pool

// getBuf returns a buffer of at least n floats whose first element is 64-byte aligned, so
// packed strips never straddle a cache line more than they must.
func getBuf(n int) *[]float32 {
	if p, ok := bufPool.Get().(*[]float32); ok && cap(*p) >= n {
		*p = (*p)[:n]
		return p
	}
	raw := make([]float32, n+16)
	off := 0
	if rem := uintptr(unsafe.Pointer(&raw[0])) % 64; rem != 0 {
		off = int(64-rem) / 4
	}
	s := raw[off : off+n : off+n]
	return &s
}

func putBuf(p *[]float32) { bufPool.Put(p) }

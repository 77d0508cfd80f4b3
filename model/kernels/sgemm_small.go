package kernels

import "sync"

// The small-m path serves decoding, where op(A) has a few rows (the sequences decoding
// together) and B is used once per call. The blocked path would pack all of B on every call and
// fill a 12-row tile with one or two rows; the small-m path instead reads B in place and
// multiplies every row of A by each block of it:
//
//   - B transposed (a weight matrix stored n×k): a width-row block of B at a time, 4×4 blocks
//     transposed in registers (the sgemmSmallNT kernels);
//   - B not transposed (attention's P·V, or a weight packed once by PackedWeights): B's rows
//     read with their stride exactly as the blocked kernels read a packed strip (sgemmSmallNN).
//
// Each element of C gets exactly the operations of the blocked path with the same microkernel's
// kc: the same k slices (sliceDepth), within a slice one FMA chain from zero over p in
// increasing order (a vector lane per column, as in the packed microkernels), then the same
// alpha/beta store, with beta replaced by 1 after the first slice. A row of C therefore does not
// depend on m, on the path taken, or on which other rows share the call (TestSgemmSmallBitwise).

// smallKernel is a family of small-m kernels for one instruction set: fns[r-1] computes an
// r×width block C = alpha*A·Bᵀ + beta*C for r ≤ len(fns), reading 4*blocks k steps of width rows
// of B in place and then ntail (< 4) steps from tail, a packed strip of width floats per step.
type smallKernel struct {
	width int
	fns   []func(blocks int, a *float32, lda int, b *float32, ldb int, tail *float32, ntail int, c *float32, ldc int, alpha, beta float32)
}

// smallNNKernel is the family of small-m NN kernels for one instruction set: fns[r-1] computes
// an r×width block C = alpha*A·B + beta*C from kb rows of B read ldb floats apart, for
// r ≤ len(fns). width is the blocked kernel's nr and the rows go up to its mr.
type smallNNKernel struct {
	width int
	fns   []func(kb int, a *float32, lda int, b *float32, ldb int, c *float32, ldc int, alpha, beta float32)
	// narrow is a family of half the width with the same arithmetic per element (one FMA chain
	// over each k slice, the same store), for the columns a full panel would leave over: a
	// 16-column B (a head of 16 dimensions in P·V) then runs in place instead of through a
	// zero-padded copy of all of B. Nil if none.
	narrow *smallNNKernel
	// pfns are fns that also prefetch the memory a given distance past every line of B they
	// read (gemmgen's smallNN with prefetch), indexed the same way; nil where there are none.
	pfns []func(kb int, a *float32, lda int, b *float32, ldb int, c *float32, ldc int, alpha, beta float32, pfd int)
	// gemv are the one-row kernels over several panels at once (gemmgen's gemv), widest
	// first; SgemmPacked runs a batch-1 product on them. Empty if none.
	gemv []gemvKernel
}

// gemvKernel computes one row of C over panels consecutive packed panels (ldp floats apart):
// per column smallNN's one-row arithmetic, with panels·(width/lanes) FMA chains in flight.
type gemvKernel struct {
	panels int
	fn     func(kb int, a *float32, b *float32, ldp int, c *float32, alpha, beta float32)
}

// smallMaxM is the largest m the small-m path takes. Measured with BenchmarkSgemmSmall on Zen 4
// (AVX-512): see BENCHMARKS.md, "Small m (decoding)".
const smallMaxM = 16

// smallOverride, when non-zero, replaces smallMaxM; negative disables the small-m path (tests
// and benchmarks force either path with it).
var smallOverride int

// useSmall reports whether Sgemm takes the small-m path for this product.
func useSmall(m int) bool {
	limit := smallMaxM
	if smallOverride != 0 {
		limit = smallOverride
	}
	return m <= limit
}

// gemmSmall computes C = alpha*op(A)*op(B) + beta*C for small m with kern's k slicing, splitting
// the column blocks among up to nw goroutines above parallelMinFlops.
func gemmSmall(kern *microKernel, nw int, transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	if transA {
		// A is stored k×m: copy op(A) to rows, m*k floats, small next to B's n*k.
		buf := getBuf(m * k)
		defer putBuf(buf)
		at := *buf
		for p := 0; p < k; p++ {
			for i, v := range a[p*lda : p*lda+m] {
				at[i*k+p] = v
			}
		}
		a, lda = at, k
	}
	if !transB {
		gemmSmallNN(kern, nw, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
		return
	}
	kc := sliceDepth(k, kern.kc)
	if 2*float64(m)*float64(n)*float64(k) < parallelMinFlops {
		nw = 1
	}
	sk := kern.small
	width := 4
	if sk != nil {
		width = sk.width
	}
	blocks := (n + width - 1) / width
	parts := min(nw, blocks)
	fanOut(parts, func(w int) {
		j0, j1 := w*blocks/parts*width, min(n, (w+1)*blocks/parts*width)
		if sk == nil {
			smallGo(j0, j1, m, k, kc, alpha, a, lda, b, ldb, beta, c, ldc)
			return
		}
		smallAsm(sk, j0, j1, m, k, kc, alpha, a, lda, b, ldb, beta, c, ldc)
	})
}

// smallAsm runs the assembly kernels over columns j0..j1 of C. A last block narrower than the
// kernel goes through scratch copies of its rows of B (zero-padded) and of its columns of C,
// so the kernel never touches memory outside the operands.
func smallAsm(sk *smallKernel, j0, j1, m, k, kc int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	width := sk.width
	tail := tailPool.Get().(*[3 * 16]float32)
	defer tailPool.Put(tail)
	j := j0
	for ; j+width <= j1; j += width {
		smallBlock(sk, tail, m, k, kc, alpha, a, lda, b[j*ldb:], ldb, beta, c[j:], ldc)
	}
	if w := j1 - j; w > 0 {
		bbuf, cbuf := getBuf(width*k), getBuf(m*width)
		defer putBuf(bbuf)
		defer putBuf(cbuf)
		bj, cj := *bbuf, *cbuf
		copyTile(bj, k, b[j*ldb:], ldb, w, k)
		clear(bj[w*k:])
		copyTile(cj, width, c[j:], ldc, m, w)
		smallBlock(sk, tail, m, k, kc, alpha, a, lda, bj, k, beta, cj, width)
		copyTile(c[j:], ldc, cj, width, m, w)
	}
}

// tailPool holds smallBlock's scratch for the last k%4 columns of a slice. The kernels are called
// through function values, so a local array would escape to the heap on every block.
var tailPool = sync.Pool{New: func() any { return new([3 * 16]float32) }}

// smallBlock computes the m×width block of C whose columns are the first width rows of b, slice
// by slice along k, the rows of A taken len(sk.fns) at a time; tail is scratch.
func smallBlock(sk *smallKernel, tail *[3 * 16]float32, m, k, kc int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	width, maxRows := sk.width, len(sk.fns)
	for pc := 0; pc < k; pc += kc {
		kb := min(kc, k-pc)
		betaEff := beta
		if pc > 0 {
			betaEff = 1
		}
		blocks, ntail := kb/4, kb%4
		for t := 0; t < ntail; t++ {
			for l := 0; l < width; l++ {
				tail[t*width+l] = b[l*ldb+pc+4*blocks+t]
			}
		}
		// The kernels read width rows of B and rows×width of C: check the far corners.
		_ = b[(width-1)*ldb+pc+kb-1]
		for i0 := 0; i0 < m; i0 += maxRows {
			rows := min(maxRows, m-i0)
			_ = a[(i0+rows-1)*lda+pc+kb-1]
			_ = c[(i0+rows-1)*ldc+width-1]
			sk.fns[rows-1](blocks, &a[i0*lda+pc], lda, &b[pc], ldb, &tail[0], ntail, &c[i0*ldc], ldc, alpha, betaEff)
		}
	}
}

// smallGo is the small-m path for the Go microkernel: the same sums (acc += a*b from zero per
// slice) and the same store (storeGo), four columns at a time for four independent chains.
func smallGo(j0, j1, m, k, kc int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	for pc := 0; pc < k; pc += kc {
		kb := min(kc, k-pc)
		betaEff := beta
		if pc > 0 {
			betaEff = 1
		}
		for i := 0; i < m; i++ {
			ar := a[i*lda+pc : i*lda+pc+kb]
			crow := c[i*ldc : i*ldc+j1]
			j := j0
			for ; j+4 <= j1; j += 4 {
				b0 := b[j*ldb+pc : j*ldb+pc+kb]
				b1 := b[(j+1)*ldb+pc : (j+1)*ldb+pc+kb]
				b2 := b[(j+2)*ldb+pc : (j+2)*ldb+pc+kb]
				b3 := b[(j+3)*ldb+pc : (j+3)*ldb+pc+kb]
				var s0, s1, s2, s3 float32
				for p, av := range ar {
					s0 += av * b0[p]
					s1 += av * b1[p]
					s2 += av * b2[p]
					s3 += av * b3[p]
				}
				storeRow4(crow[j:j+4], s0, s1, s2, s3, alpha, betaEff)
			}
			for ; j < j1; j++ {
				bj := b[j*ldb+pc : j*ldb+pc+kb]
				var s float32
				for p, av := range ar {
					s += av * bj[p]
				}
				crow[j] = storeGo(s, alpha, betaEff, crow[j])
			}
		}
	}
}

// nnRowChunk is the rows of one part of gemmSmallNN's row split: eight calls of the AVX-512
// kernels' 12 rows, whose A rows (at most a few hundred KiB for the thin products' k) stay in
// the core's L2 while every column panel of C reads them.
const nnRowChunk = 96

// gemmSmallNN computes C = alpha*A·B + beta*C for small m, B (k×n) read in place, splitting the
// column panels among up to nw goroutines above parallelMinFlops. Products of many rows
// (SgemmNN's dX = dY·W over a batch, never Sgemm's small m) are split by chunks of nnRowChunk
// rows instead: split by columns, every goroutine would read all of A, the large operand, from
// memory, where by rows each reads its share of A once and all of B, a weight of a few hundred
// KiB at most. No element's arithmetic depends on the rows around it, so neither split changes
// a bit.
func gemmSmallNN(kern *microKernel, nw int, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	kc := sliceDepth(k, kern.kc)
	if 2*float64(m)*float64(n)*float64(k) < parallelMinFlops {
		nw = 1
	}
	nn := smallNNFor(kern)
	width := 4
	if nn != nil {
		width = nn.width
	}
	if nw > 1 && m >= 2*nw*nnRowChunk {
		fanOut((m+nnRowChunk-1)/nnRowChunk, func(part int) {
			i0 := part * nnRowChunk
			smallNNCols(nn, 0, n, min(nnRowChunk, m-i0), k, kc, alpha, a[i0*lda:], lda, b, ldb, beta, c[i0*ldc:], ldc)
		})
		return
	}
	panels := (n + width - 1) / width
	parts := min(nw, panels)
	if parts <= 1 {
		// Without fanOut's closure, which escapes to the heap: the small products of a decode
		// step's attention run here, one a head.
		smallNNCols(nn, 0, n, m, k, kc, alpha, a, lda, b, ldb, beta, c, ldc)
		return
	}
	fanOut(parts, func(w int) {
		smallNNCols(nn, w*panels/parts*width, min(n, (w+1)*panels/parts*width), m, k, kc, alpha, a, lda, b, ldb, beta, c, ldc)
	})
}

// smallNNCols runs the NN small-m path over columns j0..j1 of C: nn's kernels, or the Go
// kernel's without them (nn nil).
func smallNNCols(nn *smallNNKernel, j0, j1, m, k, kc int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	if nn == nil {
		smallGoNN(j0, j1, m, k, kc, alpha, a, lda, b, ldb, beta, c, ldc)
		return
	}
	smallNNAsm(nn, j0, j1, m, k, kc, alpha, a, lda, b, ldb, beta, c, ldc)
}

// smallNNAsm runs the NN kernels over columns j0..j1 of C. A last panel narrower than the
// kernel goes through a zero-padded copy of its columns of B and a scratch copy of its columns
// of C, so the kernel never touches memory outside the operands.
func smallNNAsm(nn *smallNNKernel, j0, j1, m, k, kc int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	j := j0
	for ; j+nn.width <= j1; j += nn.width {
		smallNNPanel(nn, m, k, kc, alpha, a, lda, b[j:], ldb, beta, c[j:], ldc, false)
	}
	if nn.narrow != nil && j < j1 {
		nn = nn.narrow
		for ; j+nn.width <= j1; j += nn.width {
			smallNNPanel(nn, m, k, kc, alpha, a, lda, b[j:], ldb, beta, c[j:], ldc, false)
		}
	}
	if w := j1 - j; w > 0 {
		width := nn.width
		bbuf, cbuf := getBuf(k*width), getBuf(m*width)
		defer putBuf(bbuf)
		defer putBuf(cbuf)
		bj, cj := *bbuf, *cbuf
		copyStripGo(bj, b[j:], ldb, k, w, width)
		copyTile(cj, width, c[j:], ldc, m, w)
		smallNNPanel(nn, m, k, kc, alpha, a, lda, bj, width, beta, cj, width, false)
		copyTile(c[j:], ldc, cj, width, m, w)
	}
}

// smallNNPanel computes the m×width block of C from the first width columns of b (k rows, ldb
// apart), slice by slice along k, the rows of A taken len(nn.fns) at a time.
//
// A product of more rows than one kernel call takes passes over each k slice of B several
// times, and only the first pass reads it from memory; with prefetch and B a packed panel
// (slices one after another, and panels too), every pass prefetches the next slice, so
// that memory keeps streaming while the later passes run on the slice in cache (where the
// slice and the next fit in the core's L2 with room to spare: prefetchFits). That is a
// batch-32 decode step of a model whose weights do not fit in the caches: the m=32 products of
// a 187 M model's weights measured 152–168 GFLOP/s without and 191–202 with (BENCHMARKS.md).
func smallNNPanel(nn *smallNNKernel, m, k, kc int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int, prefetch bool) {
	width, maxRows := nn.width, len(nn.fns)
	prefetch = prefetch && nn.pfns != nil && m > maxRows && ldb == width && prefetchFits(4*min(kc, k)*width)
	for pc := 0; pc < k; pc += kc {
		kb := min(kc, k-pc)
		betaEff := beta
		if pc > 0 {
			betaEff = 1
		}
		dist := 4 * kb * ldb // bytes from this slice to the next
		// The kernels read kb rows of width floats of B and rows×width of C: check the far corners.
		_ = b[(pc+kb-1)*ldb+width-1]
		for i0 := 0; i0 < m; i0 += maxRows {
			rows := min(maxRows, m-i0)
			_ = a[(i0+rows-1)*lda+pc+kb-1]
			_ = c[(i0+rows-1)*ldc+width-1]
			if prefetch {
				nn.pfns[rows-1](kb, &a[i0*lda+pc], lda, &b[pc*ldb], ldb, &c[i0*ldc], ldc, alpha, betaEff, dist)
				continue
			}
			nn.fns[rows-1](kb, &a[i0*lda+pc], lda, &b[pc*ldb], ldb, &c[i0*ldc], ldc, alpha, betaEff)
		}
	}
}

// smallGoNN is the NN small-m path for the Go microkernel: the same sums as microGo4x4 (acc +=
// a*b from zero per slice) and the same store (storeGo), four columns at a time.
func smallGoNN(j0, j1, m, k, kc int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	for pc := 0; pc < k; pc += kc {
		kb := min(kc, k-pc)
		betaEff := beta
		if pc > 0 {
			betaEff = 1
		}
		for i := 0; i < m; i++ {
			ar := a[i*lda+pc : i*lda+pc+kb]
			crow := c[i*ldc : i*ldc+j1]
			j := j0
			for ; j+4 <= j1; j += 4 {
				var s0, s1, s2, s3 float32
				for p, av := range ar {
					br := b[(pc+p)*ldb+j : (pc+p)*ldb+j+4]
					s0 += av * br[0]
					s1 += av * br[1]
					s2 += av * br[2]
					s3 += av * br[3]
				}
				storeRow4(crow[j:j+4], s0, s1, s2, s3, alpha, betaEff)
			}
			for ; j < j1; j++ {
				var s float32
				for p, av := range ar {
					s += av * b[(pc+p)*ldb+j]
				}
				crow[j] = storeGo(s, alpha, betaEff, crow[j])
			}
		}
	}
}

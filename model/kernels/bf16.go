package kernels

import "math"

// bfloat16 is the upper half of a float32: its sign, its 8 exponent bits and the top 7 of its 23
// mantissa bits. Rounding a float32 to it keeps the range and gives up 16 bits of precision, a
// relative error of at most 2⁻⁸; stored as uint16 it halves the bytes a decode step streams per
// weight. The kernels here widen it back to float32 in registers and accumulate in float32.

// BF16FromFloat32 rounds f to the nearest bfloat16, ties to even. A NaN stays a (quiet) NaN of
// the same sign; values past the largest finite bfloat16 round to ±Inf, as they would in any
// IEEE narrowing.
func BF16FromFloat32(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 {
		return uint16(b>>16) | 0x40 // NaN: keep the sign and set the quiet bit, so no payload rounds to Inf
	}
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}

// BF16ToFloat32 is the float32 that bfloat16 h stands for (exactly).
func BF16ToFloat32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// RoundBF16 rounds every element of x to the nearest bfloat16 in place (as float32): what a
// weight becomes in PackedBF16, for references and tests.
func RoundBF16(x []float32) {
	for i, v := range x {
		x[i] = BF16ToFloat32(BF16FromFloat32(v))
	}
}

// bf16Family is the bfloat16-weight kernels of one instruction set (bf16gen): fns[r-1] computes
// an r×width block C = alpha*A·B + beta*C from kb rows of a bfloat16 B, ldb values apart, for r
// ≤ len(fns); gemv are the one-row kernels over several panels at once, widest first.
type bf16Family struct {
	name  string
	width int
	fns   []func(kb int, a *float32, lda int, b *uint16, ldb int, c *float32, ldc int, alpha, beta float32)
	gemv  []bf16GemvKernel
	// narrow is a family of half the width with the same arithmetic per element, for the
	// columns a full panel would leave over in a product read in place (the values of a
	// bfloat16 KV cache, 16 per head); nil if none.
	narrow *bf16Family
}

// bf16GemvKernel computes one row of C over panels consecutive packed panels (ldp values apart).
type bf16GemvKernel struct {
	panels int
	fn     func(kb int, a *float32, b *uint16, ldp int, c *float32, alpha, beta float32)
}

// bf16GoWidth is the panel width of the Go kernels: eight chains in flight for one row.
const bf16GoWidth = 8

// PackedBF16 is a weight matrix W (n×k, applied as x·Wᵀ) rounded to bfloat16 and laid out for
// decoding as PackedWeights lays out float32: panels of width columns of Wᵀ, each stored
// k×width, zero-padded. It takes half the memory of the float32 matrix, and a batch-1 decode step,
// which reads every weight once, streams half the bytes.
//
// The products differ from the float32 ones by the rounding of the weights (each to within a
// relative 2⁻⁸), so a model decoding with them samples from a slightly different distribution than
// its float32 weights define. Within that, SgemmBF16 keeps the float32 path's guarantees: every
// element of C is one FMA chain over k in order and then the same store, so a row's result does
// not depend on m, on which rows share the call, or on which kernel of the family ran it.
//
// The copy is a snapshot: after W changes, Pack it again.
type PackedBF16 struct {
	n, k   int
	width  int         // panel width: the family's, bf16GoWidth for the Go kernels
	fam    *bf16Family // the kernels SgemmBF16 runs; nil: the Go kernels
	packed bool
	data   []uint16 // panel s at data[s*k*width:], row p of it at +p*width
}

// Pack rounds w (n×k, row-major) to bfloat16 into p, reusing p's storage when it is large enough.
// The kernels are those of the microkernel active now (the float32 path's choice).
func (p *PackedBF16) Pack(w []float32, n, k int) {
	checkMatrix("B", n, k, w, k)
	fam := bf16For(activeKernel())
	width := bf16GoWidth
	if fam != nil {
		width = fam.width
	}
	panels := (n + width - 1) / width
	p.n, p.k, p.width, p.fam, p.packed = n, k, width, fam, true
	if cap(p.data) < panels*k*width {
		p.data = make([]uint16, panels*k*width)
	}
	p.data = p.data[:panels*k*width]
	for s := range panels {
		panel := p.data[s*k*width : (s+1)*k*width]
		cols := min(width, n-s*width)
		for c := range cols {
			row := w[(s*width+c)*k : (s*width+c+1)*k]
			for q, v := range row {
				panel[q*width+c] = BF16FromFloat32(v)
			}
		}
		for q := 0; q < k && cols < width; q++ {
			clear(panel[q*width+cols : (q+1)*width])
		}
	}
}

// Dims returns n and k of the packed matrix.
func (p *PackedBF16) Dims() (n, k int) { return p.n, p.k }

// PanelWidth is the number of columns of C a panel of the packed matrix gives, the unit in which
// SgemmBF16Part cuts a product.
func (p *PackedBF16) PanelWidth() int { return p.width }

// SgemmBF16 computes C = alpha*A·Wᵀ + beta*C for the m×k float32 matrix A and the packed n×k
// bfloat16 weight W, accumulating in float32. One row (a batch-1 decode step) runs on the
// matrix-vector kernels split across the cores as SgemmPacked's does (bf16Tune deciding);
// more rows on the multi-row kernels, panel by panel.
func SgemmBF16(m int, alpha float32, a []float32, lda int, w *PackedBF16, beta float32, c []float32, ldc int) {
	n, k := w.n, w.k
	if !packedOperands("SgemmBF16", w.packed, m, n, k, alpha, a, lda, beta, c, ldc) {
		return
	}
	parts := w.Parts(m, maxWorkers())
	if m == 1 && gemvOn {
		var plan gemvPlan
		parts, plan = bf16Tune.plan(parts, 2*n*k)
		defer plan.done()
	}
	fanOut(parts, func(part int) { w.part(part, parts, m, alpha, a, lda, beta, c, ldc) })
}

// Parts is how many parts SgemmBF16Part cuts a product of m rows by w into when nw goroutines
// share it (1: not split), by PackedWeights.Parts's rules for the bytes of bfloat16 weight.
func (w *PackedBF16) Parts(m, nw int) int {
	n, k := w.n, w.k
	if m <= 0 || n == 0 || k == 0 || nw <= 1 {
		return 1
	}
	if m == 1 && gemvOn {
		full := n / w.width
		return max(1, min(full, nw*gemvPartsPerWorker, full*k*w.width*2/gemvMinPartBytes))
	}
	if float64(m)*float64(n)*float64(k) < packedParallelMin && 2*n*k < packedParallelBytes {
		return 1
	}
	return min(nw, (n+w.width-1)/w.width)
}

// SgemmBF16Part computes part of SgemmBF16(m, alpha, a, lda, w, beta, c, ldc): the columns of C
// that part (of parts, as w.Parts gives) owns. The parts of a product write disjoint columns and
// together make SgemmBF16's result bit for bit, whichever goroutines run them and in whatever
// order; it is for callers that run a product's parts inside a parallel region of their own
// (Phases), as SgemmPackedPart, and cuts C the same way: where n is a multiple of PanelWidth,
// part p of any parts up to the number of panels writes the columns of the panels
// [p·P/parts, (p+1)·P/parts) of the P = n/PanelWidth, for every m.
func SgemmBF16Part(part, parts, m int, alpha float32, a []float32, lda int, w *PackedBF16, beta float32, c []float32, ldc int) {
	if partDone("SgemmBF16Part", w.packed, part, parts, m, w.k, w.n, alpha, a, lda, beta, c, ldc) {
		return
	}
	w.part(part, parts, m, alpha, a, lda, beta, c, ldc)
}

// part is SgemmBF16Part after the checks, with k > 0 and alpha ≠ 0: for one row (bf16GemvPart)
// a contiguous run of the full panels, the last part also the zero-padded last panel; for more
// rows a run of panels on the multi-row kernels.
func (w *PackedBF16) part(part, parts, m int, alpha float32, a []float32, lda int, beta float32, c []float32, ldc int) {
	if m == 1 && gemvOn {
		bf16GemvPart(w, alpha, a, beta, c, part, parts)
		return
	}
	n, width := w.n, w.width
	panels := (n + width - 1) / width
	for s := part * panels / parts; s < (part+1)*panels/parts; s++ {
		bf16Columns(w, s, min(width, n-s*width), m, alpha, a, lda, beta, c[s*width:], ldc)
	}
}

// bf16Columns computes the cols columns of C that panel s of w gives, for m rows; a last panel
// narrower than the kernel goes through scratch, so the kernel never touches memory outside C.
func bf16Columns(w *PackedBF16, s, cols, m int, alpha float32, a []float32, lda int, beta float32, c []float32, ldc int) {
	k, width := w.k, w.width
	panel := w.data[s*k*width : (s+1)*k*width]
	if cols == width {
		bf16Panel(w.fam, m, k, alpha, a, lda, panel, width, beta, c, ldc)
		return
	}
	buf := getBuf(m * width)
	edge := *buf
	copyTile(edge, width, c, ldc, m, cols)
	bf16Panel(w.fam, m, k, alpha, a, lda, panel, width, beta, edge, width)
	copyTile(c, ldc, edge, width, m, cols)
	putBuf(buf)
}

// bf16Panel computes the m×width block of C from one panel (k rows of width values, ldb apart),
// the rows of A taken len(fam.fns) at a time; fam nil runs bf16PanelGo.
func bf16Panel(fam *bf16Family, m, k int, alpha float32, a []float32, lda int, b []uint16, ldb int, beta float32, c []float32, ldc int) {
	if fam == nil {
		bf16PanelGo(m, k, bf16GoWidth, alpha, a, lda, b, ldb, beta, c, ldc)
		return
	}
	width, maxRows := fam.width, len(fam.fns)
	// The kernels read k rows of width values of B and rows×width of C: check the far corners.
	_ = b[(k-1)*ldb+width-1]
	for i0 := 0; i0 < m; i0 += maxRows {
		rows := min(maxRows, m-i0)
		_ = a[(i0+rows-1)*lda+k-1]
		_ = c[(i0+rows-1)*ldc+width-1]
		fam.fns[rows-1](k, &a[i0*lda], lda, &b[0], ldb, &c[i0*ldc], ldc, alpha, beta)
	}
}

// bf16PanelGo is the portable kernel: per element of C one chain of acc += a*w from zero over k
// in order (eight columns at a time for eight chains in flight), then storeGo.
func bf16PanelGo(m, k, width int, alpha float32, a []float32, lda int, b []uint16, ldb int, beta float32, c []float32, ldc int) {
	for i := 0; i < m; i++ {
		ar := a[i*lda : i*lda+k]
		cr := c[i*ldc : i*ldc+width]
		j := 0
		for ; j+8 <= width; j += 8 {
			var s0, s1, s2, s3, s4, s5, s6, s7 float32
			for p, av := range ar {
				r := b[p*ldb+j : p*ldb+j+8 : p*ldb+j+8]
				s0 += av * BF16ToFloat32(r[0])
				s1 += av * BF16ToFloat32(r[1])
				s2 += av * BF16ToFloat32(r[2])
				s3 += av * BF16ToFloat32(r[3])
				s4 += av * BF16ToFloat32(r[4])
				s5 += av * BF16ToFloat32(r[5])
				s6 += av * BF16ToFloat32(r[6])
				s7 += av * BF16ToFloat32(r[7])
			}
			storeRow4(cr[j:j+4], s0, s1, s2, s3, alpha, beta)
			storeRow4(cr[j+4:j+8], s4, s5, s6, s7, alpha, beta)
		}
		for ; j < width; j++ {
			var s float32
			for p, av := range ar {
				s += av * BF16ToFloat32(b[p*ldb+j])
			}
			cr[j] = storeGo(s, alpha, beta, cr[j])
		}
	}
}

// bf16Tune is gemvTune for SgemmBF16's one-row products (the bytes per product are half).
var bf16Tune SplitTuner

// bf16GemvPart is SgemmBF16's part for one row of A: the full panels shared out in contiguous
// runs among the parts, each run on the widest gemv kernels that fit, the last, zero-padded panel
// through bf16Columns in the last part. Every column gets the multi-row kernels' arithmetic, so
// the bits are those of any m and any split.
func bf16GemvPart(w *PackedBF16, alpha float32, a []float32, beta float32, c []float32, part, parts int) {
	n, k, width := w.n, w.k, w.width
	full := n / width
	_ = a[k-1]
	s0, s1 := part*full/parts, (part+1)*full/parts
	bf16GemvRun(w, s0, s1-s0, alpha, a, beta, c)
	if part == parts-1 && full*width < n {
		bf16Columns(w, full, n-full*width, 1, alpha, a, k, beta, c[full*width:], n)
	}
}

// bf16GemvRun computes the columns of cnt full panels from panel s0 on, the widest gemv kernel
// that fits at a time, single panels on the one-row kernel (the Go kernel for every panel
// without the assembly).
func bf16GemvRun(w *PackedBF16, s0, cnt int, alpha float32, a []float32, beta float32, c []float32) {
	k, width, fam := w.k, w.width, w.fam
	for cnt > 0 {
		P := 1
		var g *bf16GemvKernel
		if fam != nil && len(fam.gemv) > 0 {
			for i := min(gemvChoice, len(fam.gemv)-1); i < len(fam.gemv); i++ {
				if fam.gemv[i].panels <= cnt {
					g, P = &fam.gemv[i], fam.gemv[i].panels
					break
				}
			}
		}
		base := s0 * k * width
		_ = w.data[base+P*k*width-1]
		_ = c[s0*width+P*width-1]
		if g != nil {
			g.fn(k, &a[0], &w.data[base], k*width, &c[s0*width], alpha, beta)
		} else {
			bf16Panel(fam, 1, k, alpha, a, k, w.data[base:base+k*width], width, beta, c[s0*width:], width)
		}
		s0, cnt = s0+P, cnt-P
	}
}

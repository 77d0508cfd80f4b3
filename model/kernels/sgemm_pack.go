package kernels

// Packing copies a block of op(A) or op(B) into the order the microkernel reads it: strips of w
// rows of op(A) (w columns of op(B)), each strip laid out step by step along k, w values per
// step, padded with zeros past the matrix edge. Both operands reduce to two cases: the strip's
// w values for one k step are contiguous in memory (copyStrip) or are w separate rows read
// along k (transposeStrip); the transpose is fused into the copy so no separate pass exists.

// packA packs rows i0..i0+mb of op(A), k range pc..pc+kb, into mr-tall strips.
func packA(dst []float32, transA bool, a []float32, lda, i0, mb, pc, kb, mr int) {
	for ir := 0; ir < mb; ir += mr {
		w := min(mr, mb-ir)
		d := dst[ir*kb : ir*kb+mr*kb]
		if transA {
			// A is stored k×m: step p of the strip is A[pc+p][i0+ir : +w].
			copyStrip(d, a[(pc)*lda+i0+ir:], lda, kb, w, mr)
		} else {
			// A is stored m×k: row r of the strip is A[i0+ir+r][pc : pc+kb].
			transposeStrip(d, a[(i0+ir)*lda+pc:], lda, kb, w, mr)
		}
	}
}

// packB packs columns j..j+w of op(B), k range pc..pc+kb, into one nr-wide strip.
func packB(dst []float32, transB bool, b []float32, ldb, pc, kb, j, w, nr int) {
	if transB {
		// B is stored n×k: column c of op(B) is B[j+c][pc : pc+kb].
		transposeStrip(dst, b[j*ldb+pc:], ldb, kb, w, nr)
	} else {
		copyStrip(dst, b[pc*ldb+j:], ldb, kb, w, nr)
	}
}

// copyStripGo: dst[p*width+c] = src[p*ld+c] for c < w, zero for w ≤ c < width.
func copyStripGo(dst, src []float32, ld, kb, w, width int) {
	for p := 0; p < kb; p++ {
		d := dst[p*width : p*width+width]
		copy(d[:w], src[p*ld:p*ld+w])
		clear(d[w:])
	}
}

// transposeStripGo: dst[p*width+r] = src[r*ld+p] for r < w, zero for w ≤ r < width, starting
// at row r0 (rows before it are already packed). Rows are taken four at a time so each pass
// writes four neighbouring values per k step.
func transposeStripGo(dst, src []float32, ld, kb, w, width, r0 int) {
	dst = dst[:kb*width]
	r := r0
	for ; r+4 <= w; r += 4 {
		s0 := src[r*ld : r*ld+kb]
		s1 := src[(r+1)*ld : (r+1)*ld+kb]
		s2 := src[(r+2)*ld : (r+2)*ld+kb]
		s3 := src[(r+3)*ld : (r+3)*ld+kb]
		for p := range s0 {
			d := dst[p*width+r : p*width+r+4]
			d[0], d[1], d[2], d[3] = s0[p], s1[p], s2[p], s3[p]
		}
	}
	for ; r < w; r++ {
		s := src[r*ld : r*ld+kb]
		for p, v := range s {
			dst[p*width+r] = v
		}
	}
	if w < width {
		for p := 0; p < kb; p++ {
			clear(dst[p*width+w : p*width+width])
		}
	}
}

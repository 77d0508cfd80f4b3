package kernels

// The fused training attention: for heads of a multiple of 16 dimensions on the assembly
// kernels, AttentionForward and AttentionBackward run their products straight on the small-m
// NN kernels (sgemmSmallNN) in tiles of a dozen query rows, instead of through Sgemm. For the
// built-in models' heads of 16 and 32 dimensions every product is thin (k or n is the head
// dimension) and Sgemm's general machinery (packing both operands per call, choosing a path,
// blocking) cost more than the arithmetic. Here each (sequence, key/value head) task transposes
// its keys and values once into scratch (hd×keys, so that a score tile is an NN product with
// the keys read in place as B) and everything else is read where it lies:
//
//	forward, per tile of rows:   S = scale·Q·Kᵀ over the keys the tile sees, softmax per row, O = P·V
//	backward, per block of rows: P = exp(scale·Q·Kᵀ − lse), dP = dO·Vᵀ, dS = scale·P⊙(dP − D)
//	                             (one pass, softmaxGrad), dQ += dS·K, dVᵀ += dOᵀ·P, dKᵀ += Qᵀ·dS
//
// The causal mask is applied by the extents of the products: a tile's scores stop at the key
// panel holding its last row's key, and a key panel's dK and dV sums start at the first query
// row that sees it, so only the diagonal panels compute zeros. Each element of each product is
// one FMA chain per k slice of the kernels' kc, the same on AVX-512 and AVX2 (the kernels of one
// generator); nothing depends on how tasks are shared among goroutines.

// fusedTile is the number of query rows of one forward tile and of one backward score tile: the
// AVX-512 kernels' 12 rows (two calls of the AVX2 kernels' 6).
const fusedTile = 12

// fusedBlock is the number of query rows whose probabilities the backward keeps at once: the k
// of the dKᵀ and dVᵀ products, long enough to amortize loading and storing their C tiles.
const fusedBlock = 4 * fusedTile

// keyPanel is the padding of key counts in scratch: the widest kernel's panel, so every score
// panel and every dKᵀ/dVᵀ panel lies inside its operands.
const keyPanel = 32

// fusedOff, when set, sends every head dimension through the Sgemm path (tests and benchmarks
// compare the two with it).
var fusedOff bool

// fusedFamily is the small-m NN family the fused path runs on for heads of headDim, or nil where
// it does not apply (no assembly kernels, or a head dimension that is not a multiple of 16):
// the callers then take the Sgemm path.
func fusedFamily(headDim int) *smallNNKernel {
	nn := smallNNFor(activeKernel())
	if nn == nil || fusedOff || headDim <= 0 || headDim%16 != 0 {
		return nil
	}
	if headDim%nn.width != 0 && (nn.narrow == nil || nn.narrow.width != 16) {
		return nil
	}
	return nn
}

// fusedForwardScratch and fusedBackwardScratch are the scratch floats of the fused path.
func fusedForwardScratch(L, past, hd int) int {
	nkp := roundUp(past+L, keyPanel)
	return hd*nkp + fusedTile*nkp
}

func fusedBackwardScratch(L, past, hd int) int {
	nkp := roundUp(past+L, keyPanel)
	return 4*hd*nkp + 2*hd*L + 2*fusedBlock*nkp + L
}

// nnProduct computes C = alpha·A·B + beta·C (m×n, B k×n read in place) over whole panels of
// the family, and of its 16-wide narrow family for the last 16 columns: n must be a multiple
// of 16, and of nn.width unless the family has a narrow one.
func nnProduct(nn *smallNNKernel, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	if m == 0 || n == 0 {
		return
	}
	if k == 0 {
		// No kernel call sums nothing; C = beta·C as Sgemm would.
		for i := 0; i < m; i++ {
			row := c[i*ldc : i*ldc+n]
			for j := range row {
				row[j] = storeGo(0, alpha, beta, row[j])
			}
		}
		return
	}
	kc := sliceDepth(k, activeKernel().kc)
	j := 0
	for ; j+nn.width <= n; j += nn.width {
		smallNNPanel(nn, m, k, kc, alpha, a, lda, b[j:], ldb, beta, c[j:], ldc, false)
	}
	if j < n {
		nw := nn.narrow
		for ; j < n; j += nw.width {
			smallNNPanel(nw, m, k, kc, alpha, a, lda, b[j:], ldb, beta, c[j:], ldc, false)
		}
	}
}

// attentionForwardFused is AttentionForward on the small-m kernels (see the file comment).
func attentionForwardFused(nn *smallNNKernel, out []float32, ldo int, lse []float32, ldlse int, scratch []float32,
	q []float32, ldq int, k, v []float32, ldkv int, L, past, nRep, hd int, scale float32, window int) {
	nk := past + L
	nkp := roundUp(nk, keyPanel)
	kT := scratch[:hd*nkp]
	s := scratch[hd*nkp : hd*nkp+fusedTile*nkp]
	transposeStrip(kT, k, ldkv, hd, nk, nkp)
	ek := activeElem()
	var maxes, sums [fusedTile]float32
	for r := 0; r < nRep; r++ {
		for t0 := 0; t0 < L; t0 += fusedTile {
			t1 := min(L, t0+fusedTile)
			rows, kEnd := t1-t0, past+t1
			nnProduct(nn, rows, roundUp(kEnd, nn.width), hd, scale, q[t0*ldq+r*hd:], ldq, kT, nkp, 0, s, nkp)
			// softmaxInPlace's operations; the logarithms of the log-sum-exps come after the
			// tile's rows, in float32, where their dependency chains overlap.
			for i := 0; i < rows; i++ {
				row := s[i*nkp : i*nkp+kEnd]
				visible := past + t0 + i + 1
				lo := windowStart(visible, window)
				m := ek.max(row[lo:visible])
				sum := ek.expSum(row[lo:visible], row[lo:visible], m)
				ek.scale(row[lo:visible], 1/sum)
				clear(row[:lo])
				clear(row[visible:])
				maxes[i], sums[i] = m, sum
			}
			if lse != nil {
				for i := 0; i < rows; i++ {
					lse[(t0+i)*ldlse+r] = maxes[i] + logf(sums[i])
				}
			}
			nnProduct(nn, rows, hd, kEnd, 1, s, nkp, v, ldkv, 0, out[t0*ldo+r*hd:], ldo)
		}
	}
}

// attentionBackwardFused is AttentionBackward on the small-m kernels (see the file comment).
func attentionBackwardFused(nn *smallNNKernel, dq, dk, dv, scratch, dout []float32, ldo int, out, lse []float32, ldlse int,
	q []float32, ldq int, k, v []float32, ldkv int, L, past, nRep, hd int, scale float32, window int) {
	nk := past + L
	nkp := roundUp(nk, keyPanel)
	take := func(n int) []float32 {
		x := scratch[:n:n]
		scratch = scratch[n:]
		return x
	}
	kT, vT := take(hd*nkp), take(hd*nkp)
	dkT, dvT := take(hd*nkp), take(hd*nkp)
	qT, doutT := take(hd*L), take(hd*L)
	p, ds := take(fusedBlock*nkp), take(fusedBlock*nkp)
	dd := take(L)
	ek := activeElem()
	transposeStrip(kT, k, ldkv, hd, nk, nkp)
	transposeStrip(vT, v, ldkv, hd, nk, nkp)
	clear(dkT)
	clear(dvT)
	for r := 0; r < nRep; r++ {
		qr, dor := q[r*hd:], dout[r*hd:]
		transposeStrip(qT, qr, ldq, hd, L, L)
		transposeStrip(doutT, dor, ldo, hd, L, L)
		// D_i = Σ_j P_ij dP_ij = dO_i·O_i, the softmax Jacobian's row term.
		for i := range dd {
			dd[i] = dot4(out[i*ldo+r*hd:i*ldo+r*hd+hd], dor[i*ldo:i*ldo+hd])
		}
		for i0 := 0; i0 < L; i0 += fusedBlock {
			i1 := min(L, i0+fusedBlock)
			// Keys past the block's last visible one up to the end of its panel stay zero in P
			// and dS: the dKᵀ and dVᵀ products read whole panels.
			end := roundUp(past+i1, keyPanel)
			for t0 := i0; t0 < i1; t0 += fusedTile {
				t1 := min(i1, t0+fusedTile)
				rows, kEnd := t1-t0, past+t1
				kw := roundUp(kEnd, nn.width)
				pt, dst := p[(t0-i0)*nkp:], ds[(t0-i0)*nkp:]
				nnProduct(nn, rows, kw, hd, scale, qr[t0*ldq:], ldq, kT, nkp, 0, pt, nkp)
				nnProduct(nn, rows, kw, hd, 1, dor[t0*ldo:], ldo, vT, nkp, 0, dst, nkp)
				for i := 0; i < rows; i++ {
					visible := past + t0 + i + 1
					lo := windowStart(visible, window)
					pr, dr := pt[i*nkp:i*nkp+end], dst[i*nkp:i*nkp+end]
					l, d := lse[(t0+i)*ldlse+r], dd[t0+i]
					ek.softmaxGrad(pr[lo:visible], dr[lo:visible], l, d, scale)
					clear(pr[:lo])
					clear(dr[:lo])
					clear(pr[visible:])
					clear(dr[visible:])
				}
				// dQ += dS·K over the keys the tile sees.
				nnProduct(nn, rows, hd, kEnd, 1, dst, nkp, k, ldkv, 1, dq[t0*ldq+r*hd:], ldq)
			}
			// dVᵀ += dOᵀ·P and dKᵀ += Qᵀ·dS, one key panel at a time from the first row that sees it.
			for j0 := 0; j0 < past+i1; j0 += nn.width {
				r0 := max(i0, j0-past)
				kk := i1 - r0
				nnProduct(nn, hd, nn.width, kk, 1, doutT[r0:], L, p[(r0-i0)*nkp+j0:], nkp, 1, dvT[j0:], nkp)
				nnProduct(nn, hd, nn.width, kk, 1, qT[r0:], L, ds[(r0-i0)*nkp+j0:], nkp, 1, dkT[j0:], nkp)
			}
		}
	}
	// kT and vT are free again: they hold the transposes while they are added.
	addTransposed(dk, ldkv, dkT, nkp, kT, nk, hd)
	addTransposed(dv, ldkv, dvT, nkp, vT, nk, hd)
}

// dot4 is x·y for len(x) a multiple of 4, in four interleaved partial sums (one chain would
// wait on every add).
func dot4(x, y []float32) float32 {
	y = y[:len(x)]
	var s0, s1, s2, s3 float32
	for i := 0; i+4 <= len(x); i += 4 {
		s0 += x[i] * y[i]
		s1 += x[i+1] * y[i+1]
		s2 += x[i+2] * y[i+2]
		s3 += x[i+3] * y[i+3]
	}
	return (s0 + s1) + (s2 + s3)
}

// addTransposed adds the transpose of src (cols×rows, stride lds) into dst (rows×cols, stride
// ldd), through tmp (rows·cols floats): transposed there in 4×4 blocks, then added row by row,
// since a strided walk over dst's rows (a fused qkv row apart) thrashes the cache.
func addTransposed(dst []float32, ldd int, src []float32, lds int, tmp []float32, rows, cols int) {
	transposeStrip(tmp, src, lds, rows, cols, cols)
	for r := 0; r < rows; r++ {
		d, t := dst[r*ldd:r*ldd+cols], tmp[r*cols:r*cols+cols]
		for c, x := range t {
			d[c] += x
		}
	}
}

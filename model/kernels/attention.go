package kernels

import "math"

// attnBlock is the number of query rows processed together. Scores for a block are computed
// only up to the block's last key, so the causal mask wastes about attnBlock/2 columns per row
// instead of half the matrix, while each block is still a GEMM big enough for Sgemm's SIMD path.
const attnBlock = 64

// AttentionScratch is the number of scratch floats AttentionForward needs for L queries of
// heads of headDim after past cached keys; AttentionBackward needs twice as many.
func AttentionScratch(L, past, headDim int) int {
	gemm := min(L, attnBlock) * (past + L)
	fused := max(fusedForwardScratch(L, past, headDim), (fusedBackwardScratch(L, past, headDim)+1)/2)
	return max(gemm, fused)
}

// AttentionForward computes causal softmax attention for the nRep query heads that share one
// key/value head (grouped-query attention; nRep = 1 is plain multi-head attention), over L query
// rows that belong to one sequence and whose keys are the past earlier positions followed by the
// queries' own positions: query i sees keys 0 … past+i.
//
// Layouts (row-major, strides in elements):
//
//	q   query i, head r at q[i*ldq + r*headDim]    (L, nRep·headDim)
//	k,v key j at k[j*ldkv]                          (past+L, headDim)
//	out row i, head r at out[i*ldo + r*headDim]    (L, nRep·headDim)
//	lse row i, head r at lse[i*ldlse + r]          (L, nRep), may be nil
//
// Like FlashAttention (Dao et al. 2022) it keeps only each row's log-sum-exp of the scaled
// scores, not the L×(past+L) probabilities: AttentionBackward recomputes them, one extra GEMM
// per block in exchange for memory linear in the sequence length. scratch needs
// AttentionScratch(L, past, headDim) floats.
//
// Heads of a multiple of 16 dimensions on the assembly kernels take the fused path
// (attention_fused.go); others multiply through Sgemm, a block of attnBlock rows at a time.
func AttentionForward(out []float32, ldo int, lse []float32, ldlse int, scratch []float32,
	q []float32, ldq int, k, v []float32, ldkv int, L, past, nRep, headDim int) {
	attentionForward(out, ldo, lse, ldlse, scratch, q, ldq, k, v, ldkv, L, past, nRep, headDim, 0)
}

// AttentionForwardWindow is AttentionForward with sliding-window attention (Mistral's): query i
// sees only the window most recent keys up to its own, keys past+i-window+1 … past+i. A window of
// 0, or one at least past+L, is AttentionForward.
func AttentionForwardWindow(out []float32, ldo int, lse []float32, ldlse int, scratch []float32,
	q []float32, ldq int, k, v []float32, ldkv int, L, past, nRep, headDim, window int) {
	attentionForward(out, ldo, lse, ldlse, scratch, q, ldq, k, v, ldkv, L, past, nRep, headDim, window)
}

// windowStart is the first key a row that sees visible keys attends to under window (0: all).
func windowStart(visible, window int) int {
	if window <= 0 {
		return 0
	}
	return max(0, visible-window)
}

func attentionForward(out []float32, ldo int, lse []float32, ldlse int, scratch []float32,
	q []float32, ldq int, k, v []float32, ldkv int, L, past, nRep, headDim, window int) {
	scale := float32(1 / math.Sqrt(float64(headDim)))
	if nn := fusedFamily(headDim); nn != nil {
		attentionForwardFused(nn, out, ldo, lse, ldlse, scratch, q, ldq, k, v, ldkv, L, past, nRep, headDim, scale, window)
		return
	}
	for r := 0; r < nRep; r++ {
		for i0 := 0; i0 < L; i0 += attnBlock {
			i1 := min(L, i0+attnBlock)
			rows, nk := i1-i0, past+i1
			s := scratch[:rows*nk]
			Sgemm(false, true, rows, nk, headDim, scale, q[i0*ldq+r*headDim:], ldq, k, ldkv, 0, s, nk)
			for i := 0; i < rows; i++ {
				row := s[i*nk : i*nk+nk]
				visible := past + i0 + i + 1
				lo := windowStart(visible, window)
				l := softmaxInPlace(row[lo:visible])
				clear(row[:lo])
				clear(row[visible:])
				if lse != nil {
					lse[(i0+i)*ldlse+r] = l
				}
			}
			Sgemm(false, false, rows, headDim, nk, 1, s, nk, v, ldkv, 0, out[i0*ldo+r*headDim:], ldo)
		}
	}
}

// softmaxInPlace replaces x with softmax(x), subtracting the maximum first for stability, and
// returns log Σ exp(x). The sum is expSum's, in an order fixed by the row's length alone, so
// AttentionCached's rows in a prefill and in decoding sum alike.
func softmaxInPlace(x []float32) float32 {
	m, sum := softmaxRow(x)
	return m + float32(math.Log(float64(sum)))
}

// softmaxRow is softmaxInPlace without the log, for AttentionCached, which keeps no log-sum-exp:
// it returns the maximum and the sum of the exponentials.
func softmaxRow(x []float32) (m, sum float32) {
	k := activeElem()
	m = k.max(x)
	sum = k.expSum(x, x, m)
	k.scale(x, 1/sum)
	return m, sum
}

// AttentionBackward adds to dq, dk and dv the gradients of AttentionForward given dout, with the
// same layouts (dq like q, dk and dv like k and v). out and lse must be what the matching
// forward call wrote. scratch needs 2·AttentionScratch(L, past, headDim) floats. The nRep
// heads are visited in order, so their shared dk and dv sum deterministically.
func AttentionBackward(dq, dk, dv, scratch, dout []float32, ldo int, out, lse []float32, ldlse int,
	q []float32, ldq int, k, v []float32, ldkv int, L, past, nRep, headDim int) {
	attentionBackward(dq, dk, dv, scratch, dout, ldo, out, lse, ldlse, q, ldq, k, v, ldkv, L, past, nRep, headDim, 0)
}

// AttentionBackwardWindow is AttentionBackward of AttentionForwardWindow with the same window.
func AttentionBackwardWindow(dq, dk, dv, scratch, dout []float32, ldo int, out, lse []float32, ldlse int,
	q []float32, ldq int, k, v []float32, ldkv int, L, past, nRep, headDim, window int) {
	attentionBackward(dq, dk, dv, scratch, dout, ldo, out, lse, ldlse, q, ldq, k, v, ldkv, L, past, nRep, headDim, window)
}

func attentionBackward(dq, dk, dv, scratch, dout []float32, ldo int, out, lse []float32, ldlse int,
	q []float32, ldq int, k, v []float32, ldkv int, L, past, nRep, headDim, window int) {
	scale := float32(1 / math.Sqrt(float64(headDim)))
	if nn := fusedFamily(headDim); nn != nil {
		attentionBackwardFused(nn, dq, dk, dv, scratch, dout, ldo, out, lse, ldlse, q, ldq, k, v, ldkv, L, past, nRep, headDim, scale, window)
		return
	}
	for r := 0; r < nRep; r++ {
		for i0 := 0; i0 < L; i0 += attnBlock {
			i1 := min(L, i0+attnBlock)
			rows, nk := i1-i0, past+i1
			p := scratch[:rows*nk]
			ds := scratch[rows*nk : 2*rows*nk]
			qb := q[i0*ldq+r*headDim:]
			do := dout[i0*ldo+r*headDim:]
			ob := out[i0*ldo+r*headDim:]
			// Recompute P = exp(scale·Q·Kᵀ − lse) on the visible keys.
			Sgemm(false, true, rows, nk, headDim, scale, qb, ldq, k, ldkv, 0, p, nk)
			for i := 0; i < rows; i++ {
				visible := past + i0 + i + 1
				lo := windowStart(visible, window)
				row := p[i*nk : i*nk+nk]
				l := lse[(i0+i)*ldlse+r]
				expSum(row[lo:visible], row[lo:visible], l)
				clear(row[:lo])
				clear(row[visible:])
			}
			// dV += Pᵀ·dO
			Sgemm(true, false, nk, headDim, rows, 1, p, nk, do, ldo, 1, dv, ldkv)
			// dP = dO·Vᵀ; the softmax Jacobian gives dS = P ⊙ (dP − D) with D_i = Σ_j P_ij dP_ij
			// = dO_i·O_i, times the score scale so that dQ and dK come out of plain GEMMs.
			Sgemm(false, true, rows, nk, headDim, 1, do, ldo, v, ldkv, 0, ds, nk)
			for i := 0; i < rows; i++ {
				visible := past + i0 + i + 1
				lo := windowStart(visible, window)
				var d float32
				for x, ov := range ob[i*ldo : i*ldo+headDim] {
					d += ov * do[i*ldo+x]
				}
				pr := p[i*nk : i*nk+visible]
				dr := ds[i*nk : i*nk+nk]
				for j := lo; j < visible; j++ {
					dr[j] = pr[j] * (dr[j] - d) * scale
				}
				clear(dr[:lo])
				clear(dr[visible:])
			}
			// dQ += dS·K, dK += dSᵀ·Q
			Sgemm(false, false, rows, headDim, nk, 1, ds, nk, k, ldkv, 1, dq[i0*ldq+r*headDim:], ldq)
			Sgemm(true, false, nk, headDim, rows, 1, ds, nk, qb, ldq, 1, dk, ldkv)
		}
	}
}

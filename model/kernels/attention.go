package kernels

import "math"

// attnBlock is the number of query rows processed together. Scores for a block are computed
// only up to the block's last key, so the causal mask wastes about attnBlock/2 columns per row
// instead of half the matrix, while each block is still a GEMM big enough for Sgemm's SIMD path.
const attnBlock = 64

// AttentionForward computes causal softmax attention for the nRep query heads that share one
// key/value head (grouped-query attention; nRep = 1 is plain multi-head attention), over L query
// rows that belong to one sequence and whose keys are the past earlier positions followed by the
// queries' own positions: query i sees keys 0 … past+i.
//
// Layouts (all row-major, strides in elements):
//
//	q   query i, head r at q[i*ldq + r*headDim]               (L, nRep·headDim)
//	k,v key j at k[j*ldkv]                                     (past+L, headDim)
//	out row i, head r at out[i*ldo + r*headDim]                (L, nRep·headDim)
//	att head r's probabilities at att[r*attHead + i*ldatt + j] (nRep, L, past+L)
//
// att keeps the probabilities for AttentionBackward; entries right of a row's last visible key
// are zero within the row's block and unspecified beyond it.
func AttentionForward(out []float32, ldo int, att []float32, ldatt, attHead int,
	q []float32, ldq int, k, v []float32, ldkv int, L, past, nRep, headDim int) {
	for r := 0; r < nRep; r++ {
		for i0 := 0; i0 < L; i0 += attnBlock {
			i1 := min(L, i0+attnBlock)
			attendBlock(out[i0*ldo+r*headDim:], ldo, att[r*attHead+i0*ldatt:], ldatt,
				q[i0*ldq+r*headDim:], ldq, k, v, ldkv, i0, i1, past, headDim)
		}
	}
}

// AttentionInfer is AttentionForward without keeping the probabilities: scratch holds one
// block's scores and needs min(L, 64)·(past+L) elements. Decoding uses it with the KV cache.
func AttentionInfer(out []float32, ldo int, scratch []float32,
	q []float32, ldq int, k, v []float32, ldkv int, L, past, nRep, headDim int) {
	lds := past + L
	for r := 0; r < nRep; r++ {
		for i0 := 0; i0 < L; i0 += attnBlock {
			i1 := min(L, i0+attnBlock)
			attendBlock(out[i0*ldo+r*headDim:], ldo, scratch, lds,
				q[i0*ldq+r*headDim:], ldq, k, v, ldkv, i0, i1, past, headDim)
		}
	}
}

// attendBlock handles query rows i0…i1-1 of one head: s (rows from 0) receives the
// probabilities over keys 0 … past+i1-1, out and q start at row i0.
func attendBlock(out []float32, ldo int, s []float32, lds int, q []float32, ldq int,
	k, v []float32, ldkv int, i0, i1, past, headDim int) {
	rows, nk := i1-i0, past+i1
	scale := float32(1 / math.Sqrt(float64(headDim)))
	Sgemm(false, true, rows, nk, headDim, scale, q, ldq, k, ldkv, 0, s, lds)
	for i := 0; i < rows; i++ {
		row := s[i*lds : i*lds+nk]
		visible := past + i0 + i + 1
		softmaxInPlace(row[:visible])
		clear(row[visible:])
	}
	Sgemm(false, false, rows, headDim, nk, 1, s, lds, v, ldkv, 0, out, ldo)
}

// softmaxInPlace replaces x with softmax(x), subtracting the maximum first for stability.
func softmaxInPlace(x []float32) {
	m := x[0]
	for _, v := range x[1:] {
		m = max(m, v)
	}
	var sum float32
	for i, v := range x {
		e := expf(v - m)
		x[i] = e
		sum += e
	}
	inv := 1 / sum
	for i := range x {
		x[i] *= inv
	}
}

// AttentionBackward adds to dq, dk and dv the gradients of AttentionForward given dout, with the
// same layouts (dq like q, dk and dv like k and v). att must hold the probabilities written by
// the matching forward call. scratch needs min(L, 64)·(past+L) elements. The nRep heads are
// visited in order, so their shared dk and dv sum deterministically.
func AttentionBackward(dq, dk, dv, scratch, dout []float32, ldo int, att []float32, ldatt, attHead int,
	q []float32, ldq int, k, v []float32, ldkv int, L, past, nRep, headDim int) {
	scale := float32(1 / math.Sqrt(float64(headDim)))
	for r := 0; r < nRep; r++ {
		for i0 := 0; i0 < L; i0 += attnBlock {
			i1 := min(L, i0+attnBlock)
			rows, nk := i1-i0, past+i1
			p := att[r*attHead+i0*ldatt:]
			do := dout[i0*ldo+r*headDim:]
			// dV += Pᵀ·dO
			Sgemm(true, false, nk, headDim, rows, 1, p, ldatt, do, ldo, 1, dv, ldkv)
			// dP = dO·Vᵀ, then the softmax Jacobian: dS = P ⊙ (dP − rowsum(P ⊙ dP)), times the
			// score scale so that dQ and dK come out of plain GEMMs.
			ds := scratch[:rows*nk]
			Sgemm(false, true, rows, nk, headDim, 1, do, ldo, v, ldkv, 0, ds, nk)
			for i := 0; i < rows; i++ {
				visible := past + i0 + i + 1
				pr := p[i*ldatt : i*ldatt+visible]
				dr := ds[i*nk : i*nk+nk]
				var dot float32
				for j, pv := range pr {
					dot += pv * dr[j]
				}
				for j, pv := range pr {
					dr[j] = pv * (dr[j] - dot) * scale
				}
				clear(dr[visible:])
			}
			// dQ += dS·K, dK += dSᵀ·Q
			Sgemm(false, false, rows, headDim, nk, 1, ds, nk, k, ldkv, 1, dq[i0*ldq+r*headDim:], ldq)
			Sgemm(true, false, nk, headDim, rows, 1, ds, nk, q[i0*ldq+r*headDim:], ldq, 1, dk, ldkv)
		}
	}
}

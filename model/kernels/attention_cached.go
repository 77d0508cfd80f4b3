package kernels

import "math"

// attnKeyChunk is how many keys one P·V product of AttentionCached sums. It is at most the
// smallest kc of the microkernels (the Go kernel's 256), so Sgemm never slices a chunk further
// and the chunks, not the number of keys, fix where the sums are cut.
const attnKeyChunk = 256

// AttentionCachedScratch is the number of scratch floats AttentionCached needs for L queries
// of nRep heads after past cached keys.
func AttentionCachedScratch(L, past, nRep int) int {
	if L == 1 {
		return nRep * (past + 1)
	}
	return min(L, attnBlock) * (past + L)
}

// AttentionCached is AttentionForward without the log-sum-exp, for decoding: L query rows of one
// sequence over past cached keys and their own (same layouts). Each output row gets the same
// operations however the sequence was split into calls: one token at a time, all at once, or in
// chunks, so that a prefill gives bit for bit what step-by-step decoding gives. The scores sum
// over headDim in one Sgemm slice and the softmax sees only the row's visible keys; P·V sums the
// keys in fixed chunks of attnKeyChunk counted from key 0 (AttentionForward's one Sgemm over all
// of a block's keys would cut the sum where the block's key count says). Keys past a row's last
// visible one have probability zero and add exact zeros.
//
// With L == 1 the nRep heads are the rows of one product each for the scores and for P·V, so a
// decode step multiplies K and V by nRep rows at once; q and out then hold the heads
// headDim floats apart.
func AttentionCached(out []float32, ldo int, scratch []float32, q []float32, ldq int, k, v []float32, ldkv int, L, past, nRep, headDim int) {
	scale := float32(1 / math.Sqrt(float64(headDim)))
	if L == 1 {
		nk := past + 1
		s := scratch[:nRep*nk]
		Sgemm(false, true, nRep, nk, headDim, scale, q, headDim, k, ldkv, 0, s, nk)
		for r := 0; r < nRep; r++ {
			softmaxInPlace(s[r*nk : (r+1)*nk])
		}
		keyChunksPV(out, headDim, s, nk, v, ldkv, nRep, nk, headDim)
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
				softmaxInPlace(row[:visible])
				clear(row[visible:])
			}
			keyChunksPV(out[i0*ldo+r*headDim:], ldo, s, nk, v, ldkv, rows, nk, headDim)
		}
	}
}

// keyChunksPV writes out = P·V for rows rows of probabilities over nk keys, summing the keys
// attnKeyChunk at a time from key 0.
func keyChunksPV(out []float32, ldo int, p []float32, ldp int, v []float32, ldv, rows, nk, headDim int) {
	for j0 := 0; j0 < nk; j0 += attnKeyChunk {
		var beta float32
		if j0 > 0 {
			beta = 1
		}
		Sgemm(false, false, rows, headDim, min(attnKeyChunk, nk-j0), 1, p[j0:], ldp, v[j0*ldv:], ldv, beta, out, ldo)
	}
}

package kernels

import (
	"math"
	"unsafe"
)

// attnKeyChunk is how many keys one P·V product of AttentionCached sums. It is at most the
// smallest kc of the microkernels (the Go kernel's 256), so Sgemm never slices a chunk further
// and the chunks, not the number of keys, fix where the sums are cut.
const attnKeyChunk = 256

// KeyBlock is how many keys AttentionCached's key layout keeps together: keys come in blocks of
// KeyBlock, each block stored headDim×KeyBlock (dimension d of key j at d*KeyBlock + j%KeyBlock
// within block j/KeyBlock). The scores of a decode step then read a head's keys as one
// contiguous stream with full-width vector loads, as the NN kernels read a packed strip; every
// kernel width (32, 16, the Go kernel's 4) divides it.
const KeyBlock = 32

// KeyBlocksLen is the number of floats that n keys of headDim take in the key-block layout.
func KeyBlocksLen(n, headDim int) int { return roundUpKeys(n) * headDim }

// StoreKey writes key j (headDim floats) into kb, the key-block layout.
func StoreKey(kb []float32, j int, key []float32) {
	hd := len(key)
	blk := kb[j/KeyBlock*hd*KeyBlock+j%KeyBlock:]
	_ = blk[(hd-1)*KeyBlock]
	for d, x := range key {
		blk[d*KeyBlock] = x
	}
}

func roundUpKeys(n int) int { return (n + KeyBlock - 1) / KeyBlock * KeyBlock }

// AttentionCachedScratch is the number of scratch floats AttentionCached needs for L queries
// of nRep heads after past cached keys.
func AttentionCachedScratch(L, past, nRep int) int {
	if L == 1 {
		return nRep * roundUpKeys(past+1)
	}
	return min(L, attnBlock) * roundUpKeys(past+L)
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
// The keys kb are in the key-block layout (KeyBlock, StoreKey), at least KeyBlocksLen(past+L,
// headDim) floats. A partly filled last block is multiplied whole: its unused keys may hold
// anything, their scores land in the padding of a score row and are never read. v holds one
// key's value per row, ldv floats apart. The scores get the same bits as from keys stored row by
// row: every element of a product is one FMA chain over headDim in order, whichever way B is
// laid out.
//
// With L == 1 the nRep heads are the rows of one product each for the scores and for P·V, so a
// decode step multiplies K and V by nRep rows at once; q and out then hold the heads
// headDim floats apart.
func AttentionCached(out []float32, ldo int, scratch []float32, q []float32, ldq int, kb, v []float32, ldv int, L, past, nRep, headDim int) {
	attentionCached(out, ldo, scratch, q, ldq, kb, v, ldv, L, past, nRep, headDim, 0)
}

// AttentionCachedWindow is AttentionCached with sliding-window attention (AttentionForwardWindow):
// each row attends to its window most recent keys, its own included; the keys before them get
// probability zero. A window of 0 is AttentionCached. Its guarantees are AttentionCached's.
func AttentionCachedWindow(out []float32, ldo int, scratch []float32, q []float32, ldq int, kb, v []float32, ldv int, L, past, nRep, headDim, window int) {
	attentionCached(out, ldo, scratch, q, ldq, kb, v, ldv, L, past, nRep, headDim, window)
}

// attentionCached is AttentionCached over float32 keys and values and AttentionCachedBF16 over
// bfloat16 ones: the same blocks of queries, softmax over each row's visible keys and zeros past
// them, with the products of the cache's precision (cachedScores, cachedValues).
func attentionCached[T float32 | uint16](out []float32, ldo int, scratch []float32, q []float32, ldq int, kb, v []T, ldv int, L, past, nRep, headDim, window int) {
	scale := float32(1 / math.Sqrt(float64(headDim)))
	if L == 1 {
		nk := past + 1
		lds := roundUpKeys(nk)
		// The scores overwrite scratch[0]; the store keeps the loads.
		scratch[0] = float32(touchPages(kb[:lds*headDim]) ^ touchPages(v[:(nk-1)*ldv+headDim]))
		s := scratch[:nRep*lds]
		cachedScores(s, lds, q, headDim, kb, nRep, nk, headDim, scale)
		lo := windowStart(nk, window)
		for r := 0; r < nRep; r++ {
			softmaxRow(s[r*lds+lo : r*lds+nk])
			clear(s[r*lds : r*lds+lo])
		}
		cachedValues(out, headDim, s, lds, v, ldv, nRep, nk, headDim)
		return
	}
	for r := 0; r < nRep; r++ {
		for i0 := 0; i0 < L; i0 += attnBlock {
			i1 := min(L, i0+attnBlock)
			rows, nk := i1-i0, past+i1
			lds := roundUpKeys(nk)
			s := scratch[:rows*lds]
			cachedScores(s, lds, q[i0*ldq+r*headDim:], ldq, kb, rows, nk, headDim, scale)
			for i := 0; i < rows; i++ {
				row := s[i*lds : i*lds+nk]
				visible := past + i0 + i + 1
				lo := windowStart(visible, window)
				softmaxRow(row[lo:visible])
				clear(row[:lo])
				clear(row[visible:])
			}
			cachedValues(out[i0*ldo+r*headDim:], ldo, s, lds, v, ldv, rows, nk, headDim)
		}
	}
}

// pageBytes is the stride of touchPages: the smallest page size of the CPUs the kernels run on.
const pageBytes = 4096

// touchPages reads a byte of every page that x spans, the loads independent of one another, and
// returns their xor. A decode step's attention reads a head's keys and values, tens of KiB, once
// a step, after the step's products have streamed megabytes of weights through the caches and
// the TLB: read in order, each page's translation and first lines wait for the page before, and
// the hardware prefetchers start over at every page. Touched first, the pages' misses overlap
// (a batch-1 step of the default model on one core: 46–47 → 40–41 µs of attention,
// BENCHMARKS.md).
func touchPages[T float32 | uint16](x []T) byte {
	if len(x) == 0 {
		return 0
	}
	b := unsafe.Slice((*byte)(unsafe.Pointer(&x[0])), len(x)*int(unsafe.Sizeof(x[0])))
	var acc byte
	for i := 0; i < len(b); i += pageBytes {
		acc ^= b[i]
	}
	return acc
}

// cachedScores is keyBlockScores over float32 keys, keyBlockScoresBF16 over bfloat16 ones.
func cachedScores[T float32 | uint16](s []float32, lds int, q []float32, ldq int, kb []T, rows, nk, hd int, scale float32) {
	switch kb := any(kb).(type) {
	case []float32:
		keyBlockScores(s, lds, q, ldq, kb, rows, nk, hd, scale)
	case []uint16:
		keyBlockScoresBF16(bf16For(activeKernel()), s, lds, q, ldq, kb, rows, nk, hd, scale)
	}
}

// cachedValues is keyChunksPV over float32 values, valuesBF16 over bfloat16 ones.
func cachedValues[T float32 | uint16](out []float32, ldo int, p []float32, ldp int, v []T, ldv, rows, nk, headDim int) {
	switch v := any(v).(type) {
	case []float32:
		keyChunksPV(out, ldo, p, ldp, v, ldv, rows, nk, headDim)
	case []uint16:
		valuesBF16(bf16For(activeKernel()), out, ldo, p, ldp, v, ldv, rows, nk, headDim)
	}
}

// keyBlockScores writes s = scale·q·Kᵀ for rows query rows over the key blocks that hold nk keys,
// whole blocks at a time (s has rows of lds ≥ roundUpKeys(nk) floats). With few rows it runs
// the NN kernels straight over the blocks, panel by panel, as Sgemm's small-m path would over a
// matrix; otherwise one Sgemm per block.
func keyBlockScores(s []float32, lds int, q []float32, ldq int, kb []float32, rows, nk, hd int, scale float32) {
	kern := activeKernel()
	nn := smallNNFor(kern)
	if nn == nil || !useSmall(rows) || KeyBlock%nn.width != 0 || hd == 0 {
		for j0 := 0; j0 < nk; j0 += KeyBlock {
			Sgemm(false, false, rows, KeyBlock, hd, scale, q, ldq, kb[j0*hd:], KeyBlock, 0, s[j0:], lds)
		}
		return
	}
	checkMatrix("A", rows, hd, q, ldq)
	checkMatrix("C", rows, roundUpKeys(nk), s, lds)
	kc := sliceDepth(hd, kern.kc)
	if rows <= gemvScoreRows && nn.width == KeyBlock && len(nn.gemv) > 0 && gemvOn {
		// The key blocks are packed panels of KeyBlock columns over k = hd (panel b at
		// b·hd·KeyBlock, row d at d·KeyBlock): the gemv kernels read several blocks at once, eight
		// panels' FMA chains in flight instead of one block's few, with the per-panel kernel's
		// arithmetic for every score.
		blocks := roundUpKeys(nk) / KeyBlock
		_ = kb[blocks*hd*KeyBlock-1]
		for r := range rows {
			gemvRun(nn, min(gemvChoice, len(nn.gemv)-1), kb, 0, blocks, hd, kc, KeyBlock, scale, q[r*ldq:], 0, s[r*lds:])
		}
		return
	}
	for j0 := 0; j0 < nk; j0 += nn.width {
		blk := j0 / KeyBlock * KeyBlock
		smallNNPanel(nn, rows, hd, kc, scale, q, ldq, kb[blk*hd+j0-blk:], KeyBlock, 0, s[j0:], lds, false)
	}
}

// keyChunksPV writes out = P·V for rows rows of probabilities over nk keys, summing the keys
// attnKeyChunk at a time from key 0.
func keyChunksPV(out []float32, ldo int, p []float32, ldp int, v []float32, ldv, rows, nk, headDim int) {
	kern := activeKernel()
	nn := smallNNFor(kern)
	for j0 := 0; j0 < nk; j0 += attnKeyChunk {
		var beta float32
		if j0 > 0 {
			beta = 1
		}
		kb := min(attnKeyChunk, nk-j0)
		if nn != nil && useSmall(rows) && 2*float64(rows)*float64(headDim)*float64(kb) < parallelMinFlops {
			// What Sgemm runs for this shape (gemmSmallNN on one goroutine), without its
			// dispatch: a decode step's P·V is a few hundred nanoseconds of arithmetic.
			checkSgemm(false, false, rows, headDim, kb, p[j0:], ldp, v[j0*ldv:], ldv, out, ldo)
			smallNNAsm(nn, 0, headDim, rows, kb, sliceDepth(kb, kern.kc), 1, p[j0:], ldp, v[j0*ldv:], ldv, beta, out, ldo)
			continue
		}
		Sgemm(false, false, rows, headDim, kb, 1, p[j0:], ldp, v[j0*ldv:], ldv, beta, out, ldo)
	}
}

// gemvScoreRows is the most query rows whose scores keyBlockScores computes one row at a time
// on the gemv kernels: a decode step's nRep heads.
const gemvScoreRows = 4

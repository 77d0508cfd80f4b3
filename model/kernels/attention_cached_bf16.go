package kernels

// The bfloat16 KV cache: keys and values rounded to bfloat16 as they are stored, half the bytes
// of the float32 cache, and attended over with the bfloat16 kernels (SgemmBF16's), which widen
// them to float32 in registers: scores, softmax, probabilities and sums stay float32.

// StoreKeyBF16 writes key j (headDim floats), rounded to bfloat16, into kb, the key-block layout
// of AttentionCached (KeyBlock).
func StoreKeyBF16(kb []uint16, j int, key []float32) {
	hd := len(key)
	blk := kb[j/KeyBlock*hd*KeyBlock+j%KeyBlock:]
	_ = blk[(hd-1)*KeyBlock]
	for d, x := range key {
		blk[d*KeyBlock] = BF16FromFloat32(x)
	}
}

// ToBF16 writes dst[i] = src[i] rounded to bfloat16 (a value row of the cache).
func ToBF16(dst []uint16, src []float32) {
	dst = dst[:len(src)]
	for i, x := range src {
		dst[i] = BF16FromFloat32(x)
	}
}

// AttentionCachedBF16 is AttentionCached over keys kb and values v stored in bfloat16 (StoreKeyBF16,
// ToBF16), with its guarantees: each output row gets the same operations however the sequence was
// split into calls, so a prefill gives bit for bit what step-by-step decoding gives. Every score
// is one float32 FMA chain over headDim and every output element one chain over the row's keys in
// order, from key 0 (the probabilities of keys past a row's last visible one are exact zeros and
// add nothing), whatever the number of rows in the call.
func AttentionCachedBF16(out []float32, ldo int, scratch []float32, q []float32, ldq int, kb, v []uint16, ldv int, L, past, nRep, headDim int) {
	attentionCached(out, ldo, scratch, q, ldq, kb, v, ldv, L, past, nRep, headDim, 0)
}

// AttentionCachedBF16Window is AttentionCachedBF16 with sliding-window attention
// (AttentionCachedWindow).
func AttentionCachedBF16Window(out []float32, ldo int, scratch []float32, q []float32, ldq int, kb, v []uint16, ldv int, L, past, nRep, headDim, window int) {
	attentionCached(out, ldo, scratch, q, ldq, kb, v, ldv, L, past, nRep, headDim, window)
}

// keyBlockScoresBF16 writes s = scale·q·Kᵀ for rows query rows over the bfloat16 key blocks that
// hold nk keys, a kernel panel (a divisor of KeyBlock) at a time.
func keyBlockScoresBF16(fam *bf16Family, s []float32, lds int, q []float32, ldq int, kb []uint16, rows, nk, hd int, scale float32) {
	if hd == 0 {
		clear(s[:rows*lds])
		return
	}
	checkMatrix("A", rows, hd, q, ldq)
	checkMatrix("C", rows, roundUpKeys(nk), s, lds)
	width := bf16GoWidth
	if fam != nil {
		width = fam.width
	}
	for j0 := 0; j0 < nk; j0 += width {
		blk := j0 / KeyBlock * KeyBlock
		bf16Panel(fam, rows, hd, scale, q, ldq, kb[blk*hd+j0-blk:], KeyBlock, 0, s[j0:], lds)
	}
}

// valuesBF16 writes out = P·V for rows rows of probabilities over nk keys and headDim columns of
// bfloat16 values (rows ldv apart), read in place: the columns in panels of the family's width,
// then of its narrow family's, the rest on the Go kernel. Which kernel computes a column depends
// on headDim alone, never on the rows or keys of the call.
func valuesBF16(fam *bf16Family, out []float32, ldo int, p []float32, ldp int, v []uint16, ldv, rows, nk, headDim int) {
	checkMatrix("A", rows, nk, p, ldp)
	checkMatrix("C", rows, headDim, out, ldo)
	j := 0
	for f := fam; f != nil; f = f.narrow {
		for ; j+f.width <= headDim; j += f.width {
			bf16Panel(f, rows, nk, 1, p, ldp, v[j:], ldv, 0, out[j:], ldo)
		}
	}
	if j < headDim {
		bf16PanelGo(rows, nk, headDim-j, 1, p, ldp, v[j:], ldv, 0, out[j:], ldo)
	}
}

package kernels

// EmbeddingForward copies row tokens[i] of wte (vocab, c) into row i of out (n, c). Token ids
// must already be checked against the vocabulary by the caller.
func EmbeddingForward(out []float32, tokens []int32, wte []float32, n, c int) {
	for i := 0; i < n; i++ {
		t := int(tokens[i])
		copy(out[i*c:i*c+c], wte[t*c:t*c+c])
	}
}

// EmbeddingBackward adds row i of dout (n, c) into row tokens[i] of dwte. Rows are visited in
// order, so repeated tokens sum in a fixed order and the result is deterministic.
func EmbeddingBackward(dwte, dout []float32, tokens []int32, n, c int) {
	for i := 0; i < n; i++ {
		t := int(tokens[i])
		d := dwte[t*c : t*c+c]
		for j, v := range dout[i*c : i*c+c] {
			d[j] += v
		}
	}
}

// EmbeddingBackwardTokens is EmbeddingBackward for the token ids in [lo, hi) alone, with the
// same sums: callers split the vocabulary among goroutines, each writing its own rows of dwte.
func EmbeddingBackwardTokens(dwte, dout []float32, tokens []int32, n, c int, lo, hi int32) {
	for i, t := range tokens[:n] {
		if t < lo || t >= hi {
			continue
		}
		d := dwte[int(t)*c : int(t)*c+c]
		for j, v := range dout[i*c : i*c+c] {
			d[j] += v
		}
	}
}

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
	EmbeddingBackwardCols(dwte, dout, tokens, n, c, 0, c)
}

// EmbeddingBackwardCols is EmbeddingBackward on columns [j0, j1) alone, with the same sums:
// callers split the columns among goroutines.
func EmbeddingBackwardCols(dwte, dout []float32, tokens []int32, n, c, j0, j1 int) {
	for i := 0; i < n; i++ {
		t := int(tokens[i])
		d := dwte[t*c+j0 : t*c+j1]
		for j, v := range dout[i*c+j0 : i*c+j1] {
			d[j] += v
		}
	}
}

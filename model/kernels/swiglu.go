package kernels

// SwiGLUForward computes out (n, hidden) = silu(gate) ⊙ up (Shazeer 2020) from gu (n, 2·hidden),
// whose rows hold gate then up: the gate_proj and up_proj weights sit next to each other in the
// parameter block, so one GEMM produces both halves. The arithmetic is swigluForwardGo's.
func SwiGLUForward(out, gu []float32, n, hidden int) {
	SwiGLUForwardCols(out, gu, n, hidden, 0, hidden)
}

// SwiGLUForwardCols is SwiGLUForward for the columns [lo, hi) of out alone. Each element's
// arithmetic is the same in every implementation and at every offset (TestSwiGLUMatchesGo), so
// a row cut into column ranges gets SwiGLUForward's bits.
func SwiGLUForwardCols(out, gu []float32, n, hidden, lo, hi int) {
	k := activeElem()
	for r := 0; r < n; r++ {
		g := gu[r*2*hidden+lo : r*2*hidden+hi]
		u := gu[r*2*hidden+hidden+lo : r*2*hidden+hidden+hi]
		k.swigluFwd(out[r*hidden+lo:r*hidden+hi], g, u)
	}
}

// SwiGLUBackwardSet writes into dgu (n, 2·hidden) the gradient of SwiGLUForward given dout
// (n, hidden): SwiGLUBackward's bits on a dgu cleared to zero, without reading dgu.
func SwiGLUBackwardSet(dgu, dout, gu []float32, n, hidden int) {
	swigluBackwardRows(activeElem().swigluBwdSet, dgu, dout, gu, n, hidden)
}

// SwiGLUBackward adds to dgu (n, 2·hidden) the gradient of SwiGLUForward given dout (n, hidden).
// With s = σ(g): d/dg silu(g) = s·(1 + g·(1−s)).
func SwiGLUBackward(dgu, dout, gu []float32, n, hidden int) {
	swigluBackwardRows(activeElem().swigluBwd, dgu, dout, gu, n, hidden)
}

func swigluBackwardRows(f func(dg, du, dy, g, u []float32), dgu, dout, gu []float32, n, hidden int) {
	for r := 0; r < n; r++ {
		g := gu[r*2*hidden : r*2*hidden+hidden]
		u := gu[r*2*hidden+hidden : (r+1)*2*hidden]
		dg := dgu[r*2*hidden : r*2*hidden+hidden]
		du := dgu[r*2*hidden+hidden : (r+1)*2*hidden]
		dy := dout[r*hidden : (r+1)*hidden]
		f(dg, du, dy, g, u)
	}
}

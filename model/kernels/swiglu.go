package kernels

// SwiGLUForward computes out (n, hidden) = silu(gate) ⊙ up (Shazeer 2020) from gu (n, 2·hidden),
// whose rows hold gate then up: the gate_proj and up_proj weights sit next to each other in the
// parameter block, so one GEMM produces both halves.
func SwiGLUForward(out, gu []float32, n, hidden int) {
	for r := 0; r < n; r++ {
		g := gu[r*2*hidden : r*2*hidden+hidden]
		u := gu[r*2*hidden+hidden : (r+1)*2*hidden]
		o := out[r*hidden : (r+1)*hidden]
		for j, gv := range g {
			o[j] = gv / (1 + expf(-gv)) * u[j]
		}
	}
}

// SwiGLUBackward adds to dgu (n, 2·hidden) the gradient of SwiGLUForward given dout (n, hidden).
// With s = σ(g): d/dg silu(g) = s·(1 + g·(1−s)).
func SwiGLUBackward(dgu, dout, gu []float32, n, hidden int) {
	for r := 0; r < n; r++ {
		g := gu[r*2*hidden : r*2*hidden+hidden]
		u := gu[r*2*hidden+hidden : (r+1)*2*hidden]
		dg := dgu[r*2*hidden : r*2*hidden+hidden]
		du := dgu[r*2*hidden+hidden : (r+1)*2*hidden]
		dy := dout[r*hidden : (r+1)*hidden]
		for j, gv := range g {
			s := 1 / (1 + expf(-gv))
			silu := gv * s
			dg[j] += dy[j] * u[j] * s * (1 + gv*(1-s))
			du[j] += dy[j] * silu
		}
	}
}

package kernels

import "math"

// RMSNormForward normalizes each of the n rows of inp (n, c) by its root mean square and scales
// by weight (c): out = inp · rstd · weight with rstd = 1/sqrt(mean(inp²) + eps), as in Llama
// (Zhang & Sennrich 2019). rstd (n) keeps each row's factor for the backward pass; out may not
// alias inp.
func RMSNormForward(out, rstd, inp, weight []float32, n, c int, eps float32) {
	for i := 0; i < n; i++ {
		x := inp[i*c : i*c+c]
		var ss float64
		for _, v := range x {
			ss += float64(v) * float64(v)
		}
		r := float32(1 / math.Sqrt(ss/float64(c)+float64(eps)))
		rstd[i] = r
		o := out[i*c : i*c+c]
		w := weight[:c]
		for j, v := range x {
			o[j] = v * r * w[j]
		}
	}
}

// RMSNormBackward adds to dinp (n, c) and dweight (c) the gradients of RMSNormForward given
// dout. With y = x·r·w and r = (mean(x²)+eps)^(-1/2):
// dx_j = r·w_j·dy_j − x_j·r³/c·Σ_k dy_k·w_k·x_k and dw_j = Σ_rows dy_j·x_j·r.
func RMSNormBackward(dinp, dweight, dout, inp, weight, rstd []float32, n, c int) {
	w := weight[:c]
	dw := dweight[:c]
	for i := 0; i < n; i++ {
		x := inp[i*c : i*c+c]
		dy := dout[i*c : i*c+c]
		dx := dinp[i*c : i*c+c]
		r := rstd[i]
		var dot float64
		for j, v := range x {
			dot += float64(dy[j]) * float64(w[j]) * float64(v)
		}
		k := float32(dot) * r * r * r / float32(c)
		for j, v := range x {
			dx[j] += r*w[j]*dy[j] - v*k
			dw[j] += dy[j] * v * r
		}
	}
}

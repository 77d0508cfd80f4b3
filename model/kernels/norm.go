package kernels

import "math"

// normRows is how many rows the norms' sums take side by side (the elementwise kernels'
// sumSquares8 and normDots8). Each row's sum still adds its terms one after another in index
// order, which fixes its bits; rows side by side keep that many independent chains of dependent
// adds in flight, where one row alone waits on each add's latency.
const normRows = 8

// RMSNormForward normalizes each of the n rows of inp (n, c) by its root mean square and scales
// by weight (c): out = inp · rstd · weight with rstd = 1/sqrt(mean(inp²) + eps), as in Llama
// (Zhang & Sennrich 2019). rstd (n) keeps each row's factor for the backward pass; out may not
// alias inp. A row's mean square is summed in float64 in index order, so a row gets the same
// bits whichever rows share the call.
func RMSNormForward(out, rstd, inp, weight []float32, n, c int, eps float32) {
	ek := activeElem()
	w := weight[:c]
	// The sums of a last group of fewer than normRows rows stay on the stack; a full group's go
	// through sumSquares8, a func value, which moves them to the heap: allocated only when a
	// call has a full group, so that a decode step of few rows allocates nothing.
	var tail [normRows]float64
	var full *[normRows]float64
	for i0 := 0; i0 < n; i0 += normRows {
		rows := min(normRows, n-i0)
		ss := tail[:rows]
		if x := inp[i0*c : (i0+rows)*c]; rows == normRows {
			if full == nil {
				full = new([normRows]float64)
			}
			ek.sumSquares8(full, x, c)
			ss = full[:]
		} else {
			sumSquaresGo(ss, x, c)
		}
		for r, s := range ss {
			i := i0 + r
			f := float32(1 / math.Sqrt(s/float64(c)+float64(eps)))
			rstd[i] = f
			ek.rmsScale(out[i*c:i*c+c], inp[i*c:i*c+c], w, f)
		}
	}
}

// sumSquaresGo sets ss[r] to the sum of float64(v)² over row r of x (len(ss) rows of c), added
// in index order, four rows side by side.
func sumSquaresGo(ss []float64, x []float32, c int) {
	for len(ss) >= 4 {
		sumSquares4(ss[:4], x[:4*c], c)
		ss, x = ss[4:], x[4*c:]
	}
	for r := range ss {
		var s float64
		for _, v := range x[r*c : r*c+c] {
			s += float64(v) * float64(v)
		}
		ss[r] = s
	}
}

func sumSquares4(ss []float64, x []float32, c int) {
	x0, x1, x2, x3 := x[:c], x[c:2*c], x[2*c:3*c], x[3*c:4*c]
	var s0, s1, s2, s3 float64
	for j, v := range x0 {
		v1, v2, v3 := x1[j], x2[j], x3[j]
		s0 += float64(v) * float64(v)
		s1 += float64(v1) * float64(v1)
		s2 += float64(v2) * float64(v2)
		s3 += float64(v3) * float64(v3)
	}
	ss[0], ss[1], ss[2], ss[3] = s0, s1, s2, s3
}

// RMSNormBackward adds to dinp (n, c) and dweight (c) the gradients of RMSNormForward given
// dout. With y = x·r·w and r = (mean(x²)+eps)^(-1/2):
// dx_j = r·w_j·dy_j − x_j·r³/c·Σ_k dy_k·w_k·x_k and dw_j = Σ_rows dy_j·x_j·r.
// The Σ_k of a row is summed in float64 in index order and the rows add into dweight in order,
// so the bits do not depend on how the rows are grouped.
func RMSNormBackward(dinp, dweight, dout, inp, weight, rstd []float32, n, c int) {
	ek := activeElem()
	w := weight[:c]
	dw := dweight[:c]
	var dots [normRows]float64
	for i0 := 0; i0 < n; i0 += normRows {
		rows := min(normRows, n-i0)
		if dy, x := dout[i0*c:(i0+rows)*c], inp[i0*c:(i0+rows)*c]; rows == normRows {
			ek.normDots8(&dots, dy, x, w)
		} else {
			normDotsGo(dots[:rows], dy, x, w)
		}
		for r, dot := range dots[:rows] {
			i := i0 + r
			f := rstd[i]
			k := float32(dot) * f * f * f / float32(c)
			ek.rmsBackward(dinp[i*c:i*c+c], dw, dout[i*c:i*c+c], inp[i*c:i*c+c], w, f, k)
		}
	}
}

// normDotsGo sets dots[r] to the sum of float64(dy)·float64(w)·float64(x) over row r of dy
// and x (len(dots) rows of len(w)), added in index order, four rows side by side.
func normDotsGo(dots []float64, dy, x, w []float32) {
	c := len(w)
	for len(dots) >= 4 {
		normDots4(dots[:4], dy[:4*c], x[:4*c], w)
		dots, dy, x = dots[4:], dy[4*c:], x[4*c:]
	}
	for r := range dots {
		var d float64
		xr := x[r*c : r*c+c]
		for j, v := range dy[r*c : r*c+c] {
			d += float64(v) * float64(w[j]) * float64(xr[j])
		}
		dots[r] = d
	}
}

func normDots4(dots []float64, dy, x, w []float32) {
	c := len(w)
	y0, y1, y2, y3 := dy[:c], dy[c:2*c], dy[2*c:3*c], dy[3*c:4*c]
	x0, x1, x2, x3 := x[:c], x[c:2*c], x[2*c:3*c], x[3*c:4*c]
	var d0, d1, d2, d3 float64
	for j, wj := range w {
		wf := float64(wj)
		d0 += float64(y0[j]) * wf * float64(x0[j])
		d1 += float64(y1[j]) * wf * float64(x1[j])
		d2 += float64(y2[j]) * wf * float64(x2[j])
		d3 += float64(y3[j]) * wf * float64(x3[j])
	}
	dots[0], dots[1], dots[2], dots[3] = d0, d1, d2, d3
}

package kernels

import "math"

// Elementwise kernels around expf: the exponentials of softmax and the SiLU of SwiGLU; and the
// row work of RMSNorm and RoPE (norm.go, rope.go). Each has a portable Go body, which defines the
// result bit for bit, and vector versions in elem_amd64.s that give the same bits (elem_test.go,
// norm_test.go and rope_test.go check every element of a sweep), so the model computes the same
// numbers whichever path runs and however a row lines up in memory.

// expSumLanes is how many partial sums expSum keeps. Element i of a row adds into partial sum
// i mod expSumLanes; the partial sums are then added pairwise (l += l+8, l += l+4, l += l+2,
// l += l+1). The order depends only on the row's length and indexes, never on its address, so
// a softmax row summed while decoding equals the same row summed in a prefill.
const expSumLanes = 16

// expSumGo writes dst[i] = expf(src[i] − shift) and returns their sum in expSum's order.
// dst may be src.
func expSumGo(dst, src []float32, shift float32) float32 {
	dst = dst[:len(src)]
	var acc [expSumLanes]float32
	for i, x := range src {
		e := expf(x - shift)
		dst[i] = e
		acc[i%expSumLanes] += e
	}
	for w := expSumLanes / 2; w >= 1; w /= 2 {
		for l := 0; l < w; l++ {
			acc[l] += acc[l+w]
		}
	}
	return acc[0]
}

// swigluForwardGo writes out[j] = silu(g[j])·u[j] with silu(x) = x/(1 + e^−x).
func swigluForwardGo(out, g, u []float32) {
	out, u = out[:len(g)], u[:len(g)]
	for j, gv := range g {
		out[j] = gv / (1 + expf(-gv)) * u[j]
	}
}

// swigluBackwardGo adds to dg and du the gradient of swigluForwardGo given dy. With s = σ(g):
// d/dg silu(g) = s·(1 + g·(1−s)). The conversions keep products apart from the sums they feed,
// as in expf, so that the vector kernels can match them.
func swigluBackwardGo(dg, du, dy, g, u []float32) {
	dg, du, dy, u = dg[:len(g)], du[:len(g)], dy[:len(g)], u[:len(g)]
	for j, gv := range g {
		s := 1 / (1 + expf(-gv))
		silu := gv * s
		dg[j] += float32(dy[j] * u[j] * s * (1 + float32(gv*(1-s))))
		du[j] += float32(dy[j] * silu)
	}
}

// swigluBackwardSetGo sets dg and du to the gradient swigluBackwardGo adds, added to +0.
func swigluBackwardSetGo(dg, du, dy, g, u []float32) {
	clear(dg[:len(g)])
	clear(du[:len(g)])
	swigluBackwardGo(dg, du, dy, g, u)
}

// maxGo returns the largest element of a non-empty x with Go's max: NaN if any is NaN.
func maxGo(x []float32) float32 {
	m := x[0]
	for _, v := range x[1:] {
		m = max(m, v)
	}
	return m
}

// scaleGo multiplies x by a.
func scaleGo(x []float32, a float32) {
	for i := range x {
		x[i] *= a
	}
}

// elemKernel is one implementation of the elementwise kernels; all of them give the same bits.
type elemKernel struct {
	name      string
	expSum    func(dst, src []float32, shift float32) float32
	swigluFwd func(out, g, u []float32)
	swigluBwd func(dg, du, dy, g, u []float32)
	// swigluBwdSet is swigluBackwardSetGo: swigluBwd over dg and du cleared to +0, without
	// reading them.
	swigluBwdSet func(dg, du, dy, g, u []float32)
	// max is maxGo, except that where the largest element is zero its sign may differ (no
	// caller can tell: x − (+0) and x − (−0) have the same exponential).
	max   func(x []float32) float32
	scale func(x []float32, a float32)
	// read returns the sum of x in an unspecified order, reading x as fast as it can: the
	// kernel of ReadBandwidth.
	read        func(x []float32) float32
	softmaxGrad func(p, ds []float32, shift, d, scale float32)
	expMoments  func(x []float32, shift float32) (s, sz float64)
	rmsScale    func(out, x, w []float32, r float32)
	rmsBackward func(dx, dw, dy, x, w []float32, r, k float32)
	// sumSquares8 and normDots8 are the norms' row sums over normRows rows at once
	// (sumSquaresGo, normDotsGo).
	sumSquares8 func(ss *[normRows]float64, x []float32, c int)
	normDots8   func(dots *[normRows]float64, dy, x, w []float32)
	// rope is ropeGo, except that on amd64 only: Go compilers for other architectures may fuse
	// ropeGo's products into its adds.
	rope func(x []float32, ld int, pos []int32, cos, sin []float32, n, nHead, headDim int, inverse bool)
	// adamW is adamWGo, on amd64 only for the same reason as rope.
	adamW func(p, g, m, v []float32, k *adamWConsts)
}

var goElem = elemKernel{name: "go", expSum: expSumGo, swigluFwd: swigluForwardGo, swigluBwd: swigluBackwardGo,
	swigluBwdSet: swigluBackwardSetGo,
	max:          maxGo, scale: scaleGo, read: readGo, softmaxGrad: softmaxGradGo, expMoments: expMomentsGo,
	rmsScale: rmsScaleGo, rmsBackward: rmsBackwardGo,
	sumSquares8: func(ss *[normRows]float64, x []float32, c int) { sumSquaresGo(ss[:], x, c) },
	normDots8:   func(dots *[normRows]float64, dy, x, w []float32) { normDotsGo(dots[:], dy, x, w) },
	rope:        ropeGo, adamW: adamWGo}

// expMomentLanes is how many float64 partial sums expMomentsGo keeps: element i adds into lane
// i mod expMomentLanes, and the lanes are then added pairwise (l += l+4, l += l+2, l += l+1).
const expMomentLanes = 8

// expMomentsGo returns s = Σ e_i and sz = Σ e_i·d_i in float64, with d_i = x[i] − shift (in
// float32) and e_i = expf(d_i): the log-sum-exp and entropy sums of an LM-head row
// (LogprobEntropyForward). The product of two float32 is exact in float64, so only the adds
// round, in the order above.
func expMomentsGo(x []float32, shift float32) (s, sz float64) {
	var a, b [expMomentLanes]float64
	for i, v := range x {
		d := v - shift
		e := float64(expf(d))
		a[i%expMomentLanes] += e
		b[i%expMomentLanes] += e * float64(d)
	}
	for w := expMomentLanes / 2; w >= 1; w /= 2 {
		for l := 0; l < w; l++ {
			a[l] += a[l+w]
			b[l] += b[l+w]
		}
	}
	return a[0], b[0]
}

// softmaxGradGo is the backward of attention's softmax on one row (AttentionBackward's fused
// path): given the row's scores in p and the gradient of its probabilities in ds, it writes the
// probabilities p[j] = expf(p[j] − shift), shift being the row's log-sum-exp, and the gradient
// of the scaled scores ds[j] = p[j]·(ds[j] − d)·scale, d = Σ_j p_j·dp_j. One pass instead of an
// exponential pass and a scalar one.
func softmaxGradGo(p, ds []float32, shift, d, scale float32) {
	ds = ds[:len(p)]
	for j, x := range p {
		e := expf(x - shift)
		p[j] = e
		ds[j] = float32(e*(ds[j]-d)) * scale
	}
}

// rmsScaleGo writes out[j] = x[j]·r·w[j]: RMSNormForward's scaling of a row by its r.
func rmsScaleGo(out, x, w []float32, r float32) {
	out, w = out[:len(x)], w[:len(x)]
	for j, v := range x {
		out[j] = v * r * w[j]
	}
}

// rmsBackwardGo is RMSNormBackward's update of one row, given its r and
// k = (Σ dy·w·x)·r³/c: dx[j] += r·w[j]·dy[j] − x[j]·k and dw[j] += dy[j]·x[j]·r. The
// conversions keep every product apart from the add or subtract it feeds (no FMA on any
// architecture), as the vector kernels compute it.
func rmsBackwardGo(dx, dw, dy, x, w []float32, r, k float32) {
	dx, dw, dy, w = dx[:len(x)], dw[:len(x)], dy[:len(x)], w[:len(x)]
	for j, v := range x {
		dx[j] += float32(r*w[j]*dy[j]) - float32(v*k)
		dw[j] += float32(dy[j] * v * r)
	}
}

// adamWConsts are the scalars of one AdamW update (AdamW), in the order the assembly kernels
// read them.
type adamWConsts struct {
	beta1, oneMinusBeta1, beta2, oneMinusBeta2 float32
	decay, step, invBC2, eps                   float32
}

// adamWGo applies one AdamW update to p, m and v given g (kernels.AdamW).
func adamWGo(p, g, m, v []float32, k *adamWConsts) {
	n := len(p)
	g, m, v = g[:n], m[:n], v[:n]
	for i, pi := range p {
		gi := g[i]
		mi := k.beta1*m[i] + k.oneMinusBeta1*gi
		vi := k.beta2*v[i] + k.oneMinusBeta2*gi*gi
		m[i] = mi
		v[i] = vi
		p[i] = pi*k.decay - k.step*mi/(float32(math.Sqrt(float64(vi*k.invBC2)))+k.eps)
	}
}

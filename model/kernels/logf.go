package kernels

import "math"

// The constants of logf (Cephes logf.c).
const (
	logSqrtHalf = 0.707106781186547524
	logC0       = 7.0376836292e-2
	logC1       = -1.1514610310e-1
	logC2       = 1.1676998740e-1
	logC3       = -1.2420140846e-1
	logC4       = 1.4249322787e-1
	logC5       = -1.6668057665e-1
	logC6       = 2.0000714765e-1
	logC7       = -2.4999993993e-1
	logC8       = 3.3333331174e-1
)

// logf returns ln x in float32 precision. The fused attention forward takes one per query row
// and head for the row's log-sum-exp, and math.Log there cost 8% of the attention of heads of
// 16 dimensions. The Cephes logf scheme: x = m·2^e with √½ ≤ m < √2, a degree-9 polynomial in
// m − 1, and e·ln2 added in two parts (expf's constants); relative error below 2e-7
// (TestLogf). Every product is rounded before the add that follows it, as in expf, so the bits
// are the same on every platform. Zero, negative, subnormal and non-finite inputs go to
// math.Log.
func logf(x float32) float32 {
	bits := math.Float32bits(x)
	if bits-0x00800000 >= 0x7f800000-0x00800000 {
		// Not a positive normal number: zero, subnormal, negative, infinite or NaN.
		return float32(math.Log(float64(x)))
	}
	e := int32(bits>>23) - 126
	m := math.Float32frombits(bits&0x007fffff | 0x3f000000) // in [0.5, 1)
	if m < logSqrtHalf {
		e--
		m = m + m - 1
	} else {
		m--
	}
	z := float32(m * m)
	p := float32(logC0)
	p = float32(p*m) + logC1
	p = float32(p*m) + logC2
	p = float32(p*m) + logC3
	p = float32(p*m) + logC4
	p = float32(p*m) + logC5
	p = float32(p*m) + logC6
	p = float32(p*m) + logC7
	p = float32(p*m) + logC8
	y := float32(float32(p*m) * z)
	fe := float32(e)
	y += float32(fe * expLn2Lo)
	y -= float32(0.5 * z)
	return float32(m+y) + float32(fe*expLn2Hi)
}

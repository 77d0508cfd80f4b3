package kernels

import "math"

// expf returns e^x in float32 precision. The softmax in attention and in the LM head and the
// SiLU in the MLP call it millions of times per training step; math.Exp works in float64 and
// guards every special case, which made it the largest non-GEMM cost. This is the Cephes expf
// scheme: x = n·ln2 + r with |r| ≤ ln2/2, a degree-6 polynomial for e^r, and n added to the
// exponent bits. Relative error stays below 2e-7 over the whole range (see TestExpf).
func expf(x float32) float32 {
	const (
		ln2Hi = 0.693359375
		ln2Lo = -2.12194440e-4
		log2e = 1.44269504088896341
	)
	if x > 88.3762626647949 {
		return float32(math.Inf(1))
	}
	if x < -87.3365447505531 {
		// Below the smallest normal float32 result: flush to zero, as softmax wants.
		return 0
	}
	if x != x {
		return x
	}
	n := float32(math.Floor(float64(x*log2e + 0.5)))
	r := x - n*ln2Hi
	r -= n * ln2Lo
	p := float32(1.9875691500e-4)
	p = p*r + 1.3981999507e-3
	p = p*r + 8.3334519073e-3
	p = p*r + 4.1665795894e-2
	p = p*r + 1.6666665459e-1
	p = p*r + 5.0000001201e-1
	y := p*r*r + r + 1
	return math.Float32frombits(math.Float32bits(y) + uint32(int32(n))<<23)
}

package kernels

import "math"

// The constants of expf, shared with the SIMD kernels (internal/elemgen writes the same values
// into elem_amd64.s; TestExpVecMatchesScalar holds the two to each other bit for bit).
const (
	expLn2Hi = 0.693359375
	expLn2Lo = -2.12194440e-4
	expLog2e = 1.44269504088896341
	// expHi is the largest x with a finite e^x; expLo is ln of the smallest normal float32.
	expHi = 88.3762626647949
	expLo = -87.3365447505531
	expC0 = 1.9875691500e-4
	expC1 = 1.3981999507e-3
	expC2 = 8.3334519073e-3
	expC3 = 4.1665795894e-2
	expC4 = 1.6666665459e-1
	expC5 = 5.0000001201e-1
)

// expf returns e^x in float32 precision. The softmax in attention and in the LM head and the
// SiLU in the MLP call it millions of times per training step; math.Exp works in float64 and
// guards every special case, which made it the largest non-GEMM cost. This is the Cephes expf
// scheme: x = n·ln2 + r with |r| ≤ ln2/2, a degree-6 polynomial for e^r, and n added to the
// exponent bits. Relative error stays below 2e-7 over the whole range (see TestExpf).
//
// Every product is rounded to float32 before it is added (the explicit conversions forbid the
// compiler to fuse a multiply and an add), so expf gives the same bits on every platform and
// GOAMD64 level, and the vector kernels of elem_amd64.s (VMULPS then VADDPS, lane for lane)
// reproduce it exactly.
func expf(x float32) float32 {
	if x > expHi {
		return float32(math.Inf(1))
	}
	if x < expLo {
		// Below the smallest normal float32 result: flush to zero, as softmax wants.
		return 0
	}
	if x != x {
		return x
	}
	n := float32(math.Floor(float64(float32(x*expLog2e) + 0.5)))
	r := x - float32(n*expLn2Hi)
	r -= float32(n * expLn2Lo)
	p := float32(expC0)
	p = float32(p*r) + expC1
	p = float32(p*r) + expC2
	p = float32(p*r) + expC3
	p = float32(p*r) + expC4
	p = float32(p*r) + expC5
	y := float32(float32(p*r)*r) + r + 1
	return math.Float32frombits(math.Float32bits(y) + uint32(int32(n))<<23)
}

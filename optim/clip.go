package optim

import "math"

// GradNorm is the global L2 norm of grads, summed in float64 so that millions of small squares
// do not lose their tail.
func GradNorm(grads []float32) float32 {
	var s float64
	for _, g := range grads {
		s += float64(g) * float64(g)
	}
	return float32(math.Sqrt(s))
}

// ClipGradNorm scales grads so that their global L2 norm is at most maxNorm and returns the norm
// before clipping, the number worth logging. maxNorm ≤ 0 disables clipping. A non-finite norm is
// returned as is and the gradients are left alone, so the caller sees it and can skip the step.
func ClipGradNorm(grads []float32, maxNorm float32) float32 {
	norm := GradNorm(grads)
	if maxNorm <= 0 || norm <= maxNorm || math.IsNaN(float64(norm)) || math.IsInf(float64(norm), 0) {
		return norm
	}
	scale := maxNorm / (norm + 1e-6)
	for i := range grads {
		grads[i] *= scale
	}
	return norm
}

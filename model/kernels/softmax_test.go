package kernels

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestLogprobEntropyBackwardWithoutEntropy: rows whose entropy gradient is zero take the vector
// path, which must give the general loop's values: −dl·p, plus dl at the target.
func TestLogprobEntropyBackwardWithoutEntropy(t *testing.T) {
	const n, vocab = 5, 300
	rng := rand.New(rand.NewPCG(13, 13))
	z := randSlice(rng, n*vocab, 6)
	targets := []int32{0, 299, 17, 150, 3}
	lp, h, lse := make([]float32, n), make([]float32, n), make([]float32, n)
	LogprobEntropyForward(lp, h, lse, z, targets, n, vocab)
	dlp := randSlice(rng, n, 1)
	dlp[2] = 0
	for _, ek := range availableElemKernels() {
		withElem(t, ek)
		dz := make([]float32, len(z))
		LogprobEntropyBackward(dz, z, lse, h, targets, dlp, make([]float32, n), n, vocab)
		for i := 0; i < n; i++ {
			for j := 0; j < vocab; j++ {
				p := expf(z[i*vocab+j] - lse[i])
				want := -dlp[i] * p
				if int32(j) == targets[i] {
					want += dlp[i]
				}
				if got := dz[i*vocab+j]; got != want {
					t.Fatalf("%s row %d col %d: dz = %v, want %v", ek.name, i, j, got, want)
				}
			}
		}
		// The gradient of the logprob alone is 1 − p at the target and −p elsewhere: a row sums to 0.
		for i := 0; i < n; i++ {
			var s float64
			for _, v := range dz[i*vocab : (i+1)*vocab] {
				s += float64(v)
			}
			if math.Abs(s) > 1e-5 {
				t.Fatalf("%s row %d: dz sums to %v", ek.name, i, s)
			}
		}
	}
}

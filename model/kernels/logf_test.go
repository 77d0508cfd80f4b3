package kernels

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestLogf holds logf to math.Log: within 2e-7 relative (plus 1e-7 absolute, where ln x crosses
// zero near 1) over the positive normal floats, the sums of softmax rows among them, and equal
// to it on the inputs it hands to math.Log.
func TestLogf(t *testing.T) {
	check := func(x float32) {
		t.Helper()
		got, want := float64(logf(x)), math.Log(float64(x))
		if !(math.Abs(got-want) <= 2e-7*math.Abs(want)+1e-7) {
			t.Fatalf("logf(%g) = %g, want %g", x, got, want)
		}
	}
	rng := rand.New(rand.NewPCG(3, 3))
	for range 200000 {
		check(math.Float32frombits(0x00800000 + rng.Uint32N(0x7f800000-0x00800000)))
	}
	for i := 1; i <= 4096; i++ { // a softmax row's sum lies in [1, its length]
		check(float32(i))
		check(float32(i) + rng.Float32())
	}
	for _, x := range []float32{1, 2, 0.5, 1 + 1.2e-7, 1 - 6e-8, 0.70710677, 0.7071068, 1.4142135, 1.4142137,
		math.MaxFloat32, math.Float32frombits(0x00800000)} {
		check(x)
	}
	for _, x := range []float32{0, -1, float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), math.SmallestNonzeroFloat32} {
		got, want := logf(x), float32(math.Log(float64(x)))
		if math.Float32bits(got) != math.Float32bits(want) && !(got != got && want != want) {
			t.Fatalf("logf(%g) = %g, want %g", x, got, want)
		}
	}
}

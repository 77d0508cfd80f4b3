package kernels

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestAdamWMatchesFloat64 runs several steps against the update rule written out in float64.
func TestAdamWMatchesFloat64(t *testing.T) {
	for _, wd := range []float32{0, 0.1} {
		rng := rand.New(rand.NewPCG(9, 9))
		const n = 37
		p := randSlice(rng, n, 1)
		m := make([]float32, n)
		v := make([]float32, n)
		rp := make([]float64, n)
		rm := make([]float64, n)
		rv := make([]float64, n)
		for i := range p {
			rp[i] = float64(p[i])
		}
		const lr, b1, b2, eps = 1e-2, 0.9, 0.95, 1e-8
		for step := 1; step <= 5; step++ {
			g := randSlice(rng, n, 1)
			bc1 := 1 - math.Pow(b1, float64(step))
			bc2 := 1 - math.Pow(b2, float64(step))
			AdamW(p, g, m, v, lr, b1, b2, eps, wd, float32(bc1), float32(bc2))
			for i := range rp {
				gi := float64(g[i])
				rm[i] = b1*rm[i] + (1-b1)*gi
				rv[i] = b2*rv[i] + (1-b2)*gi*gi
				rp[i] = rp[i]*(1-lr*float64(wd)) - lr*(rm[i]/bc1)/(math.Sqrt(rv[i]/bc2)+eps)
			}
		}
		for i := range rp {
			if math.Abs(float64(p[i])-rp[i]) > 1e-5 {
				t.Fatalf("wd=%v: p[%d] = %v, want %v", wd, i, p[i], rp[i])
			}
		}
	}
}

// TestAdamWKernelsMatchGo: every elementwise kernel's update gives adamWGo's bits, for lengths
// around the 16-float blocks (masked tails), zero and special gradients, with and without decay.
func TestAdamWKernelsMatchGo(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 21))
	specials := specialInputs()
	for _, kern := range availableElemKernels() {
		for n := 0; n <= 70; n++ {
			p, g := randSlice(rng, n, 2), randSlice(rng, n, 1)
			m, v := randSlice(rng, n, 0.1), randSlice(rng, n, 0.01)
			for i := range g {
				switch rng.IntN(6) {
				case 0:
					g[i] = specials[rng.IntN(len(specials))]
				case 1:
					g[i] = 0
				}
				v[i] = v[i] * v[i] // a second moment is not negative
			}
			k := adamWConsts{beta1: 0.9, oneMinusBeta1: 1 - 0.9, beta2: 0.95, oneMinusBeta2: 1 - 0.95,
				decay: 1 - 1e-3*float32(n%2)*0.1, step: 1e-3 / rng.Float32(), invBC2: 1 / rng.Float32(), eps: 1e-8}
			wp, wm, wv := append([]float32(nil), p...), append([]float32(nil), m...), append([]float32(nil), v...)
			adamWGo(wp, g, wm, wv, &k)
			kern.adamW(p, g, m, v, &k)
			for _, c := range []struct {
				name      string
				got, want []float32
			}{{"p", p, wp}, {"m", m, wm}, {"v", v, wv}} {
				if i := sameBits(c.got, c.want); i >= 0 {
					t.Fatalf("%s n=%d: %s[%d] = %v, want %v (g %v)", kern.name, n, c.name, i, c.got[i], c.want[i], g[i])
				}
			}
		}
	}
}

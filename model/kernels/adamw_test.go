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

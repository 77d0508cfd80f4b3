package model

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestModelGradient checks Backward against finite differences of the whole model, tensor by
// tensor, along a random direction within each tensor: the loss is Σ a·logprob + b·entropy with
// random a and b, the shape of every policy-gradient loss. Weights are drawn larger than at
// initialization so every nonlinearity is exercised away from its linear regime. The batch packs
// sequences of different lengths, so a gradient leaking across sequences shows up as a mismatch.
func TestModelGradient(t *testing.T) {
	for _, tied := range []bool{true, false} {
		m := newTestModel(t, tinyConfig(tied), 1)
		rng := rand.New(rand.NewPCG(2, 2))
		for _, tn := range m.Params.Tensors() {
			if len(tn.Shape) == 2 {
				for i := range tn.Data {
					tn.Data[i] = float32(rng.NormFloat64() * 0.3)
				}
			} else {
				for i := range tn.Data {
					tn.Data[i] = 1 + float32(rng.NormFloat64()*0.2)
				}
			}
		}
		b := packedBatch(t, 8, randTokens(rng, 3, 13), randTokens(rng, 5, 13), randTokens(rng, 8, 13), randTokens(rng, 2, 13))
		n := b.Rows * b.T
		a, bb := make([]float32, n), make([]float32, n)
		for i := range a {
			a[i] = rng.Float32()*2 - 1
			bb[i] = rng.Float32()*2 - 1
		}
		loss := func() float64 {
			lp, ent := forward(t, m, b)
			var s float64
			for i := range lp {
				s += float64(a[i])*float64(lp[i]) + float64(bb[i])*float64(ent[i])
			}
			return s
		}
		loss()
		m.ZeroGrad()
		if err := m.Backward(b, a, bb); err != nil {
			t.Fatal(err)
		}
		grads := m.Grads.Tensors()
		for k, tn := range m.Params.Tensors() {
			dir := make([]float32, len(tn.Data))
			var analytic float64
			for i := range dir {
				dir[i] = rng.Float32()*2 - 1
				analytic += float64(dir[i]) * float64(grads[k].Data[i])
			}
			orig := append([]float32(nil), tn.Data...)
			const eps = 2e-3
			step := func(s float32) float64 {
				for i := range tn.Data {
					tn.Data[i] = orig[i] + s*dir[i]
				}
				return loss()
			}
			num := (step(eps) - step(-eps)) / (2 * eps)
			copy(tn.Data, orig)
			if math.Abs(num-analytic) > 2e-3+2e-2*math.Abs(num) {
				t.Errorf("tied=%v %s: directional derivative analytic %.6g, numeric %.6g", tied, tn.Name, analytic, num)
			}
		}
	}
}

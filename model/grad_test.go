package model

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
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
		a, bb, loss := policyLoss(t, m, b, rng)
		loss()
		m.ZeroGrad()
		if err := m.Backward(b, a, bb); err != nil {
			t.Fatal(err)
		}
		checkDirectionalDerivatives(t, rng, m.Params.Tensors(), m.Grads.Tensors(), loss, false, fmt.Sprintf("tied=%v ", tied))
	}
}

// TestValueHeadGradient is TestModelGradient for a loss that also reads the value head: Σ a·logprob
// + b·entropy + c·V. Every tensor is checked, the value head's and the trunk's alike, so the
// critic's gradient is shown to reach the shared trunk (final norm, blocks, embedding) as well as
// the head. The head gets random weights: at its zero initialization no value gradient would
// reach the trunk.
func TestValueHeadGradient(t *testing.T) {
	for _, tied := range []bool{true, false} {
		m := newTestModel(t, tinyConfig(tied), 3)
		m.AddValueHead()
		rng := rand.New(rand.NewPCG(4, 4))
		for _, tn := range m.Params.Tensors() {
			for i := range tn.Data {
				if len(tn.Shape) == 2 {
					tn.Data[i] = float32(rng.NormFloat64() * 0.3)
				} else {
					tn.Data[i] = 1 + float32(rng.NormFloat64()*0.2)
				}
			}
		}
		b := packedBatch(t, 8, randTokens(rng, 3, 13), randTokens(rng, 5, 13), randTokens(rng, 8, 13), randTokens(rng, 2, 13))
		n := b.Rows * b.T
		a, bb, cc := make([]float32, n), make([]float32, n), make([]float32, n)
		for i := range a {
			a[i] = rng.Float32()*2 - 1
			bb[i] = rng.Float32()*2 - 1
			cc[i] = rng.Float32()*2 - 1
		}
		lp, ent, val := make([]float32, n), make([]float32, n), make([]float32, n)
		loss := func() float64 {
			if err := m.ForwardValues(b, lp, ent, val); err != nil {
				t.Fatal(err)
			}
			var s float64
			for i := range lp {
				s += float64(a[i])*float64(lp[i]) + float64(bb[i])*float64(ent[i]) + float64(cc[i])*float64(val[i])
			}
			return s
		}
		loss()
		for i, tg := range b.Targets {
			if tg < 0 && val[i] != 0 {
				t.Fatalf("position %d has no target but value %v", i, val[i])
			}
		}
		m.ZeroGrad()
		if err := m.BackwardValues(b, a, bb, cc); err != nil {
			t.Fatal(err)
		}
		full := append([]float32(nil), m.Grads.Data...)
		seen := 0
		for _, tn := range m.Params.Tensors() {
			if tn.ValueHead() {
				seen++
			}
		}
		checkDirectionalDerivatives(t, rng, m.Params.Tensors(), m.Grads.Tensors(), loss, false, fmt.Sprintf("tied=%v ", tied))
		if seen != 2 {
			t.Fatalf("%d value head tensors, want 2", seen)
		}

		// With dV = 0 the gradient is Backward's, bit for bit; with the random dV it differs down
		// to the embedding (the critic trains through the shared trunk).
		loss()
		m.ZeroGrad()
		if err := m.BackwardValues(b, a, bb, make([]float32, n)); err != nil {
			t.Fatal(err)
		}
		without := append([]float32(nil), m.Grads.Data...)
		loss()
		m.ZeroGrad()
		if err := m.Backward(b, a, bb); err != nil {
			t.Fatal(err)
		}
		for i, g := range m.Grads.Data {
			if g != without[i] {
				t.Fatalf("tied=%v: BackwardValues with zero dValues differs from Backward at weight %d", tied, i)
			}
		}
		embed := len(m.Params.Embed) // the first tensor
		if slices.Equal(m.Grads.Data[:embed], full[:embed]) {
			t.Fatalf("tied=%v: the values' gradient does not reach the embedding", tied)
		}
	}
}

// A value head leaves logprobs and entropies as they were, starts at zero, survives Clone, and
// CopyWeightsFrom copies it only between models that both have one.
func TestValueHeadLayout(t *testing.T) {
	m := newTestModel(t, tinyConfig(true), 5)
	rng := rand.New(rand.NewPCG(6, 6))
	b := packedBatch(t, 8, randTokens(rng, 5, 13), randTokens(rng, 7, 13))
	lp0, ent0 := forward(t, m, b)
	before := append([]float32(nil), m.Params.Data...)
	n0 := m.NumParams()
	m.AddValueHead()
	if !m.HasValueHead() || m.NumParams() != n0+m.Cfg.Dim+1 {
		t.Fatalf("after AddValueHead: has %v, %d parameters (was %d)", m.HasValueHead(), m.NumParams(), n0)
	}
	for i, v := range before {
		if m.Params.Data[i] != v {
			t.Fatalf("AddValueHead moved weight %d", i)
		}
	}
	n := b.Rows * b.T
	lp, ent, val := make([]float32, n), make([]float32, n), make([]float32, n)
	if err := m.ForwardValues(b, lp, ent, val); err != nil {
		t.Fatal(err)
	}
	for i := range lp {
		if lp[i] != lp0[i] || ent[i] != ent0[i] || val[i] != 0 {
			t.Fatalf("position %d: logprob %v entropy %v value %v, want %v %v 0", i, lp[i], ent[i], val[i], lp0[i], ent0[i])
		}
	}
	for i := range m.Params.Value {
		m.Params.Value[i] = float32(i + 1)
	}
	m.Params.ValueBias[0] = 0.5
	c := m.Clone()
	if !c.HasValueHead() || c.Params.ValueBias[0] != 0.5 || c.Params.Value[3] != 4 {
		t.Fatal("Clone lost the value head")
	}
	plain := newTestModel(t, tinyConfig(true), 7)
	if err := plain.CopyWeightsFrom(m); err != nil || plain.HasValueHead() {
		t.Fatalf("copy into a model without a head: %v, head %v", err, plain.HasValueHead())
	}
	for i := range before {
		if plain.Params.Data[i] != m.Params.Data[i] {
			t.Fatalf("weight %d not copied", i)
		}
	}
	other := newTestModel(t, tinyConfig(true), 8)
	other.AddValueHead()
	if err := other.CopyWeightsFrom(m); err != nil || other.Params.ValueBias[0] != 0.5 {
		t.Fatalf("copy between models with heads: %v, bias %v", err, other.Params.ValueBias[0])
	}
	if err := plain.ForwardValues(b, lp, ent, val); err == nil {
		t.Fatal("ForwardValues on a model without a value head")
	}
}

// policyLoss draws a random coefficient of each position's logprob (a) and entropy (c), the
// two drawn in turn position by position, and returns them with the loss Σ a·logprob +
// c·entropy of m on b: the shape of every policy-gradient loss.
func policyLoss(t *testing.T, m *Model, b *Batch, rng *rand.Rand) (a, c []float32, loss func() float64) {
	t.Helper()
	n := b.Rows * b.T
	a, c = make([]float32, n), make([]float32, n)
	for i := range a {
		a[i] = rng.Float32()*2 - 1
		c[i] = rng.Float32()*2 - 1
	}
	return a, c, func() float64 {
		lp, ent := forward(t, m, b)
		var s float64
		for i := range lp {
			s += float64(a[i])*float64(lp[i]) + float64(c[i])*float64(ent[i])
		}
		return s
	}
}

// checkDirectionalDerivatives checks each tensor's gradient (grads[k] of params[k]) against
// finite differences of loss along a random direction within the tensor, drawn from rng tensor
// by tensor: central differences with a step of 2e-3 (Richardson-extrapolated with half the
// step when richardson is set), within 2e-3 + 2% of the numeric value. label begins each error.
func checkDirectionalDerivatives(t *testing.T, rng *rand.Rand, params, grads []NamedTensor, loss func() float64, richardson bool, label string) {
	t.Helper()
	for k, tn := range params {
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
		if richardson {
			d2 := (step(eps/2) - step(-eps/2)) / eps
			num = (4*d2 - num) / 3
		}
		copy(tn.Data, orig)
		if math.Abs(num-analytic) > 2e-3+2e-2*math.Abs(num) {
			t.Errorf("%s%s: directional derivative analytic %.6g, numeric %.6g", label, tn.Name, analytic, num)
		}
	}
}

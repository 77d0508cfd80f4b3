package model

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestPackedMatchesAlone checks that packing sequences into shared rows changes neither their
// logprobs and entropies nor, summed, their gradients: attention stays inside each sequence and
// positions restart.
func TestPackedMatchesAlone(t *testing.T) {
	m := newTestModel(t, tinyConfig(false), 5)
	rng := rand.New(rand.NewPCG(6, 6))
	seqs := [][]int32{randTokens(rng, 4, 13), randTokens(rng, 7, 13), randTokens(rng, 3, 13), randTokens(rng, 9, 13)}
	packed := packedBatch(t, 16, seqs...)
	lp, ent := forward(t, m, packed)
	m.ZeroGrad()
	if _, err := m.TrainCE(packed); err != nil {
		t.Fatal(err)
	}
	packedGrad := append([]float32(nil), m.Grads.Data...)

	sumGrad := make([]float64, len(packedGrad))
	total := 0
	for _, s := range seqs {
		total += len(s) - 1
	}
	for _, s := range seqs {
		alone := packedBatch(t, len(s), s)
		alp, aent := forward(t, m, alone)
		for j := range s {
			i := findToken(packed, s, j)
			if math.Abs(float64(alp[j]-lp[i])) > 1e-5 || math.Abs(float64(aent[j]-ent[i])) > 1e-5 {
				t.Fatalf("seq %v pos %d: alone (%v, %v), packed (%v, %v)", s, j, alp[j], aent[j], lp[i], ent[i])
			}
		}
		// TrainCE averages over its own targets; rescale to the packed batch's mean.
		m.ZeroGrad()
		if _, err := m.TrainCE(alone); err != nil {
			t.Fatal(err)
		}
		w := float64(len(s)-1) / float64(total)
		for i, g := range m.Grads.Data {
			sumGrad[i] += w * float64(g)
		}
	}
	for i := range sumGrad {
		if math.Abs(sumGrad[i]-float64(packedGrad[i])) > 1e-5+1e-3*math.Abs(sumGrad[i]) {
			t.Fatalf("grad %d: packed %v, sum of sequences %v", i, packedGrad[i], sumGrad[i])
		}
	}
}

// findToken returns the flat index in b of position j of sequence s (located by matching the
// whole sequence at a sequence start).
func findToken(b *Batch, s []int32, j int) int {
	for i := 0; i+len(s) <= len(b.Tokens); i++ {
		if b.Pos[i] != 0 {
			continue
		}
		match := true
		for k := range s {
			if b.Tokens[i+k] != s[k] || b.Pos[i+k] != int32(k) {
				match = false
				break
			}
		}
		if match {
			return i + j
		}
	}
	panic("sequence not in batch")
}

func TestBatchErrors(t *testing.T) {
	m := newTestModel(t, tinyConfig(true), 1)
	good := func() *Batch { return packedBatch(t, 6, []int32{1, 2, 3}, []int32{4, 5}) }
	for _, tc := range []struct {
		name   string
		break_ func(b *Batch)
	}{
		{"short tokens", func(b *Batch) { b.Tokens = b.Tokens[:5] }},
		{"token range", func(b *Batch) { b.Tokens[2] = 13 }},
		{"negative token", func(b *Batch) { b.Tokens[2] = -1 }},
		{"target range", func(b *Batch) { b.Targets[0] = -2 }},
		{"pos range", func(b *Batch) { b.Pos[1] = 32 }},
		{"seg resumes", func(b *Batch) { b.Seg[5] = 0 }},
		{"zero rows", func(b *Batch) { b.Rows = 0 }},
	} {
		b := good()
		tc.break_(b)
		n := 6
		if err := m.Forward(b, make([]float32, n), make([]float32, n)); err == nil {
			t.Errorf("%s: accepted", tc.name)
		}
	}
	b := good()
	if err := m.Forward(b, make([]float32, 5), make([]float32, 6)); err == nil {
		t.Error("short output accepted")
	}
	if err := m.Backward(b, make([]float32, 6), make([]float32, 6)); err == nil {
		t.Error("Backward without Forward accepted")
	}
	forward(t, m, b)
	if err := m.Backward(good(), make([]float32, 6), make([]float32, 6)); err == nil {
		t.Error("Backward on another batch accepted")
	}
	if err := m.Backward(b, make([]float32, 6), make([]float32, 6)); err != nil {
		t.Fatal(err)
	}
	if err := m.Backward(b, make([]float32, 6), make([]float32, 6)); err == nil {
		t.Error("second Backward on one Forward accepted")
	}
	allPad := &Batch{Rows: 1, T: 2, Tokens: []int32{1, 2}, Targets: []int32{-1, -1}, Pos: []int32{0, 1}, Seg: []int32{0, 0}}
	if _, err := m.TrainCE(allPad); err == nil {
		t.Error("TrainCE without targets accepted")
	}
}

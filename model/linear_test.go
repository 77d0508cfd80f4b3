package model

import (
	"math"
	"testing"

	"github.com/agentrl/agentrl/model/kernels"
)

// TestThinPathMatchesGeneral: a model of dimension 64 (the built-in tasks' shape) trains to the
// same bits on the thin path (packed weights, SgemmNN, blocks in chunks of rows) as on the
// general one (Sgemm for every product, blocks phase by phase): logprobs and every gradient,
// on one worker and on three.
func TestThinPathMatchesGeneral(t *testing.T) {
	cfg := Config{Vocab: 40, Dim: 64, Layers: 2, Heads: 4, KVHeads: 2, Hidden: 192, MaxSeq: 128,
		RopeTheta: 10000, NormEps: 1e-5, TieEmbeddings: true}
	if !kernels.Thin(cfg.Dim) {
		t.Skip("no thin path on this machine's kernels")
	}
	b := benchTrainBatch(cfg, 5, 96)
	run := func(off bool, workers int) (lp, grads []float32) {
		prev := thinOff
		thinOff = off
		defer func() { thinOff = prev }()
		m := newTestModel(t, cfg, 9)
		m.SetWorkers(workers)
		n := b.Rows * b.T
		lp, ent := make([]float32, n), make([]float32, n)
		if err := m.Forward(b, lp, ent); err != nil {
			t.Fatal(err)
		}
		dlp, dent := make([]float32, n), make([]float32, n)
		for i := range dlp {
			dlp[i], dent[i] = float32(i%7)-3, float32(i%5)*0.01
		}
		if err := m.Backward(b, dlp, dent); err != nil {
			t.Fatal(err)
		}
		return lp, append([]float32(nil), m.Grads.Data...)
	}
	wantLP, wantG := run(true, 1)
	for _, workers := range []int{1, 3} {
		lp, g := run(false, workers)
		for i := range lp {
			if math.Float32bits(lp[i]) != math.Float32bits(wantLP[i]) {
				t.Fatalf("%d workers: logprob %d is %v, want %v", workers, i, lp[i], wantLP[i])
			}
		}
		for i := range g {
			if math.Float32bits(g[i]) != math.Float32bits(wantG[i]) {
				t.Fatalf("%d workers: gradient %d is %v, want %v", workers, i, g[i], wantG[i])
			}
		}
	}
}

package model

import (
	"testing"

	"github.com/agentrl/agentrl/optim"
)

// BenchmarkTrainStepSmallHeads is BenchmarkTrainStep for the built-in tasks' model (the presets'
// dim 64, 2 layers, 4/2 heads of 16 dimensions, hidden 192, vocabulary 512), whose step is
// dominated by small products and the attention of 16-dimensional heads; tokens/s and CPU
// seconds per step (the whole process) are reported.
func BenchmarkTrainStepSmallHeads(b *testing.B) {
	cfg := Config{Vocab: 512, Dim: 64, Layers: 2, Heads: 4, KVHeads: 2, Hidden: 192, MaxSeq: 384,
		RopeTheta: 10000, NormEps: DefaultNormEps, TieEmbeddings: true}
	m, err := New(cfg, 1)
	if err != nil {
		b.Fatal(err)
	}
	opt, err := optim.NewAdamW(optim.DefaultConfig(), m.NumParams(), decaySegments(&m.Params))
	if err != nil {
		b.Fatal(err)
	}
	batch := benchTrainBatch(cfg, 8, 256)
	cpu0 := processCPUSeconds()
	b.ResetTimer()
	for b.Loop() {
		m.ZeroGrad()
		if _, err := m.TrainCE(batch); err != nil {
			b.Fatal(err)
		}
		optim.ClipGradNorm(m.Grads.Data, 1)
		if err := opt.Step(m.Params.Data, m.Grads.Data, 1e-3); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(batch.Rows*batch.T)*float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
	b.ReportMetric((processCPUSeconds()-cpu0)/float64(b.N)*1e3, "cpu-ms/step")
}

package model

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/agentrl/agentrl/model/kernels"
)

// BenchmarkDecodeRoofline is a batch-1 Step of the default model (context 128 to 255, packed
// weights) three ways: on one goroutine, split among all every step, and as decoding runs it
// (stepTune choosing). Besides tokens/s it reports the weights streamed per second over
// kernels.ReadBandwidth of a buffer of their size, measured just before: the fraction of the
// physical limit that `agentrl bench model` prints as the decode roofline.
func BenchmarkDecodeRoofline(b *testing.B) {
	for _, v := range []struct {
		name    string
		workers int
		tune    bool
	}{{"1core", 1, false}, {"split", 0, false}, {"tuned", 0, true}} {
		b.Run(v.name, func(b *testing.B) {
			cfg := DefaultConfig(2048)
			m, err := New(cfg, 1)
			if err != nil {
				b.Fatal(err)
			}
			if v.workers > 0 {
				m.SetWorkers(v.workers)
			}
			defer func(on bool) { stepTuneOn = on }(stepTuneOn)
			stepTuneOn = v.tune
			m.PackDecodeWeights()
			bytes := m.dec.packed.bytes
			c := m.NewKVCache(1, 256)
			rng := rand.New(rand.NewPCG(2, 2))
			logits := make([]float32, cfg.Vocab)
			prompt := randTokens(rng, 128, cfg.Vocab)
			tok := randTokens(rng, 1, cfg.Vocab)
			read := kernels.ReadBandwidth(bytes, 100*time.Millisecond)
			b.ResetTimer()
			for b.Loop() {
				if c.Len(0) == 0 || c.Len(0) >= 255 {
					b.StopTimer()
					c.Reset(0)
					if err := m.Prefill(c, 0, prompt, logits); err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
				}
				if err := m.Step(c, []int{0}, tok, logits); err != nil {
					b.Fatal(err)
				}
			}
			rate := float64(b.N) / b.Elapsed().Seconds()
			b.ReportMetric(rate, "tokens/s")
			b.ReportMetric(rate*float64(bytes)/read, "of-read")
			b.ReportMetric(read/1e9, "read-GB/s")
		})
	}
}

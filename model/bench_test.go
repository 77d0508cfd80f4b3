package model

import (
	"math/rand/v2"
	"testing"

	"github.com/agentrl/agentrl/optim"
)

// benchTrainBatch is rows×T tokens, each row filled exactly with sequences of 32 to T tokens
// (the last one cut to fit); every position but a sequence's last has a target.
func benchTrainBatch(cfg Config, rows, T int) *Batch {
	rng := rand.New(rand.NewPCG(1, 1))
	n := rows * T
	b := &Batch{Rows: rows, T: T, Tokens: make([]int32, n), Targets: make([]int32, n), Pos: make([]int32, n), Seg: make([]int32, n)}
	for r := 0; r < rows; r++ {
		for col, seg := 0, int32(0); col < T; seg++ {
			l := min(T-col, 32+rng.IntN(T-31))
			for j := 0; j < l; j++ {
				i := r*T + col + j
				b.Tokens[i], b.Pos[i], b.Seg[i] = int32(rng.IntN(cfg.Vocab)), int32(j), seg
			}
			for j := 0; j < l; j++ {
				i := r*T + col + j
				b.Targets[i] = -1
				if j+1 < l {
					b.Targets[i] = b.Tokens[i+1]
				}
			}
			col += l
		}
	}
	return b
}

// BenchmarkTrainStep is one TrainCE + clip + AdamW step of the default config (2k vocabulary)
// on 8×256 packed tokens; tokens/s is reported as a metric.
func BenchmarkTrainStep(b *testing.B) {
	cfg := DefaultConfig(2048)
	m, err := New(cfg, 1)
	if err != nil {
		b.Fatal(err)
	}
	opt, err := optim.NewAdamW(optim.DefaultConfig(), m.NumParams(), decaySegments(&m.Params))
	if err != nil {
		b.Fatal(err)
	}
	batch := benchTrainBatch(cfg, 8, 256)
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
}

// BenchmarkDecode is one batched Step over 1 or 32 slots, each holding a context of 128 to 255
// tokens (one more per Step; refilled, untimed, after 255), with the weights packed for decoding
// as the inference engine has them. Besides tokens/s it reports tokens per CPU-second of the
// process (both cores together), the steadier figure on a shared machine.
func BenchmarkDecode(b *testing.B) {
	for _, slots := range []int{1, 32} {
		b.Run(map[int]string{1: "batch=1", 32: "batch=32"}[slots], func(b *testing.B) {
			cfg := DefaultConfig(2048)
			m, err := New(cfg, 1)
			if err != nil {
				b.Fatal(err)
			}
			m.PackDecodeWeights()
			c := m.NewKVCache(slots, 256)
			rng := rand.New(rand.NewPCG(2, 2))
			logits := make([]float32, slots*cfg.Vocab)
			ids := make([]int, slots)
			prompt := randTokens(rng, 128, cfg.Vocab)
			for s := range ids {
				ids[s] = s
				if err := m.Prefill(c, s, prompt, logits[:cfg.Vocab]); err != nil {
					b.Fatal(err)
				}
			}
			toks := randTokens(rng, slots, cfg.Vocab)
			b.ResetTimer()
			cpu, cpu0 := 0.0, processCPUSeconds()
			for b.Loop() {
				if c.Len(0) >= 255 {
					b.StopTimer()
					cpu += processCPUSeconds() - cpu0
					for s := range ids {
						c.Reset(s)
						if err := m.Prefill(c, s, prompt, logits[:cfg.Vocab]); err != nil {
							b.Fatal(err)
						}
					}
					cpu0 = processCPUSeconds()
					b.StartTimer()
				}
				if err := m.Step(c, ids, toks, logits); err != nil {
					b.Fatal(err)
				}
			}
			cpu += processCPUSeconds() - cpu0
			b.ReportMetric(float64(slots*b.N)/b.Elapsed().Seconds(), "tokens/s")
			if cpu > 0 {
				b.ReportMetric(float64(slots*b.N)/cpu, "tokens/CPU-s")
			}
		})
	}
}

package model

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/agentrl/agentrl/model/kernels"
)

// BenchmarkDecodeRoofline is a batch-1 Step (context 128 to 255, packed weights) at three sizes,
// calc's 0.13 M model, the default 3.4 M and `agentrl bench model --configs 512x8`'s 24 M, three
// ways: on one goroutine, split among all every step, and as decoding runs it (stepTune
// choosing). Besides tokens/s it reports the weights streamed per second over
// kernels.ReadBandwidth of a buffer of their size, measured before and after the steps (the
// faster of the two: a disturbed read is a slow one): the fraction of the physical limit that
// `agentrl bench model` prints as the decode roofline, of-read from the mean step and
// of-read-med from the median one, which a machine shared with other processes disturbs far
// less (a step preempted by another process's time slice counts once); med-GB/s is the weights
// streamed at the median step, for comparing builds where the read bandwidth itself moves with
// the load. Each model decodes 32 untimed steps first, its step tuner's first probe window
// (kernels.SplitTuner).
func BenchmarkDecodeRoofline(b *testing.B) {
	base := DefaultConfig(2048)
	calc := Config{Vocab: 512, Dim: 64, Layers: 2, Heads: 4, KVHeads: 2, Hidden: 192, MaxSeq: 384,
		RopeTheta: base.RopeTheta, NormEps: base.NormEps, TieEmbeddings: true}
	big := base
	big.Dim, big.Layers, big.Heads, big.KVHeads, big.Hidden = 512, 8, 16, 8, 1376
	for _, sz := range []struct {
		name string
		cfg  Config
	}{{"0.13M", calc}, {"3.4M", base}, {"24M", big}} {
		for _, v := range []struct {
			name    string
			workers int
			tune    bool
		}{{"1core", 1, false}, {"split", 0, false}, {"tuned", 0, true}} {
			b.Run(sz.name+"/"+v.name, func(b *testing.B) {
				cfg := sz.cfg
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
				// Untimed steps first: the step tuner's first probe window, run once per model
				// (kernels.SplitTuner).
				if err := m.Prefill(c, 0, prompt, logits); err != nil {
					b.Fatal(err)
				}
				for range 32 {
					if err := m.Step(c, []int{0}, tok, logits); err != nil {
						b.Fatal(err)
					}
				}
				c.Reset(0)
				read := kernels.ReadBandwidth(bytes, 100*time.Millisecond)
				steps := make([]time.Duration, 0, b.N)
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
					t0 := time.Now()
					if err := m.Step(c, []int{0}, tok, logits); err != nil {
						b.Fatal(err)
					}
					steps = append(steps, time.Since(t0))
				}
				rate := float64(b.N) / b.Elapsed().Seconds()
				read = max(read, kernels.ReadBandwidth(bytes, 100*time.Millisecond))
				slices.Sort(steps)
				med := steps[len(steps)/2].Seconds()
				b.ReportMetric(rate, "tokens/s")
				b.ReportMetric(rate*float64(bytes)/read, "of-read")
				b.ReportMetric(float64(bytes)/med/read, "of-read-med")
				b.ReportMetric(float64(bytes)/med/1e9, "med-GB/s")
				b.ReportMetric(read/1e9, "read-GB/s")
			})
		}
	}
}

// BenchmarkDecodeFamilies decodes with the default model and with models of the families at its
// width (dim 256, 4 layers, 2k vocabulary): Qwen3's shape (head_dim 64, twice dim/heads, q/k
// norms, MLP 3×dim: 1.3 times the weights), Qwen2.5's q/k/v biases, and Mistral's sliding window
// of 64 (shorter than the context, untied), at batch 1 and 32 in float32 and bfloat16 weights
// and cache, with contexts of 128 to 228 tokens. The models take turns: each iteration is a
// round in which every model decodes 100 steps, so that a machine shared with other processes
// disturbs them alike, and each reports the tokens/s of its median step (`NAME-tok/s`) and the
// weights it streams a second at that step (`NAME-GB/s`); the first round is not counted.
func BenchmarkDecodeFamilies(b *testing.B) {
	base := DefaultConfig(2048)
	qwen3 := base
	qwen3.Family, qwen3.HeadDimension, qwen3.QKNorm, qwen3.Hidden = FamilyQwen3, 64, true, 768
	qwen25 := base
	qwen25.Family, qwen25.QKVBias = FamilyQwen2, true
	mistral := base
	mistral.Family, mistral.SlidingWindow, mistral.TieEmbeddings = FamilyMistral, 64, false
	names := []string{"builtin", "qwen3", "qwen2.5", "mistral"}
	cfgs := []Config{base, qwen3, qwen25, mistral}
	for _, prec := range []Precision{F32, BF16} {
		for _, batch := range []int{1, 32} {
			b.Run(fmt.Sprintf("%s/batch%d", prec, batch), func(b *testing.B) {
				ms := make([]*Model, len(cfgs))
				cs := make([]*KVCache, len(cfgs))
				for i, c := range cfgs {
					m, err := New(c, 1)
					if err != nil {
						b.Fatal(err)
					}
					if err := m.PackDecodeWeightsAs(prec); err != nil {
						b.Fatal(err)
					}
					ms[i] = m
					cs[i], _ = m.NewKVCacheAs(batch, 256, prec)
				}
				rng := rand.New(rand.NewPCG(2, 2))
				V := base.Vocab
				logits := make([]float32, batch*V)
				prompt := randTokens(rng, 128, V)
				toks := randTokens(rng, batch, V)
				slots := make([]int, batch)
				for i := range slots {
					slots[i] = i
				}
				steps := make([][]time.Duration, len(cfgs))
				round := 0
				for b.Loop() {
					for i, m := range ms {
						for s := range batch {
							cs[i].Reset(s)
							if err := m.Prefill(cs[i], s, prompt, logits[:V]); err != nil {
								b.Fatal(err)
							}
						}
						for range 100 {
							t0 := time.Now()
							if err := m.Step(cs[i], slots, toks, logits); err != nil {
								b.Fatal(err)
							}
							if round > 0 {
								steps[i] = append(steps[i], time.Since(t0))
							}
						}
					}
					round++
				}
				if round < 2 {
					return
				}
				for i, m := range ms {
					slices.Sort(steps[i])
					med := steps[i][len(steps[i])/2].Seconds()
					b.ReportMetric(float64(batch)/med, names[i]+"-tok/s")
					b.ReportMetric(float64(m.dec.packed.bytes)/med/1e9, names[i]+"-GB/s")
				}
			})
		}
	}
}

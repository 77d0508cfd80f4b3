package model

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/agentrl/agentrl/optim"
)

// BenchmarkCopyEmergence measures how many training steps a model needs before it can copy a
// 6-digit string that follows a marker at a random place among T filler tokens: the skill the
// calc task rests on (question → calculator call, tool response → answer). It reports the step
// at which the loss on the copied digits first falls below 0.5 nats (2,000 = never).
//
//	go test -run '^$' -bench CopyEmergence -benchtime 1x ./model
func BenchmarkCopyEmergence(b *testing.B) {
	for _, c := range []struct {
		dim, layers, T int
	}{{64, 2, 30}, {64, 2, 60}, {128, 4, 30}} {
		b.Run(fmt.Sprintf("dim=%d/layers=%d/T=%d", c.dim, c.layers, c.T), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				b.ReportMetric(float64(copySteps(b, c.dim, c.layers, c.T, 2000)), "steps")
			}
		})
	}
}

func copySteps(b *testing.B, dim, layers, T, maxSteps int) int {
	cfg := Config{Vocab: 40, Dim: dim, Layers: layers, Heads: 4, KVHeads: 2, Hidden: 3 * dim, MaxSeq: 256,
		RopeTheta: 10000, NormEps: 1e-5, TieEmbeddings: true}
	m, err := New(cfg, 1)
	if err != nil {
		b.Fatal(err)
	}
	opt, err := optim.NewAdamW(optim.DefaultConfig(), m.NumParams(), decaySegments(&m.Params))
	if err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	const L, rows = 6, 16
	bt := &Batch{Rows: rows, T: T, Tokens: make([]int32, rows*T), Targets: make([]int32, rows*T),
		Pos: make([]int32, rows*T), Seg: make([]int32, rows*T)}
	seq := make([]int32, T+1)
	for step := 1; step <= maxSteps; step++ {
		for r := 0; r < rows; r++ {
			for i := range seq {
				seq[i] = int32(14 + rng.IntN(26)) // filler
			}
			at := 2 + rng.IntN(T-2*L-10)
			seq[at] = 1 // marker
			for i := 0; i < L; i++ {
				seq[at+1+i] = int32(2 + rng.IntN(10)) // digits
			}
			out := T - L - 3
			seq[out] = 12 // "answer" marker
			copy(seq[out+1:out+1+L], seq[at+1:at+1+L])
			for i := 0; i < T; i++ {
				bt.Tokens[r*T+i], bt.Pos[r*T+i], bt.Targets[r*T+i] = seq[i], int32(i), -1
				if i >= out && i < out+L {
					bt.Targets[r*T+i] = seq[i+1]
				}
			}
		}
		m.ZeroGrad()
		loss, err := m.TrainCE(bt)
		if err != nil {
			b.Fatal(err)
		}
		if loss < 0.5 {
			return step
		}
		optim.ClipGradNorm(m.Grads.Data, 1)
		if err := opt.Step(m.Params.Data, m.Grads.Data, 3e-3); err != nil {
			b.Fatal(err)
		}
	}
	return maxSteps
}

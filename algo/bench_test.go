package algo

import (
	"math/rand/v2"
	"testing"
)

// benchBatch is 256 sequences × 1,024 tokens (a 256-token prompt, then alternating 96-token
// assistant turns and 32-token observations), in groups of 8, with advantages and returns.
func benchBatch(b *testing.B) (*Batch, Current) {
	const nSeq, seqLen = 256, 1024
	rng := rand.New(rand.NewPCG(1, 1))
	bt := &Batch{Offsets: []int{0}, TurnOffsets: []int{0}}
	var cur Current
	for i := 0; i < nSeq; i++ {
		lo := len(bt.Mask)
		for pos := 0; pos < seqLen; pos++ {
			inTurn := pos >= 256 && (pos-256)%128 < 96
			bt.Mask = append(bt.Mask, inTurn)
			if pos >= 256 && (pos-256)%128 == 0 {
				bt.Turns = append(bt.Turns, Turn{Start: pos, End: pos + 96, Anchor: string(rune('a' + rng.IntN(4)))})
			}
		}
		for t := lo; t < len(bt.Mask); t++ {
			behav := -0.1 - 3*rng.Float64()
			old := behav + 0.05*rng.NormFloat64()
			bt.Behaviour = append(bt.Behaviour, float32(behav))
			bt.Old = append(bt.Old, float32(old))
			bt.Ref = append(bt.Ref, float32(old+0.1*rng.NormFloat64()))
			bt.Values = append(bt.Values, float32(rng.Float64()))
			bt.Versions = append(bt.Versions, 4)
			cur.Logprobs = append(cur.Logprobs, float32(old+0.1*rng.NormFloat64()))
			cur.Entropies = append(cur.Entropies, float32(2*rng.Float64()))
			cur.Values = append(cur.Values, float32(rng.Float64()))
		}
		bt.Offsets = append(bt.Offsets, len(bt.Mask))
		bt.TurnOffsets = append(bt.TurnOffsets, len(bt.Turns))
		bt.Groups = append(bt.Groups, uint64(i/8))
		bt.Rewards = append(bt.Rewards, float64(rng.IntN(2)))
		bt.Status = append(bt.Status, 0)
	}
	est, _ := NewEstimator(AdvantageConfig{Name: "gae", GAE: GAEConfig{Gamma: 1, Lambda: 0.95}})
	if _, err := est.Estimate(bt); err != nil {
		b.Fatal(err)
	}
	cur.PolicyVersion = 5
	return bt, cur
}

// BenchmarkLoss runs the full loss (validation, aggregation, policy term, metrics) over the batch.
// "ns/token" counts every token of the batch, masked or not.
func BenchmarkLoss(b *testing.B) {
	bt, cur := benchBatch(b)
	cases := map[string]LossConfig{}
	for _, p := range PolicyLosses().Names() {
		cases[p] = DefaultLossConfig().WithPolicy(p)
	}
	full := DefaultLossConfig()
	full.KL = KLLossConfig{Estimator: "k3", Coef: 0.01}
	full.EntropyCoef = 0.001
	full.Critic = CriticConfig{Coef: 0.5, Clip: 0.2}
	full.Correction = CorrectionConfig{Level: "token", Cap: 2, RejectKL: 0.5}
	cases["ppo+kl+entropy+critic+tis"] = full
	for _, name := range []string{"ppo", "gspo", "sapo", "cispo", "reinforce", "ppo+kl+entropy+critic+tis"} {
		b.Run(name, func(b *testing.B) {
			l, err := NewLoss(cases[name])
			if err != nil {
				b.Fatal(err)
			}
			var out Output
			for b.Loop() {
				if err := l.Compute(&out, bt, cur); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(bt.NumTokens()), "ns/token")
		})
	}
}

// BenchmarkEstimate runs each estimator over the batch (it rewrites the advantages in place).
func BenchmarkEstimate(b *testing.B) {
	bt, _ := benchBatch(b)
	for _, name := range []string{"grpo", "rloo", "reinforce++", "gae", "gae-turn", "gigpo", "turn-return"} {
		b.Run(name, func(b *testing.B) {
			c, _ := DefaultAdvantageConfig(name)
			est, _ := NewEstimator(c)
			for b.Loop() {
				if _, err := est.Estimate(bt); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(bt.NumTokens()), "ns/token")
		})
	}
}

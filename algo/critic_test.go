package algo

import (
	"testing"

	"github.com/agentrl/agentrl/traj"
)

// gaeEnvBatch is three sequences for the GAE tables. A: a prompt token, turn 1 (tokens 1–2, turn
// reward 0.5), two tool tokens, turn 2 (token 5), a closing env token; outcome 1. B failed in the
// environment. C: one token, outcome 0. Unmasked tokens hold value 9 and B's tokens 5: an
// estimator that read them would show.
func gaeEnvBatch() *Batch {
	b := build(
		seqSpec{mask: ".mm..m.", reward: 1, turns: []Turn{{Start: 1, End: 3, Reward: 0.5}, {Start: 5, End: 6}}},
		seqSpec{mask: "mm", reward: 1, status: traj.StatusEnvError, turns: []Turn{{Start: 0, End: 2}}},
		seqSpec{mask: "m", reward: 0, turns: []Turn{{Start: 0, End: 1}}},
	)
	b.Values = []float32{9, 0.2, 0.4, 9, 9, 0.6, 9, 5, 5, 0.3}
	return b
}

// GAE with environment tokens, γ = 0.9, λ = 0.8 (γλ = 0.72), worked by hand. Environment and tool
// tokens carry no value, reward or advantage: the recursion runs from one turn's last token to
// the next turn's first. The failed sequence gets nothing and is left out of the whitening.
//
// Token level, A: rewards 0.5 on token 2 (its turn's) and 1 on token 5 (the outcome).
//
//	t5: δ = 1 − 0.6 = 0.4                          A = 0.4       R = 1
//	t2: δ = 0.5 + 0.9·0.6 − 0.4 = 0.64             A = 0.64 + 0.72·0.4 = 0.928      R = 1.328
//	t1: δ = 0.9·0.4 − 0.2 = 0.16                   A = 0.16 + 0.72·0.928 = 0.82816  R = 1.02816
//	C:  δ = 0 − 0.3                                A = −0.3      R = 0
//
// Turn level, A: V at each turn's first token (0.2, 0.6); rewards 0.5 and 1.
//
//	k1: δ = 1 − 0.6 = 0.4                          A = 0.4       R = 1
//	k0: δ = 0.5 + 0.9·0.6 − 0.2 = 0.84             A = 0.84 + 0.72·0.4 = 1.128      R = 1.328
func TestGAEWithEnvironmentTokens(t *testing.T) {
	tests := []struct {
		est          string
		adv, ret     []float64
		whitenedRows [][]float64 // the masked advantages of A and C, whitened by hand
	}{
		{"gae", []float64{0, 0.82816, 0.928, 0, 0, 0.4, 0, 0, 0, -0.3}, []float64{0, 1.02816, 1.328, 0, 0, 1, 0, 0, 0, 0},
			whitened([][]float64{{0.82816, 0.928, 0.4}, {-0.3}})},
		{"gae-turn", []float64{0, 1.128, 1.128, 0, 0, 0.4, 0, 0, 0, -0.3}, []float64{0, 1.328, 1.328, 0, 0, 1, 0, 0, 0, 0},
			whitened([][]float64{{1.128, 1.128, 0.4}, {-0.3}})},
	}
	for _, tc := range tests {
		for _, whiten := range []bool{false, true} {
			b := gaeEnvBatch()
			m := mustEstimate(t, b, tc.est, func(c *AdvantageConfig) {
				c.GAE = GAEConfig{Gamma: 0.9, Lambda: 0.8, NoWhiten: !whiten}
			})
			want := tc.adv
			if whiten {
				w := tc.whitenedRows
				want = []float64{0, w[0][0], w[0][1], 0, 0, w[0][2], 0, 0, 0, w[1][0]}
			}
			for i := range want {
				if !near(float64(b.Advantages[i]), want[i], 1e-6) || !near(float64(b.Returns[i]), tc.ret[i], 1e-6) {
					t.Errorf("%s whiten=%v token %d: advantage %v return %v, want %v %v", tc.est, whiten, i, b.Advantages[i], b.Returns[i], want[i], tc.ret[i])
				}
			}
			// The critic's view: the mean return and the explained variance over the masked
			// tokens of A and C, 1 − Var(R − V)/Var(R).
			rets, vals := []float64{tc.ret[1], tc.ret[2], tc.ret[5], 0}, []float64{0.2, 0.4, 0.6, 0.3}
			var mr, md float64
			for k := range rets {
				mr += rets[k] / 4
				md += (rets[k] - vals[k]) / 4
			}
			var vr, vd float64
			for k := range rets {
				vr += (rets[k] - mr) * (rets[k] - mr) / 4
				vd += (rets[k] - vals[k] - md) * (rets[k] - vals[k] - md) / 4
			}
			if !near(m["adv/return_mean"], mr, 1e-6) || !near(m["adv/value_explained_var"], 1-vd/vr, 1e-6) {
				t.Errorf("%s: return mean %v explained variance %v, want %v %v", tc.est, m["adv/return_mean"], m["adv/value_explained_var"], mr, 1-vd/vr)
			}
		}
	}
}

// The critic term is aggregated by the policy loss's mode, worked by hand. A ("m.m") has token
// losses ½(V−R)² = ½·1² and ½·0.5²; B ("mmm") ½·2², 0 and ½·1²; C failed. Sums: A 0.625, B 2.5;
// 5 tokens, 2 sequences, L = 4. The environment token of A (V 99) and all of C count nowhere.
func TestCriticAggregation(t *testing.T) {
	tests := []struct {
		agg  string
		loss float64
		coef [2]float64 // d(loss)/dV per unit of V − R, for A's and B's tokens
	}{
		{AggTokenMean, 3.125 / 5, [2]float64{1.0 / 5, 1.0 / 5}},
		{AggTokenSum, 3.125, [2]float64{1, 1}},
		{AggSeqMeanTokenSum, 3.125 / 2, [2]float64{1.0 / 2, 1.0 / 2}},
		{AggSeqMeanTokenMean, (0.625/2 + 2.5/3) / 2, [2]float64{1.0 / 4, 1.0 / 6}},
		{AggSeqMeanTokenSumNm, 3.125 / 4, [2]float64{1.0 / 4, 1.0 / 4}},
		{AggDrGRPO, 3.125 / 8, [2]float64{1.0 / 8, 1.0 / 8}},
	}
	for _, tc := range tests {
		t.Run(tc.agg, func(t *testing.T) {
			c := DefaultLossConfig()
			c.Agg, c.Critic = tc.agg, CriticConfig{Coef: 2}
			if aggNormed(tc.agg) {
				c.AggNorm = 4
			}
			l, err := NewLoss(c)
			if err != nil {
				t.Fatal(err)
			}
			b := build(seqSpec{mask: "m.m"}, seqSpec{mask: "mmm"}, seqSpec{mask: "mm", status: traj.StatusTimeout})
			b.Advantages = make([]float32, 8)
			b.Returns = []float32{1, 0, 0.5, 2, 1, 0, 7, 7}
			v := []float32{0, 99, 0, 0, 1, 1, 0, 0} // V − R: −1, ·, −0.5, −2, 0, 1, (failed)
			var out Output
			if err := l.Compute(&out, b, Current{Logprobs: make([]float32, 8), Values: v}); err != nil {
				t.Fatal(err)
			}
			if !near(out.Metrics["critic/value_loss"], tc.loss, 1e-9) || !near(out.Loss, 2*tc.loss, 1e-9) {
				t.Fatalf("value loss %v, total %v; want %v and 2× that (coef 2)", out.Metrics["critic/value_loss"], out.Loss, tc.loss)
			}
			diff := []float64{-1, 0, -0.5, -2, 0, 1, 0, 0}
			for i, d := range diff {
				want := 0.0
				switch {
				case i == 1 || i >= 6:
				case i < 3:
					want = 2 * tc.coef[0] * d
				default:
					want = 2 * tc.coef[1] * d
				}
				if !near(float64(out.DValues[i]), want, 1e-6) {
					t.Errorf("token %d: dV %v, want %v", i, out.DValues[i], want)
				}
			}
		})
	}
}

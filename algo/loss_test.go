package algo

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/agentrl/agentrl/traj"
)

// oneToken builds a one-token minibatch with log ratio log(ratio), advantage a and logπ = logp.
func oneToken(ratio, a, logp float64) (*Batch, Current) {
	b := build(seqSpec{mask: "m"})
	b.Old = []float32{float32(logp - math.Log(ratio))}
	b.Advantages = []float32{float32(a)}
	return b, Current{Logprobs: []float32{float32(logp)}}
}

func TestPolicyLossTable(t *testing.T) {
	ppo := func(lo, hi, c float64) func(*LossConfig) {
		return func(l *LossConfig) { l.PPO = PPOConfig{ClipLow: lo, ClipHigh: hi, DualClip: c} }
	}
	tests := []struct {
		name, policy   string
		edit           func(*LossConfig)
		ratio, a, logp float64
		loss, grad     float64
		metric         string // a metric that must be 1 (the token's clip bucket), "" for none
	}{
		{"ppo inside", "ppo", nil, 0.9, 2, -1, -1.8, -1.8, ""},
		{"ppo clip high", "ppo", nil, 1.5, 1, -1, -1.2, 0, "loss/pg_clipfrac_high"},
		{"ppo clip low", "ppo", nil, 0.5, -1, -1, 0.8, 0, "loss/pg_clipfrac_low"},
		{"ppo A<0 ratio high is not clipped", "ppo", nil, 1.5, -1, -1, 1.5, 1.5, ""},
		{"clip-higher keeps 1.25", "ppo", ppo(0.2, 0.28, 0), 1.25, 1, -1, -1.25, -1.25, ""},
		{"dual-clip bounds A<0", "ppo", ppo(0.2, 0.2, 3), 5, -1, -1, 3, 0, "loss/pg_clipfrac_dual"},
		{"dual-clip inactive under c", "ppo", ppo(0.2, 0.2, 3), 2.5, -1, -1, 2.5, 2.5, ""},
		{"sapo A>0 on-policy", "sapo", nil, 1, 1, -1, -2, -1, ""},
		{"sapo A<0 on-policy τ=1.05", "sapo", nil, 1, -1, -1, 2 / 1.05, 1, ""},
		// σ(1·0.5) = 0.6224593; f = 4σ = 2.4898373; grad = −4σ(1−σ)·1.5 = −1.4100223.
		{"sapo A>0 ratio 1.5", "sapo", nil, 1.5, 1, -1, -2.4898373, -1.4100223, ""},
		{"cispo clipped keeps gradient", "cispo", nil, 1.5, 1, -0.5, 0.64, -1.28, "loss/pg_clipfrac_high"},
		{"cispo inside", "cispo", nil, 0.5, 2, -0.5, 0.5, -1, ""},
		{"reinforce", "reinforce", nil, 1.5, 2, -1, -3, -3, ""},
		{"gspo one token equals ppo", "gspo", func(l *LossConfig) { l.GSPO = GSPOConfig{ClipLow: 0.2, ClipHigh: 0.2} }, 1.1, 1, -1, -1.1, -1.1, ""},
		// verl clamps log s at 10 above: log s = 12, A = −1 gives e^10 = 22026.47 (not e^12 =
		// 162754.79) and no gradient.
		{"gspo log s clamped at 10", "gspo", nil, math.Exp(12), -1, -1, math.Exp(10), 0, ""},
		{"gspo log s at 9 is live", "gspo", nil, math.Exp(9), -1, -1, math.Exp(9), math.Exp(9), ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultLossConfig().WithPolicy(tc.policy)
			if tc.edit != nil {
				tc.edit(&c)
			}
			l, err := NewLoss(c)
			if err != nil {
				t.Fatal(err)
			}
			b, cur := oneToken(tc.ratio, tc.a, tc.logp)
			var out Output
			if err := l.Compute(&out, b, cur); err != nil {
				t.Fatal(err)
			}
			if !near(out.Loss, tc.loss, 1e-6) || !near(float64(out.DLogprobs[0]), tc.grad, 1e-6) {
				t.Errorf("loss %v grad %v, want %v %v", out.Loss, out.DLogprobs[0], tc.loss, tc.grad)
			}
			if tc.metric != "" && out.Metrics[tc.metric] != 1 {
				t.Errorf("%s = %v, want 1 (metrics %v)", tc.metric, out.Metrics[tc.metric], out.Metrics)
			}
			if tc.metric == "" && out.Metrics["loss/pg_clipfrac"] != 0 {
				t.Errorf("pg_clipfrac = %v, want 0", out.Metrics["loss/pg_clipfrac"])
			}
		})
	}
}

// TestGSPOSequenceRatio: two tokens with log ratios 0.1 and 0.3 share s = e^0.2.
func TestGSPOSequenceRatio(t *testing.T) {
	c := DefaultLossConfig().WithPolicy("gspo")
	c.GSPO = GSPOConfig{ClipLow: 0.3, ClipHigh: 0.3}
	l, _ := NewLoss(c)
	b := build(seqSpec{mask: "m.m"})
	b.Old = []float32{-1.1, 0, -1.3}
	b.Advantages = []float32{1, 0, -2}
	cur := Current{Logprobs: []float32{-1, 5, -1}}
	var out Output
	if err := l.Compute(&out, b, cur); err != nil {
		t.Fatal(err)
	}
	s := math.Exp(0.2)
	// token-mean over 2 tokens: (−1·s + 2·s)/2; straight-through grads −A·s/2.
	if !near(out.Loss, s/2, 1e-6) || !near(float64(out.DLogprobs[0]), -s/2, 1e-6) || !near(float64(out.DLogprobs[2]), s, 1e-6) || out.DLogprobs[1] != 0 {
		t.Fatalf("loss %v grads %v, want %v [%v 0 %v]", out.Loss, out.DLogprobs, s/2, -s/2, s)
	}
}

// TestGSPONoLowerClamp: verl bounds log s only above, so log s = −25 keeps ratio e^−25 and its
// gradient −A·e^−25 (a ±20 clamp would give e^−20 and no gradient).
func TestGSPONoLowerClamp(t *testing.T) {
	c := DefaultLossConfig().WithPolicy("gspo")
	l, _ := NewLoss(c)
	b, cur := oneToken(math.Exp(-25), 1, -1)
	var out Output
	if err := l.Compute(&out, b, cur); err != nil {
		t.Fatal(err)
	}
	want := -math.Exp(-25)
	if math.Abs(out.Loss/want-1) > 1e-5 || math.Abs(float64(out.DLogprobs[0])/want-1) > 1e-5 {
		t.Fatalf("loss %v grad %v, want %v %v", out.Loss, out.DLogprobs[0], want, want)
	}
}

// TestKLTermClamped: the in-loss k3 term at logπ = −1, logπ_ref = 2, β = 1 is verl's 10 with no
// gradient, not 16.09 with −19.09.
func TestKLTermClamped(t *testing.T) {
	c := DefaultLossConfig().WithPolicy("reinforce")
	c.KL = KLLossConfig{Estimator: "k3", Coef: 1}
	l, _ := NewLoss(c)
	b, cur := oneToken(1, 0, -1)
	b.Ref = []float32{2}
	var out Output
	if err := l.Compute(&out, b, cur); err != nil {
		t.Fatal(err)
	}
	if !near(out.Loss, 10, 1e-9) || out.DLogprobs[0] != 0 {
		t.Fatalf("loss %v grad %v, want 10 0", out.Loss, out.DLogprobs[0])
	}
}

func TestAggregationModes(t *testing.T) {
	// REINFORCE at ratio 1 gives ℓ = −A: seq0 one token A=2 (Σ −2), seq1 three tokens A=1 (Σ −3),
	// seq2 failed (must not count anywhere), seq3 no masked token (must not count in N).
	tests := []struct {
		agg  string
		norm float64
		want float64
	}{
		{AggTokenMean, 0, -5.0 / 4},
		{AggTokenSum, 0, -5},
		{AggSeqMeanTokenSum, 0, -2.5},
		{AggSeqMeanTokenMean, 0, -1.5},
		{AggSeqMeanTokenSumNm, 4, -5.0 / 4}, // verl: Σ/L, no 1/N
		{AggDrGRPO, 4, -5.0 / 8},            // Dr. GRPO: Σ/(N·L)
	}
	for _, tc := range tests {
		t.Run(tc.agg, func(t *testing.T) {
			c := DefaultLossConfig().WithPolicy("reinforce")
			c.Agg, c.AggNorm = tc.agg, tc.norm
			l, err := NewLoss(c)
			if err != nil {
				t.Fatal(err)
			}
			b := build(seqSpec{mask: "m"}, seqSpec{mask: ".mmm"}, seqSpec{mask: "mm", status: traj.StatusTimeout}, seqSpec{mask: ".."})
			b.Advantages = []float32{2, 0, 1, 1, 1, 7, 7, 0, 0}
			cur := Current{Logprobs: make([]float32, 9)}
			var out Output
			if err := l.Compute(&out, b, cur); err != nil {
				t.Fatal(err)
			}
			if !near(out.Loss, tc.want, 1e-12) {
				t.Fatalf("loss %v, want %v", out.Loss, tc.want)
			}
			if out.DLogprobs[5] != 0 || out.DLogprobs[6] != 0 {
				t.Fatalf("failed sequence got gradient %v", out.DLogprobs[5:7])
			}
		})
	}
}

func TestKLEstimators(t *testing.T) {
	// logπ = −1, logπ_ref = −1.5: diff 0.5, δ = −0.5 (the first eight rows).
	e := math.Exp(-0.5)
	tests := []struct {
		name        string
		value, grad float64
		logp, ref   float64 // 0, 0: the default −1, −1.5
	}{
		{"k1", 0.5, 1, -1, -1.5}, {"abs", 0.5, 1, -1, -1.5}, {"k2", 0.125, 0.5, -1, -1.5}, {"k3", e + 0.5 - 1, 1 - e, -1, -1.5},
		{"k1+", 0.5, 0.5, -1, -1.5}, {"abs+", 0.5, 0.5, -1, -1.5}, {"k2+", 0.125, 0.5, -1, -1.5}, {"k3+", e + 0.5 - 1, 0.5, -1, -1.5},
		// logπ = −1, logπ_ref = 2: δ = 3, e³ − 4 = 16.09 is clamped to 10 with no gradient (verl);
		// the straight-through form keeps k2's gradient diff = −3.
		{"k3 clamped at 10", 10, 0, -1, 2}, {"k3+ clamped at 10", 10, -3, -1, 2},
		// Just under the clamp: δ = 2.5, e^2.5 − 3.5 = 8.68, gradient 1 − e^2.5.
		{"k3 under the clamp", math.Exp(2.5) - 3.5, 1 - math.Exp(2.5), -1, 1.5},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			k, err := ParseKL(strings.Fields(tc.name)[0])
			if err != nil {
				t.Fatal(err)
			}
			v, g := k.Eval(tc.logp, tc.ref)
			if !near(v, tc.value, 1e-12) || !near(g, tc.grad, 1e-12) {
				t.Fatalf("value %v grad %v, want %v %v", v, g, tc.value, tc.grad)
			}
		})
	}
	if _, err := ParseKL("low_var_kl"); err == nil || !strings.Contains(err.Error(), "k1, abs, k2, k3") {
		t.Fatalf("unknown estimator error %v", err)
	}
}

func TestKLPenaltyAndAdaptive(t *testing.T) {
	b := build(seqSpec{mask: "m.m"}, seqSpec{mask: "m", status: traj.StatusEnvError})
	b.Behaviour = []float32{-1, 0, -2, -1}
	b.Ref = []float32{-1.5, 0, -2, -3}
	k, _ := ParseKL("k1")
	m, err := ApplyKLPenalty(b, k, 0.1)
	if err != nil {
		t.Fatal(err)
	}
	want := []float32{-0.05, 0, 0, 0}
	for i := range want {
		if !near(float64(b.TokenRewards[i]), float64(want[i]), 1e-6) {
			t.Fatalf("token rewards %v, want %v", b.TokenRewards, want)
		}
	}
	if !near(m["kl/reward_kl_mean"], 0.25, 1e-12) {
		t.Fatalf("mean KL %v, want 0.25", m["kl/reward_kl_mean"])
	}
	a := AdaptiveKL{Coef: 0.1, Target: 0.1, Horizon: 100}
	if err := a.Update(0.2, 10); err != nil {
		t.Fatal(err)
	}
	if !near(a.Coef, 0.1*1.02, 1e-12) { // error clipped to 0.2, times 10/100
		t.Fatalf("adaptive coef %v, want 0.102", a.Coef)
	}
	if err := a.Update(math.NaN(), 1); err == nil {
		t.Fatal("NaN KL accepted")
	}
}

func TestCriticTable(t *testing.T) {
	tests := []struct {
		name                string
		v, vOld, ret, eps   float64
		loss, grad, clipped float64
	}{
		// verl's compute_value_loss: ½·max((V−R)², (clip(V, V_old ± ε) − R)²), the gradient 0 where
		// the clipped branch (constant in V) is the larger.
		{"clipped branch larger", 1.5, 1, 2, 0.2, 0.32, 0, 1},                // V_clip 1.2: ½·max(0.25, 0.64)
		{"inside the range", 1.1, 1, 2, 0.2, 0.405, -0.9, 0},                 // V_clip = V: ½·0.81
		{"no clipping", 1.5, 1, 2, 0, 0.125, -0.5, 0},                        // ε = 0: ½·0.25
		{"clipped above, unclipped larger", 1.5, 1, 1.3, 0.2, 0.02, 0.2, 0},  // V_clip 1.2: ½·max(0.04, 0.01)
		{"clipped below, unclipped larger", 0.5, 1, 0.9, 0.2, 0.08, -0.4, 0}, // V_clip 0.8: ½·max(0.16, 0.01)
		{"clipped below, clipped larger", 0.5, 1, 0.2, 0.2, 0.18, 0, 1},      // V_clip 0.8: ½·max(0.09, 0.36)
		{"at the target", 0.7, 0.4, 0.7, 0.5, 0, 0, 0},                       // V_clip = V = R
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultLossConfig()
			c.Critic = CriticConfig{Coef: 1, Clip: tc.eps}
			l, err := NewLoss(c)
			if err != nil {
				t.Fatal(err)
			}
			b := build(seqSpec{mask: "m"})
			b.Advantages, b.Returns, b.Values = []float32{0}, []float32{float32(tc.ret)}, []float32{float32(tc.vOld)}
			var out Output
			if err := l.Compute(&out, b, Current{Logprobs: []float32{0}, Values: []float32{float32(tc.v)}}); err != nil {
				t.Fatal(err)
			}
			if !near(out.Loss, tc.loss, 1e-6) || !near(float64(out.DValues[0]), tc.grad, 1e-6) || out.Metrics["critic/vf_clipfrac"] != tc.clipped {
				t.Fatalf("loss %v dV %v clipfrac %v, want %v %v %v", out.Loss, out.DValues[0], out.Metrics["critic/vf_clipfrac"], tc.loss, tc.grad, tc.clipped)
			}
		})
	}
}

func TestCorrections(t *testing.T) {
	// Three masked tokens with behaviour→old log ratios ln 3, ln 0.5, 0; ratio π/π_old = 1, A = 1:
	// REINFORCE's token loss is −w, so the loss reads the applied weights directly (token-sum).
	tests := []struct {
		name    string
		c       CorrectionConfig
		weights []float64
		metric  string
		value   float64
	}{
		{"none", CorrectionConfig{}, []float64{1, 1, 1}, "is/weight_max", 3},
		{"token", CorrectionConfig{Level: "token"}, []float64{3, 0.5, 1}, "is/weight_p50", 1},
		{"token truncated", CorrectionConfig{Level: "token", Cap: 2}, []float64{2, 0.5, 1}, "is/truncated_frac", 1.0 / 3},
		{"icepop mask", CorrectionConfig{Level: "token", MaskLow: 0.6, MaskHigh: 2}, []float64{0, 0, 1}, "is/masked_frac", 2.0 / 3},
		{"sequence", CorrectionConfig{Level: "sequence"}, []float64{1.5, 1.5, 1.5}, "is/weight_mean", 1.5},
		{"sequence truncated", CorrectionConfig{Level: "sequence", Cap: 1.2}, []float64{1.2, 1.2, 1.2}, "is/truncated_frac", 1},
		// mean k3 = ((3 − ln3 − 1) + (0.5 − ln0.5 − 1) + 0)/3 = 0.3354: rejected at 0.3, kept at 0.4.
		{"rejected", CorrectionConfig{RejectKL: 0.3}, []float64{0, 0, 0}, "is/rejected_seqs", 1},
		{"not rejected", CorrectionConfig{RejectKL: 0.4}, []float64{1, 1, 1}, "is/rejected_seqs", 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultLossConfig().WithPolicy("reinforce")
			c.Agg, c.Correction = AggTokenSum, tc.c
			l, err := NewLoss(c)
			if err != nil {
				t.Fatal(err)
			}
			b := build(seqSpec{mask: "mmm"})
			b.Behaviour = []float32{float32(-1 - math.Log(3)), float32(-1 - math.Log(0.5)), -1}
			b.Old = []float32{-1, -1, -1}
			b.Advantages = []float32{1, 1, 1}
			var out Output
			if err := l.Compute(&out, b, Current{Logprobs: []float32{-1, -1, -1}}); err != nil {
				t.Fatal(err)
			}
			want := 0.0
			for i, w := range tc.weights {
				want -= w
				if !near(float64(out.DLogprobs[i]), -w, 1e-5) {
					t.Errorf("token %d: grad %v, want %v", i, out.DLogprobs[i], -w)
				}
			}
			if !near(out.Loss, want, 1e-5) || !near(out.Metrics[tc.metric], tc.value, 1e-5) {
				t.Fatalf("loss %v %s %v, want %v %v", out.Loss, tc.metric, out.Metrics[tc.metric], want, tc.value)
			}
		})
	}
}

func TestQuantilesAndESS(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, n := range []int{1, 2, 7, 100, 1001} {
		x := make([]float64, n)
		for i := range x {
			x[i] = math.Floor(rng.Float64() * 20) // ties on purpose
		}
		sorted := append([]float64(nil), x...)
		slices.Sort(sorted)
		qs := []float64{0, 0.5, 0.9, 0.99, 1}
		got := make([]float64, len(qs))
		quantiles(got, append([]float64(nil), x...), qs)
		for i, q := range qs {
			pos := q * float64(n-1)
			k := int(math.Floor(pos))
			want := sorted[k]
			if k+1 < n {
				want += (pos - float64(k)) * (sorted[k+1] - sorted[k])
			}
			if !near(got[i], want, 1e-12) {
				t.Errorf("n=%d q=%v: %v, want %v", n, q, got[i], want)
			}
		}
	}
	m := Metrics{}
	weightMetrics([]float64{1, 1, 1, 1}, m)
	if m["is/ess"] != 1 {
		t.Fatalf("ESS of equal weights %v, want 1", m["is/ess"])
	}
	weightMetrics([]float64{4, 0, 0, 0}, m)
	if m["is/ess"] != 0.25 {
		t.Fatalf("ESS of one weight %v, want 1/4", m["is/ess"])
	}
}

func TestLossConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		edit func(*LossConfig)
		want string
	}{
		{"default", func(*LossConfig) {}, ""},
		{"unknown policy", func(c *LossConfig) { c.Policy = "grpo" }, "valid: cispo, gspo, ppo, reinforce, sapo"},
		{"unknown agg", func(c *LossConfig) { c.Agg = "mean" }, "valid: token-mean, token-sum"},
		{"unused sub-config", func(c *LossConfig) { c.SAPO.TauPos = 1 }, "sapo.* does nothing"},
		{"norm without mode", func(c *LossConfig) { c.AggNorm = 10 }, "agg_norm does nothing"},
		{"norm missing", func(c *LossConfig) { c.Agg = AggSeqMeanTokenSumNm }, "agg_norm"},
		{"dr-grpo norm missing", func(c *LossConfig) { c.Agg = AggDrGRPO }, "agg_norm"},
		{"clip low ≥ 1", func(c *LossConfig) { c.PPO.ClipLow = 1 }, "clip_low"},
		{"dual clip ≤ 1", func(c *LossConfig) { c.PPO.DualClip = 0.5 }, "dual_clip"},
		{"kl estimator unknown", func(c *LossConfig) { c.KL = KLLossConfig{Estimator: "kl", Coef: 1} }, "unknown KL estimator"},
		{"kl without coef", func(c *LossConfig) { c.KL = KLLossConfig{Estimator: "k3"} }, "kl.coef"},
		{"critic clip alone", func(c *LossConfig) { c.Critic.Clip = 0.2 }, "critic.clip does nothing"},
		{"cap without level", func(c *LossConfig) { c.Correction.Cap = 2 }, "without a level"},
		{"bad mask", func(c *LossConfig) { c.Correction = CorrectionConfig{Level: "token", MaskLow: 2, MaskHigh: 1} }, "mask"},
		{"negative entropy", func(c *LossConfig) { c.EntropyCoef = -1 }, "entropy_coef"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultLossConfig()
			tc.edit(&c)
			err := c.Validate()
			if (err == nil) != (tc.want == "") || (err != nil && !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("Validate() = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestLossInputErrors(t *testing.T) {
	l, _ := NewLoss(DefaultLossConfig())
	ok := func() (*Batch, Current) {
		b := build(seqSpec{mask: "m"}, seqSpec{mask: "mm"})
		b.Advantages = make([]float32, 3)
		return b, Current{Logprobs: make([]float32, 3)}
	}
	tests := []struct {
		name string
		edit func(*Batch, *Current)
		want string
	}{
		{"NaN current logprob", func(_ *Batch, c *Current) { c.Logprobs[2] = float32(math.NaN()) }, "sequence 1 token 1: current logprobs is NaN"},
		{"Inf advantage", func(b *Batch, _ *Current) { b.Advantages[0] = float32(math.Inf(-1)) }, "sequence 0 token 0: advantage is -Inf"},
		{"short logprobs", func(_ *Batch, c *Current) { c.Logprobs = c.Logprobs[:2] }, "have 2 entries"},
		{"no advantages", func(b *Batch, _ *Current) { b.Advantages = nil }, "run an Estimator"},
		{"bad offsets", func(b *Batch, _ *Current) { b.Offsets[1] = 5 }, "offsets decrease"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, c := ok()
			tc.edit(b, &c)
			var out Output
			err := l.Compute(&out, b, c)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
		})
	}
}

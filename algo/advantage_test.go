package algo

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/agentrl/agentrl/traj"
)

func TestOutcomeEstimators(t *testing.T) {
	const s3 = 0.5773502691896258 // sqrt(1/3): unbiased std of {1,0,0,1}
	tests := []struct {
		name  string
		est   string
		edit  func(*AdvantageConfig)
		seqs  []seqSpec
		want  [][]float64 // per sequence, per token
		zeroV float64     // expected adv/zero_var_groups
	}{
		{"grpo", "grpo", nil,
			[]seqSpec{{mask: ".mm", reward: 1}, {mask: ".m", reward: 0}, {mask: "m", reward: 0}, {mask: "mm", reward: 1}},
			[][]float64{{0, 0.5 / (s3 + 1e-6), 0.5 / (s3 + 1e-6)}, {0, -0.5 / (s3 + 1e-6)}, {-0.5 / (s3 + 1e-6)}, {0.5 / (s3 + 1e-6), 0.5 / (s3 + 1e-6)}}, 0},
		{"dr grpo (no std)", "grpo", func(c *AdvantageConfig) { c.GRPO.NoStd = true },
			[]seqSpec{{mask: "m", reward: 1}, {mask: "m", reward: 0}, {mask: "m", reward: 0}, {mask: "m", reward: 1}},
			[][]float64{{0.5}, {-0.5}, {-0.5}, {0.5}}, 0},
		{"grpo group of one: mean 0, std 1", "grpo", nil,
			[]seqSpec{{mask: "m", reward: 2, group: 7}},
			[][]float64{{2 / (1 + 1e-6)}}, 0},
		{"grpo all equal: zero and flagged", "grpo", nil,
			[]seqSpec{{mask: "m", reward: 0.1}, {mask: "mm", reward: 0.1}, {mask: "m", reward: 0.1}},
			[][]float64{{0}, {0, 0}, {0}}, 1},
		{"grpo failed excluded, not reward 0", "grpo", nil,
			[]seqSpec{{mask: "m", reward: 1}, {mask: "m", reward: 0}, {mask: "m", reward: 0, status: traj.StatusEnvError}, {mask: "m", reward: 5, status: traj.StatusTimeout}},
			[][]float64{{0.5 / (math.Sqrt(0.5) + 1e-6)}, {-0.5 / (math.Sqrt(0.5) + 1e-6)}, {0}, {0}}, 0},
		{"grpo sums turn and token rewards", "grpo", nil,
			[]seqSpec{{mask: "m.m", reward: 0, turns: []Turn{{0, 1, 0.5, "x"}, {2, 3, 0.5, "y"}}}, {mask: "m", reward: 0, turns: []Turn{{0, 1, 0, "x"}}}},
			[][]float64{{0.5 / (math.Sqrt(0.5) + 1e-6), 0, 0.5 / (math.Sqrt(0.5) + 1e-6)}, {-0.5 / (math.Sqrt(0.5) + 1e-6)}}, 0},
		{"rloo", "rloo", nil,
			[]seqSpec{{mask: "m", reward: 1}, {mask: "m", reward: 0}, {mask: "m", reward: 0}, {mask: "m", reward: 3, group: 1}},
			[][]float64{{1}, {-0.5}, {-0.5}, {3}}, 0},
		{"reinforce-baseline", "reinforce-baseline", nil,
			[]seqSpec{{mask: "m", reward: 1}, {mask: "m", reward: 0, group: 2}, {mask: "m", reward: 9, status: traj.StatusEnvError}, {mask: "m", reward: 2, group: 3}},
			[][]float64{{0}, {-1}, {0}, {1}}, 0},
		// Token returns: seq0 [1,1] (γ=1), seq1 [0]; mean 2/3, unbiased var 1/3.
		{"reinforce++", "reinforce++", nil,
			[]seqSpec{{mask: "m.m", reward: 1}, {mask: ".m", reward: 0, group: 1}},
			[][]float64{{(1 - 2.0/3) / math.Sqrt(1.0/3+1e-8), 0, (1 - 2.0/3) / math.Sqrt(1.0/3+1e-8)}, {0, (0 - 2.0/3) / math.Sqrt(1.0/3+1e-8)}}, 0},
		// γ = 0.5: seq0 returns [0.5, 1]; seq1 [0]; mean 0.5, var ((0)²+(0.5)²+(0.5)²)/2 = 0.25.
		{"reinforce++ discounted", "reinforce++", func(c *AdvantageConfig) { c.RPP.Gamma = 0.5 },
			[]seqSpec{{mask: "mm", reward: 1}, {mask: "m", reward: 0, group: 1}},
			[][]float64{{0, 0.5 / math.Sqrt(0.25+1e-8)}, {-0.5 / math.Sqrt(0.25+1e-8)}}, 0},
		// Group means subtracted: seq0 +0.5 on 2 tokens, seq1 −0.5 on 1, group 1 single → its raw 4 minus mean 0 → 4.
		{"reinforce++-baseline", "reinforce++-baseline", nil,
			[]seqSpec{{mask: "mm", reward: 1}, {mask: "m", reward: 0}, {mask: "m", reward: 4, group: 1}},
			whitened([][]float64{{0.5, 0.5}, {-0.5}, {4}}), 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := build(tc.seqs...)
			m := mustEstimate(t, b, tc.est, tc.edit)
			for i, want := range tc.want {
				lo, hi := b.Seq(i)
				for k, w := range want {
					if got := float64(b.Advantages[lo+k]); !near(got, w, 1e-6) {
						t.Errorf("seq %d token %d: advantage %v, want %v", i, k, got, w)
					}
				}
				if hi-lo != len(want) {
					t.Fatalf("test table: seq %d has %d tokens, want row has %d", i, hi-lo, len(want))
				}
			}
			if m["adv/zero_var_groups"] != tc.zeroV {
				t.Errorf("adv/zero_var_groups = %v, want %v", m["adv/zero_var_groups"], tc.zeroV)
			}
			for k, v := range m {
				if math.IsNaN(v) {
					t.Errorf("metric %s is NaN", k)
				}
			}
		})
	}
}

// whitened applies masked whitening with the unbiased variance to a table of token values.
func whitened(rows [][]float64) [][]float64 {
	var all []float64
	for _, r := range rows {
		all = append(all, r...)
	}
	mean := 0.0
	for _, x := range all {
		mean += x
	}
	mean /= float64(len(all))
	ss := 0.0
	for _, x := range all {
		ss += (x - mean) * (x - mean)
	}
	inv := 1 / math.Sqrt(ss/float64(len(all)-1)+1e-8)
	out := make([][]float64, len(rows))
	for i, r := range rows {
		for _, x := range r {
			out[i] = append(out[i], (x-mean)*inv)
		}
	}
	return out
}

func TestGAE(t *testing.T) {
	tests := []struct {
		name          string
		est           string
		gamma, lambda float64
		values        []float32
		want, wantRet []float64
		whiten        bool
	}{
		// Tokens m m . m, outcome 1. Token level, γ = 1, λ = 0.5: the env token is skipped.
		// t3: δ = 1 − 0.7 = 0.3; t1: δ = 0.7 − 0.6 = 0.1, A = 0.1 + 0.5·0.3 = 0.25;
		// t0: δ = 0.6 − 0.5 = 0.1, A = 0.1 + 0.5·0.25 = 0.225.
		{"token raw", "gae", 1, 0.5, []float32{0.5, 0.6, 99, 0.7},
			[]float64{0.225, 0.25, 0, 0.3}, []float64{0.725, 0.85, 0, 1}, false},
		// Turn level: turns [0,2) reward 0.1 and [3,4); V0 = 0.5, V1 = 0.7; γ = 0.9, λ = 0.5.
		// k1: δ = 1 − 0.7 = 0.3; k0: δ = 0.1 + 0.9·0.7 − 0.5 = 0.23, A = 0.23 + 0.45·0.3 = 0.365.
		{"turn raw", "gae-turn", 0.9, 0.5, []float32{0.5, 0.6, 99, 0.7},
			[]float64{0.365, 0.365, 0, 0.3}, []float64{0.865, 0.865, 0, 1}, false},
		// By default (verl's masked_whiten) the advantages are whitened over the masked tokens with
		// the unbiased variance; the returns keep the raw ones. Token: {0.225, 0.25, 0.3} has mean
		// 0.258333 and variance 0.00145833 → (A − mean)/sqrt(var + 1e-8).
		{"token whitened", "gae", 1, 0.5, []float32{0.5, 0.6, 99, 0.7},
			[]float64{-0.8728686, -0.2182171, 0, 1.0910857}, []float64{0.725, 0.85, 0, 1}, true},
		// Turn: {0.365, 0.365, 0.3} has mean 0.343333 and variance 0.00140833.
		{"turn whitened", "gae-turn", 0.9, 0.5, []float32{0.5, 0.6, 99, 0.7},
			[]float64{0.5773482, 0.5773482, 0, -1.1546964}, []float64{0.865, 0.865, 0, 1}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := build(seqSpec{mask: "mm.m", reward: 1})
			if tc.est == "gae-turn" {
				b.TurnOffsets, b.Turns = []int{0, 2}, []Turn{{Start: 0, End: 2, Reward: 0.1}, {Start: 3, End: 4}}
			} else {
				b.TokenRewards = make([]float32, 4)
			}
			b.Values = tc.values
			mustEstimate(t, b, tc.est, func(c *AdvantageConfig) {
				c.GAE = GAEConfig{Gamma: tc.gamma, Lambda: tc.lambda, NoWhiten: !tc.whiten}
			})
			for i := range tc.want {
				if !near(float64(b.Advantages[i]), tc.want[i], 1e-6) || !near(float64(b.Returns[i]), tc.wantRet[i], 1e-6) {
					t.Errorf("token %d: advantage %v return %v, want %v %v", i, b.Advantages[i], b.Returns[i], tc.want[i], tc.wantRet[i])
				}
			}
		})
	}
}

// stepBatch: three trajectories of one group, two turns each (one assistant token per turn, one
// env token after it). τ1 anchors s0,s1 outcome 1; τ2 s0,s1 outcome 0; τ3 s0,s2 outcome 1.
func stepBatch() *Batch {
	turns := func(a1 string) []Turn {
		return []Turn{{Start: 0, End: 1, Anchor: "s0"}, {Start: 2, End: 3, Anchor: a1}}
	}
	return build(
		seqSpec{mask: "m.m.", reward: 1, turns: turns("s1")},
		seqSpec{mask: "m.m.", reward: 0, turns: turns("s1")},
		seqSpec{mask: "m.m.", reward: 1, turns: turns("s2")},
	)
}

func TestStepLevelEstimators(t *testing.T) {
	const (
		ae = 0.5773502691896258 // episode: (1 − 2/3)/sqrt(1/3)
		r3 = 0.7071067811865476
	)
	tests := []struct {
		name string
		est  string
		edit func(*AdvantageConfig)
		want [3][2]float64 // per trajectory, per turn
	}{
		// Episode A^E = [ae, −2ae, ae]. Step group s0 returns [0.5, 0, 0.5] (γ = 0.5) → [ae, −2ae, ae];
		// s1 returns [1, 0] → [r3, −r3]; s2 is a singleton → 0.
		{"gigpo", "gigpo", func(c *AdvantageConfig) { c.GiGPO.Gamma = 0.5 },
			[3][2]float64{{2 * ae, ae + r3}, {-4 * ae, -2*ae - r3}, {2 * ae, ae}}},
		// First-turn returns [0.5, 0, 0.5]: mean 1/3, std sqrt(1/12).
		{"turn-return", "turn-return", func(c *AdvantageConfig) { c.TurnRe.Gamma = 0.5 },
			[3][2]float64{{(0.5 - 1.0/3) / math.Sqrt(1.0/12), (1 - 1.0/3) / math.Sqrt(1.0/12)}, {(-1.0 / 3) / math.Sqrt(1.0/12), (-1.0 / 3) / math.Sqrt(1.0/12)}, {(0.5 - 1.0/3) / math.Sqrt(1.0/12), (1 - 1.0/3) / math.Sqrt(1.0/12)}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := stepBatch()
			m := mustEstimate(t, b, tc.est, tc.edit)
			for i := 0; i < 3; i++ {
				lo, _ := b.Seq(i)
				for k := 0; k < 2; k++ {
					if got := float64(b.Advantages[lo+2*k]); !near(got, tc.want[i][k], 1e-5) {
						t.Errorf("traj %d turn %d: advantage %v, want %v", i, k, got, tc.want[i][k])
					}
					if b.Advantages[lo+2*k+1] != 0 {
						t.Errorf("traj %d: env token has advantage %v", i, b.Advantages[lo+2*k+1])
					}
				}
			}
			if tc.est == "gigpo" && !near(m["adv/singleton_step_frac"], 1.0/6, 1e-12) {
				t.Errorf("singleton_step_frac = %v, want 1/6", m["adv/singleton_step_frac"])
			}
		})
	}
}

// TestStepLevelCountUntrainedReward: a fourth, non-failed episode of the group with no
// loss-masked token (reward 1) gets no advantage but counts with its reward in the group's
// statistics, as GRPO and RLOO count it (not as return 0).
func TestStepLevelCountUntrainedReward(t *testing.T) {
	const (
		ae = 0.5773502691896258 // step group s0, as in TestStepLevelEstimators
		r3 = 0.7071067811865476
	)
	// Episode returns [1, 0, 1, 1]: mean 0.75, unbiased std 0.5 → A^E = [0.5, −1.5, 0.5].
	// turn-return (γ = 0.5): first-turn returns [0.5, 0, 0.5, 1]: mean 0.5, std sqrt(1/6).
	sd := math.Sqrt(1.0/6) + 1e-6
	tests := []struct {
		est  string
		edit func(*AdvantageConfig)
		want [3][2]float64
	}{
		{"gigpo", func(c *AdvantageConfig) { c.GiGPO.Gamma = 0.5 },
			[3][2]float64{{0.5 + ae, 0.5 + r3}, {-1.5 - 2*ae, -1.5 - r3}, {0.5 + ae, 0.5}}},
		{"turn-return", func(c *AdvantageConfig) { c.TurnRe.Gamma = 0.5 },
			[3][2]float64{{0, 0.5 / sd}, {-0.5 / sd, -0.5 / sd}, {0, 0.5 / sd}}},
	}
	for _, tc := range tests {
		t.Run(tc.est, func(t *testing.T) {
			b := stepBatch()
			untrained := build(seqSpec{mask: "..", reward: 1, turns: []Turn{{Start: 0, End: 2, Anchor: "s0"}}})
			b.Mask = append(b.Mask, untrained.Mask...)
			b.Behaviour = append(b.Behaviour, untrained.Behaviour...)
			b.Offsets = append(b.Offsets, b.Offsets[3]+2)
			b.Groups, b.Rewards, b.Status = append(b.Groups, 0), append(b.Rewards, 1), append(b.Status, traj.StatusOK)
			b.Turns = append(b.Turns, untrained.Turns...)
			b.TurnOffsets = append(b.TurnOffsets, len(b.Turns))
			mustEstimate(t, b, tc.est, tc.edit)
			for i := 0; i < 3; i++ {
				lo, _ := b.Seq(i)
				for k := 0; k < 2; k++ {
					if got := float64(b.Advantages[lo+2*k]); !near(got, tc.want[i][k], 1e-5) {
						t.Errorf("traj %d turn %d: advantage %v, want %v", i, k, got, tc.want[i][k])
					}
				}
			}
			if lo, hi := b.Seq(3); b.Advantages[lo] != 0 || b.Advantages[hi-1] != 0 {
				t.Errorf("untrained episode got advantages %v", b.Advantages[lo:hi])
			}
		})
	}
}

func TestTurnReturnReducesToGRPO(t *testing.T) {
	a, b := stepBatch(), stepBatch()
	mustEstimate(t, a, "turn-return", func(c *AdvantageConfig) { c.TurnRe.Gamma = 1 })
	mustEstimate(t, b, "grpo", nil)
	for i := range a.Advantages {
		if !near(float64(a.Advantages[i]), float64(b.Advantages[i]), 1e-6) {
			t.Fatalf("token %d: turn-return γ=1 %v, grpo %v", i, a.Advantages[i], b.Advantages[i])
		}
	}
}

func TestEstimatorsPermutationAndFailures(t *testing.T) {
	for _, name := range Estimators().Names() {
		t.Run(name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, 2))
			b, _ := randomBatch(rng, 16, 30)
			mustEstimate(t, b, name, nil)
			perm := rng.Perm(b.NumSeqs())
			p, err := b.Select(perm)
			if err != nil {
				t.Fatal(err)
			}
			p.Advantages, p.Returns = nil, nil
			mustEstimate(t, p, name, nil)
			for j, i := range perm {
				lo, hi := b.Seq(i)
				plo, _ := p.Seq(j)
				for k := 0; k < hi-lo; k++ {
					if !near(float64(b.Advantages[lo+k]), float64(p.Advantages[plo+k]), 1e-5) {
						t.Fatalf("seq %d token %d: %v, after permutation %v", i, k, b.Advantages[lo+k], p.Advantages[plo+k])
					}
					if !b.Mask[lo+k] && b.Advantages[lo+k] != 0 {
						t.Fatalf("seq %d token %d: unmasked token has advantage %v", i, k, b.Advantages[lo+k])
					}
					if b.failed(i) && b.Advantages[lo+k] != 0 {
						t.Fatalf("failed seq %d has advantage %v", i, b.Advantages[lo+k])
					}
				}
			}
		})
	}
}

func TestEstimatorErrors(t *testing.T) {
	nan := build(seqSpec{mask: "m"}, seqSpec{mask: "mm"}, seqSpec{mask: "m"})
	nan.Behaviour[2] = float32(math.NaN())
	inf := build(seqSpec{mask: "m"}, seqSpec{mask: "m"})
	inf.Rewards[1] = math.Inf(1)
	noGroups := build(seqSpec{mask: "m"})
	noGroups.Groups = nil
	noTurns := build(seqSpec{mask: "m"})
	noAnchor := build(seqSpec{mask: "m", turns: []Turn{{Start: 0, End: 1}}})
	outside := build(seqSpec{mask: "mm", turns: []Turn{{Start: 0, End: 1, Anchor: "a"}}})
	badTurn := build(seqSpec{mask: "mm", turns: []Turn{{Start: 1, End: 3}}})
	tests := []struct {
		name, est string
		b         *Batch
		want      string
	}{
		{"NaN behaviour names the sequence", "grpo", nan, "sequence 1 token 1: behaviour logprob is NaN"},
		{"Inf reward names the sequence", "rloo", inf, "sequence 1: outcome reward is +Inf"},
		{"grpo without groups", "grpo", noGroups, "needs group ids"},
		{"gae without values", "gae", build(seqSpec{mask: "m"}), "needs rollout values"},
		{"turn level without turns", "gae-turn", noTurns, "needs turn boundaries"},
		{"gigpo without anchor", "gigpo", noAnchor, "no anchor-state key"},
		{"masked token outside turns", "turn-return", outside, "outside every turn"},
		{"turn out of range", "grpo", badTurn, "bad range"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, _ := DefaultAdvantageConfig(tc.est)
			e, err := NewEstimator(c)
			if err != nil {
				t.Fatal(err)
			}
			if tc.b.Values == nil && tc.est == "gae-turn" {
				tc.b.Values = make([]float32, tc.b.NumTokens())
			}
			_, err = e.Estimate(tc.b)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

func TestAdvantageConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		c    AdvantageConfig
		want string // "" = valid
	}{
		{"default grpo", AdvantageConfig{Name: "grpo"}, ""},
		{"unknown lists valid", AdvantageConfig{Name: "ppo"}, "valid: gae, gae-turn, gigpo, grpo, reinforce++"},
		{"unused sub-config", AdvantageConfig{Name: "grpo", GAE: GAEConfig{Gamma: 1}}, "gae.* does nothing"},
		{"gae gamma zero", AdvantageConfig{Name: "gae", GAE: GAEConfig{Lambda: 1}}, "gamma"},
		{"gae lambda > 1", AdvantageConfig{Name: "gae", GAE: GAEConfig{Gamma: 1, Lambda: 1.5}}, "lambda"},
		{"gigpo omega", AdvantageConfig{Name: "gigpo", GiGPO: GiGPOConfig{Gamma: 1}}, "step_weight"},
		{"rpp baseline gamma", AdvantageConfig{Name: "reinforce++-baseline", RPP: RPPConfig{Gamma: 0.9}}, "no discount"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.c.Validate()
			if (err == nil) != (tc.want == "") || (err != nil && !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("Validate() = %v, want %q", err, tc.want)
			}
		})
	}
	for _, n := range Estimators().Names() {
		c, err := DefaultAdvantageConfig(n)
		if err != nil || c.Validate() != nil {
			t.Errorf("default config of %s: %v / %v", n, err, c.Validate())
		}
	}
}

func TestRegistryIsolation(t *testing.T) {
	r := Estimators()
	if err := r.Register("mine", func(AdvantageConfig) (Estimator, error) { return grpo{}, nil }); err != nil {
		t.Fatal(err)
	}
	if err := r.Register("grpo", newGRPO); err == nil {
		t.Fatal("duplicate registration accepted")
	}
	if slices.Contains(Estimators().Names(), "mine") {
		t.Fatal("registration leaked into a fresh registry")
	}
	if _, err := r.New(AdvantageConfig{Name: "mine"}); err != nil {
		t.Fatal(err)
	}
}

package learn

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/agentrl/agentrl/algo"
	"github.com/agentrl/agentrl/traj"
)

// twoTurns is an episode of two assistant turns with a tool response between them: prompt (user),
// answer a (assistant), obs (tool), answer b (assistant).
func twoTurns(id string, group uint64, prompt, a, obs, b []int32, rew float64) *traj.Trajectory {
	t := episode(id, group, prompt, a, rew)
	for _, x := range obs {
		t.Tokens = append(t.Tokens, x)
		t.Roles = append(t.Roles, traj.RoleTool)
		t.LossMask = append(t.LossMask, false)
		t.Logprobs = append(t.Logprobs, 0)
		t.Versions = append(t.Versions, traj.NoVersion)
	}
	t.Turns[0].ObsEnd = len(t.Tokens)
	start := len(t.Tokens)
	for _, x := range b {
		t.Tokens = append(t.Tokens, x)
		t.Roles = append(t.Roles, traj.RoleAssistant)
		t.LossMask = append(t.LossMask, true)
		t.Logprobs = append(t.Logprobs, -3.4)
		t.Versions = append(t.Versions, 0)
	}
	t.Turns = append(t.Turns, traj.Turn{Start: start, End: len(t.Tokens), ObsEnd: len(t.Tokens)})
	return t
}

func ppoGAE(t *testing.T, estimator string) (algo.Estimator, *algo.Loss) {
	t.Helper()
	ac, err := algo.DefaultAdvantageConfig(estimator)
	if err != nil {
		t.Fatal(err)
	}
	est, err := algo.NewEstimator(ac)
	if err != nil {
		t.Fatal(err)
	}
	lc := algo.DefaultLossConfig()
	lc.Critic = algo.CriticConfig{Coef: 0.5, Clip: 0.5}
	loss, err := algo.NewLoss(lc)
	if err != nil {
		t.Fatal(err)
	}
	return est, loss
}

// PPO with GAE trains the value head with the policy: over repeated steps on one batch the value
// loss falls and the values of the sampled tokens approach their returns; tool tokens never get a
// value.
func TestPPOGAEStepTrainsTheCritic(t *testing.T) {
	for _, name := range []string{"gae", "gae-turn"} {
		t.Run(name, func(t *testing.T) {
			m := tinyModel(t, 6)
			m.AddValueHead()
			l := newLearner(t, m, 3e-3)
			prompt := []int32{1, 2, 3}
			trajs := []*traj.Trajectory{
				twoTurns("good", 7, prompt, []int32{4, 5}, []int32{20, 21, 22}, []int32{8, 9}, 1),
				twoTurns("bad", 7, prompt, []int32{6, 7}, []int32{23, 24}, []int32{10, 11}, 0),
				episode("short", 8, []int32{1, 3}, []int32{12, 13, 14}, 1),
			}
			est, loss := ppoGAE(t, name)
			upd := &RL{Learner: l, Estimator: est, Loss: loss, Epochs: 2, Minibatches: 1}
			rng := rand.New(rand.NewPCG(5, 5))
			var first, last RLReport
			for step := range 40 {
				rep, err := upd.Step(trajs, int32(step), rng)
				if err != nil {
					t.Fatal(err)
				}
				if _, ok := rep.Metrics["critic/value_loss"]; !ok || rep.Updates != 2 {
					t.Fatalf("step %d: %d updates, metrics %v", step, rep.Updates, rep.Metrics)
				}
				if step == 0 {
					first = rep
				}
				last = rep
			}
			v0, v1 := first.Metrics["critic/value_loss"], last.Metrics["critic/value_loss"]
			t.Logf("value loss %.4g → %.4g, explained variance %v → %v", v0, v1, first.Estimator["adv/value_explained_var"], last.Estimator["adv/value_explained_var"])
			if !(v1 < 0.25*v0) {
				t.Fatalf("value loss %v → %v over 40 steps, want it to fall below a quarter", v0, v1)
			}
			if ev := last.Estimator["adv/value_explained_var"]; !(ev > 0.5) {
				t.Fatalf("explained variance %v after 40 steps, want > 0.5", ev)
			}

			// The values of the batch as the next step would see them: close to the outcome on
			// every sampled token (γ = 1, no intermediate reward), 0 on every other token. "good"
			// and "bad" share their prompt, so the state their first token is sampled in is the
			// same: its value is the mean of their outcomes.
			b, err := algo.FromTrajectories(trajs)
			if err != nil {
				t.Fatal(err)
			}
			lp, val := make([]float32, b.NumTokens()), make([]float32, b.NumTokens())
			if err := l.LogprobsValues(m, b, 8, lp, nil, val); err != nil {
				t.Fatal(err)
			}
			for i := range b.NumSeqs() {
				lo, hi := b.Seq(i)
				for k := lo; k < hi; k++ {
					want := b.Rewards[i]
					if k-lo == len(prompt) && i < 2 {
						want = 0.5
					}
					switch {
					case !b.Mask[k] && val[k] != 0:
						t.Fatalf("%s token %d (%s) has value %v", b.IDs[i], k-lo, b.Roles[k], val[k])
					case b.Mask[k] && math.Abs(float64(val[k])-want) > 0.3:
						t.Errorf("%s token %d: value %v, want about %v", b.IDs[i], k-lo, val[k], want)
					}
				}
			}
		})
	}
}

// A critic loss or a critic estimator on a model without a value head is an error, not a silent
// zero value.
func TestCriticNeedsValueHead(t *testing.T) {
	m := tinyModel(t, 7)
	l := newLearner(t, m, 1e-3)
	est, loss := ppoGAE(t, "gae")
	trajs := []*traj.Trajectory{episode("a", 1, []int32{1, 2}, []int32{3, 4}, 1), episode("b", 1, []int32{1, 2}, []int32{5, 6}, 0)}
	upd := &RL{Learner: l, Estimator: est, Loss: loss, Epochs: 1, Minibatches: 1}
	if _, err := upd.Step(trajs, 0, rand.New(rand.NewPCG(1, 1))); err == nil || !strings.Contains(err.Error(), "value head") {
		t.Fatalf("err = %v, want one naming the value head", err)
	}
	grpo, _ := algo.NewEstimator(algo.AdvantageConfig{Name: "grpo"})
	upd.Estimator = grpo
	if _, err := upd.Step(trajs, 0, rand.New(rand.NewPCG(1, 1))); err == nil || !strings.Contains(err.Error(), "value head") {
		t.Fatalf("err = %v, want one naming the value head", err)
	}
}

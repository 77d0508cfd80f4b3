package algo_test

import (
	"fmt"
	"math/rand/v2"

	"github.com/agentrl/agentrl/algo"
	"github.com/agentrl/agentrl/traj"
)

// A learner's step: GRPO advantages once for the batch, then PPO-clip per minibatch; the
// gradients go to the model's backward pass.
func Example() {
	// One group of four answers to the same task; two right, two wrong. Each trajectory is a
	// one-token prompt followed by a two-token assistant answer.
	var trajs []*traj.Trajectory
	for i, r := range []float64{1, 0, 0, 1} {
		trajs = append(trajs, &traj.Trajectory{
			ID: fmt.Sprint("t", i), GroupID: 7, Reward: r,
			Tokens:   []int32{1, 2, 3},
			Roles:    []traj.Role{traj.RoleUser, traj.RoleAssistant, traj.RoleAssistant},
			LossMask: []bool{false, true, true},
			Logprobs: []float32{0, -1, -1},
			Versions: []int32{traj.NoVersion, 0, 0},
			Turns:    []traj.Turn{{Start: 1, End: 3, ObsEnd: 3}},
		})
	}
	b, err := algo.FromTrajectories(trajs)
	if err != nil {
		panic(err)
	}
	est, _ := algo.NewEstimator(algo.AdvantageConfig{Name: "grpo"})
	if _, err := est.Estimate(b); err != nil {
		panic(err)
	}
	fmt.Printf("advantages %.3f\n", b.Advantages)

	loss, _ := algo.NewLoss(algo.DefaultLossConfig()) // PPO-clip, ε = 0.2, token-mean
	rng := rand.New(rand.NewPCG(1, 2))
	mbs, _ := b.Minibatches(1, rng)
	var out algo.Output
	for _, idx := range mbs {
		mb, _ := b.Select(idx)
		// The model's logprobs under the weights being trained: here the answer tokens moved up
		// by 0.1 (ratio e^0.1 ≈ 1.105, inside the clip range).
		cur := algo.Current{Logprobs: make([]float32, mb.NumTokens()), PolicyVersion: 1}
		for t := range cur.Logprobs {
			cur.Logprobs[t] = mb.Behaviour[t] + 0.1
		}
		if err := loss.Compute(&out, mb, cur); err != nil {
			panic(err)
		}
		fmt.Printf("sequences %v loss %.4f clipfrac %.2f\n", idx, out.Loss, out.Metrics["loss/pg_clipfrac"])
		fmt.Printf("d loss / d logprob %.4f\n", out.DLogprobs)
	}
	// Output:
	// advantages [0.000 0.866 0.866 0.000 -0.866 -0.866 0.000 -0.866 -0.866 0.000 0.866 0.866]
	// sequences [2 3 1 0] loss 0.0000 clipfrac 0.00
	// d loss / d logprob [0.0000 0.1196 0.1196 0.0000 -0.1196 -0.1196 0.0000 0.1196 0.1196 0.0000 -0.1196 -0.1196]
}

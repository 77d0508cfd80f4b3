package learn

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/agentrl/agentrl/algo"
	"github.com/agentrl/agentrl/model"
	"github.com/agentrl/agentrl/traj"
)

// With adapters the learner trains them alone, with the same losses: SFT lowers the loss and an
// RL step raises the rewarded answer, and the base weights stay as they were.
func TestLoRATrainsAdaptersOnly(t *testing.T) {
	m := tinyModel(t, 2)
	// With the embedding and the final norm frozen, logits can only be as large as the
	// embeddings let them: at initialization's scale (0.02) no adapter could fit the data.
	for i := range m.Params.Embed {
		m.Params.Embed[i] *= 30
	}
	if err := m.AddLoRA(model.LoRAConfig{Rank: 4, Alpha: 8, Targets: []string{"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}}, 1); err != nil {
		t.Fatal(err)
	}
	base := slices.Clone(m.Params.Data)
	adapters := slices.Clone(m.LoRA.Data)
	l := newLearner(t, m, 1e-2)
	if l.Opt == nil {
		t.Fatal("no optimizer")
	}
	data := []*traj.Trajectory{
		episode("a", 1, []int32{1, 2}, []int32{3, 4, 5, 6}, 1),
		episode("b", 2, []int32{7, 2}, []int32{8, 9, 10, 11}, 1),
	}
	first, err := l.SFTStep(data)
	if err != nil {
		t.Fatal(err)
	}
	var last SFTStats
	for range 60 {
		if last, err = l.SFTStep(data); err != nil {
			t.Fatal(err)
		}
	}
	if !(last.Loss < first.Loss*0.5) {
		t.Fatalf("loss %v -> %v over 60 steps of the adapters", first.Loss, last.Loss)
	}
	if !slices.Equal(base, m.Params.Data) {
		t.Fatal("the frozen base weights changed")
	}
	if slices.Equal(adapters, m.LoRA.Data) {
		t.Fatal("the adapters did not change")
	}

	// RL: the rewarded answer gains on the other (the margin between their logprobs grows), the
	// base stays.
	prompt := []int32{1, 2, 3}
	trajs := []*traj.Trajectory{episode("good", 7, prompt, []int32{4, 5}, 1), episode("bad", 7, prompt, []int32{6, 7}, 0)}
	mean := func() (float64, float64) { return sumsOfTwo(t, l, m, trajs) }
	g0, b0 := mean()
	est, _ := algo.NewEstimator(algo.AdvantageConfig{Name: "grpo"})
	loss, _ := algo.NewLoss(algo.DefaultLossConfig())
	rng := rand.New(rand.NewPCG(1, 1))
	upd := &RL{Learner: l, Estimator: est, Loss: loss, Epochs: 1, Minibatches: 1}
	for step := range 5 {
		if _, err := upd.Step(trajs, int32(step), rng); err != nil {
			t.Fatal(err)
		}
	}
	g1, b1 := mean()
	if !(g1-b1 > g0-b0+1) {
		t.Fatalf("rewarded answer logprob %v -> %v, unrewarded %v -> %v", g0, g1, b0, b1)
	}
	if !slices.Equal(base, m.Params.Data) {
		t.Fatal("an RL step changed the frozen base weights")
	}
}

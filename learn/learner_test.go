package learn

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/agentrl/agentrl/algo"
	"github.com/agentrl/agentrl/model"
	"github.com/agentrl/agentrl/optim"
	"github.com/agentrl/agentrl/traj"
)

func tinyModel(t *testing.T, seed uint64) *model.Model {
	t.Helper()
	m, err := model.New(model.Config{Vocab: 32, Dim: 32, Layers: 2, Heads: 4, KVHeads: 2, Hidden: 48, MaxSeq: 64,
		RopeTheta: 10000, NormEps: 1e-5, TieEmbeddings: true}, seed)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// episode builds a trajectory: prompt tokens (user), then an assistant answer.
func episode(id string, group uint64, prompt, answer []int32, rew float64) *traj.Trajectory {
	t := &traj.Trajectory{ID: id, GroupID: group, Reward: rew}
	for _, x := range prompt {
		t.Tokens = append(t.Tokens, x)
		t.Roles = append(t.Roles, traj.RoleUser)
		t.LossMask = append(t.LossMask, false)
		t.Logprobs = append(t.Logprobs, 0)
		t.Versions = append(t.Versions, traj.NoVersion)
	}
	start := len(t.Tokens)
	for _, x := range answer {
		t.Tokens = append(t.Tokens, x)
		t.Roles = append(t.Roles, traj.RoleAssistant)
		t.LossMask = append(t.LossMask, true)
		t.Logprobs = append(t.Logprobs, -3.4)
		t.Versions = append(t.Versions, 0)
	}
	t.Turns = []traj.Turn{{Start: start, End: len(t.Tokens), ObsEnd: len(t.Tokens)}}
	return t
}

func newLearner(t *testing.T, m *model.Model, lr float32) *Learner {
	t.Helper()
	l, err := New(m, Config{ScheduleConfig: optim.ScheduleConfig{LR: float64(lr), MinLRRatio: 1}, Config: optim.Config{Beta1: 0.9, Beta2: 0.99, Eps: 1e-8}, GradClip: 1}, 1000, 32)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestPackRoundTrip(t *testing.T) {
	seqs := [][]int32{{1, 2, 3}, {4, 5, 6, 7, 8}, {9, 10}, {11, 12, 13, 14}}
	p, err := Pack(seqs, nil, 6)
	if err != nil {
		t.Fatal(err)
	}
	b := p.Batch
	for i, s := range seqs {
		for j := 1; j < len(s); j++ {
			pos := p.Where[i] + j - 1
			if b.Tokens[pos] != s[j-1] || b.Targets[pos] != s[j] || b.Pos[pos] != int32(j-1) {
				t.Fatalf("seq %d token %d: input %d target %d pos %d", i, j, b.Tokens[pos], b.Targets[pos], b.Pos[pos])
			}
		}
	}
	if b.Rows != 2 {
		t.Fatalf("rows = %d, want 2 (4+2 and 3+1 positions fit in rows of 6)", b.Rows)
	}
	if _, err := Pack([][]int32{make([]int32, 9)}, nil, 6); err == nil {
		t.Fatal("a sequence longer than a row was accepted")
	}
}

// Logprobs of a sequence must not depend on what it is packed with.
func TestLogprobsIndependentOfPacking(t *testing.T) {
	m := tinyModel(t, 1)
	l := newLearner(t, m, 1e-3)
	a := episode("a", 1, []int32{1, 2, 3}, []int32{4, 5, 6}, 1)
	b := episode("b", 1, []int32{7, 8}, []int32{9, 10, 11, 12}, 0)
	both := []*traj.Trajectory{a, b}
	batch, err := algo.FromTrajectories(both)
	if err != nil {
		t.Fatal(err)
	}
	together := make([]float32, batch.NumTokens())
	if err := l.Logprobs(m, batch, 8, together, nil); err != nil {
		t.Fatal(err)
	}
	apart := make([]float32, batch.NumTokens())
	if err := l.Logprobs(m, batch, 1, apart, nil); err != nil {
		t.Fatal(err)
	}
	for i := range together {
		if math.Abs(float64(together[i]-apart[i])) > 1e-5 {
			t.Fatalf("token %d: %v packed together, %v apart", i, together[i], apart[i])
		}
		if !batch.Mask[i] && together[i] != 0 {
			t.Fatalf("unmasked token %d got logprob %v", i, together[i])
		}
	}
}

// Supervised steps lower the loss on what they train on (counted in steps).
func TestSFTLowersLoss(t *testing.T) {
	m := tinyModel(t, 2)
	l := newLearner(t, m, 3e-3)
	data := []*traj.Trajectory{
		episode("a", 1, []int32{1, 2}, []int32{3, 4, 5, 6}, 1),
		episode("b", 2, []int32{7, 2}, []int32{8, 9, 10, 11}, 1),
	}
	first, err := l.SFTStep(data)
	if err != nil {
		t.Fatal(err)
	}
	var last SFTStats
	for i := 0; i < 40; i++ {
		if last, err = l.SFTStep(data); err != nil {
			t.Fatal(err)
		}
	}
	if !(last.Loss < first.Loss*0.5) || first.Tokens != 8 {
		t.Fatalf("loss %v -> %v over 40 steps (%d tokens)", first.Loss, last.Loss, first.Tokens)
	}
	if l.Step != 41 {
		t.Fatalf("learner counted %d steps, want 41", l.Step)
	}
}

// An RL step raises the logprob of the rewarded answer and lowers the other's.
func TestRLStepFollowsAdvantage(t *testing.T) {
	m := tinyModel(t, 3)
	l := newLearner(t, m, 2e-3)
	prompt := []int32{1, 2, 3}
	good := episode("good", 7, prompt, []int32{4, 5}, 1)
	bad := episode("bad", 7, prompt, []int32{6, 7}, 0)
	trajs := []*traj.Trajectory{good, bad}
	mean := func() (float64, float64) { return sumsOfTwo(t, l, m, trajs) }
	g0, b0 := mean()
	est, _ := algo.NewEstimator(algo.AdvantageConfig{Name: "grpo"})
	loss, _ := algo.NewLoss(algo.DefaultLossConfig())
	rng := rand.New(rand.NewPCG(1, 1))
	upd := &RL{Learner: l, Estimator: est, Loss: loss, Epochs: 1, Minibatches: 1}
	for step := 0; step < 5; step++ {
		rep, err := upd.Step(trajs, int32(step), rng)
		if err != nil {
			t.Fatal(err)
		}
		if rep.Updates != 1 || !(rep.GradNorm > 0) {
			t.Fatalf("step %d: %d updates, grad norm %v", step, rep.Updates, rep.GradNorm)
		}
		if rep.Advantages.Effective != 2 || rep.Estimator == nil {
			t.Fatalf("step %d: %d sequences with an advantage, estimator metrics %v", step, rep.Advantages.Effective, rep.Estimator)
		}
		// The behaviour logprobs are made up, so the shift is measured against them.
		if !(rep.Shift.KL > 0) || rep.Shift.ESS <= 0 || rep.Shift.ESS > 1 || rep.Shift.LagMax != float64(step) {
			t.Fatalf("step %d: shift %+v", step, rep.Shift)
		}
	}
	g1, b1 := mean()
	if !(g1 > g0 && b1 < b0) {
		t.Fatalf("rewarded answer logprob %v -> %v, unrewarded %v -> %v", g0, g1, b0, b1)
	}
}

// A batch with only infra-failed episodes changes nothing.
func TestRLStepIgnoresFailedEpisodes(t *testing.T) {
	m := tinyModel(t, 4)
	before := slices.Clone(m.Params.Data)
	l := newLearner(t, m, 1e-2)
	a := episode("a", 1, []int32{1, 2}, []int32{3, 4}, 0)
	b := episode("b", 1, []int32{1, 2}, []int32{5, 6}, 0)
	a.Status, b.Status = traj.StatusEnvError, traj.StatusTimeout
	trajs := []*traj.Trajectory{a, b}
	batch, _ := algo.FromTrajectories(trajs)
	batch.Old = slices.Clone(batch.Behaviour)
	est, _ := algo.NewEstimator(algo.AdvantageConfig{Name: "grpo"})
	if _, err := est.Estimate(batch); err != nil {
		t.Fatal(err)
	}
	loss, _ := algo.NewLoss(algo.DefaultLossConfig())
	if _, err := l.RLStep(batch, loss, 1, 1, rand.New(rand.NewPCG(1, 2)), 0); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(before, m.Params.Data) {
		t.Fatal("infra-failed episodes moved the weights")
	}
}

// Every update of an RL step runs at the schedule's rate for that step, and the step advances the
// schedule by one, however many minibatches and epochs it takes.
func TestRLStepRunsAtItsStepsRate(t *testing.T) {
	m := tinyModel(t, 5)
	l, err := New(m, Config{ScheduleConfig: optim.ScheduleConfig{LR: 1e-3, MinLRRatio: 0.1, Warmup: 4},
		Config: optim.Config{Beta1: 0.9, Beta2: 0.99, Eps: 1e-8}, GradClip: 1}, 10, 32)
	if err != nil {
		t.Fatal(err)
	}
	prompt := []int32{1, 2, 3}
	trajs := []*traj.Trajectory{
		episode("a", 7, prompt, []int32{4, 5}, 1), episode("b", 7, prompt, []int32{6, 7}, 0),
		episode("c", 8, prompt, []int32{4, 6}, 1), episode("d", 8, prompt, []int32{5, 7}, 0),
	}
	est, _ := algo.NewEstimator(algo.AdvantageConfig{Name: "grpo"})
	loss, _ := algo.NewLoss(algo.DefaultLossConfig())
	upd := &RL{Learner: l, Estimator: est, Loss: loss, Epochs: 2, Minibatches: 2}
	rng := rand.New(rand.NewPCG(3, 3))
	for step := range 3 {
		rep, err := upd.Step(trajs, 0, rng)
		if err != nil {
			t.Fatal(err)
		}
		if want := float64(l.Sched.LR(step)); rep.Updates != 4 || rep.LR != want {
			t.Fatalf("step %d: %d updates at lr %v, want 4 at %v", step, rep.Updates, rep.LR, want)
		}
		if l.Step != step+1 {
			t.Fatalf("after step %d the schedule is at %d", step, l.Step)
		}
	}
}

// An update that overflows the weights stops the learner with an error naming the tensor:
// training on, or publishing, non-finite weights would make every later episode fail.
func TestUpdateThatBreaksWeightsIsAnError(t *testing.T) {
	m := tinyModel(t, 2)
	l := newLearner(t, m, 3e-3)
	// A finite learning rate so large that one AdamW step overflows float32.
	l.Sched = optim.Schedule{PeakLR: math.MaxFloat32, MinLR: math.MaxFloat32, TotalSteps: 10}
	data := []*traj.Trajectory{episode("a", 1, []int32{1, 2}, []int32{3, 4, 5, 6}, 1)}
	var err error
	for i := 0; i < 3 && err == nil; i++ {
		_, err = l.SFTStep(data)
	}
	if err == nil || errors.Is(err, ErrNonFinite) || !errors.Is(err, ErrBrokenWeights) {
		t.Fatalf("err = %v, want ErrBrokenWeights", err)
	}
	for _, want := range []string{"non-finite", "tensor", "index"} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("error %q does not mention %q", err, want)
		}
	}
}

// sumsOfTwo is the summed logprobs l gives m's tokens in each of two trajectories, the first's
// and the second's.
func sumsOfTwo(t *testing.T, l *Learner, m *model.Model, trajs []*traj.Trajectory) (first, second float64) {
	t.Helper()
	b, _ := algo.FromTrajectories(trajs)
	lp := make([]float32, b.NumTokens())
	if err := l.Logprobs(m, b, 8, lp, nil); err != nil {
		t.Fatal(err)
	}
	for i, x := range lp {
		if i < b.Offsets[1] {
			first += float64(x)
		} else {
			second += float64(x)
		}
	}
	return first, second
}

// A step holding fewer sequences than the configured minibatches (an asynchronous step whose
// stale members were dropped) trains one minibatch per sequence instead of failing.
func TestRLStepWithFewerSequencesThanMinibatches(t *testing.T) {
	m := tinyModel(t, 5)
	l := newLearner(t, m, 1e-2)
	prompt := []int32{1, 2, 3}
	trajs := []*traj.Trajectory{episode("good", 7, prompt, []int32{4, 5}, 1), episode("bad", 7, prompt, []int32{6, 7}, 0)}
	est, _ := algo.NewEstimator(algo.AdvantageConfig{Name: "grpo"})
	loss, _ := algo.NewLoss(algo.DefaultLossConfig())
	upd := &RL{Learner: l, Estimator: est, Loss: loss, Epochs: 2, Minibatches: 4}
	rep, err := upd.Step(trajs, 0, rand.New(rand.NewPCG(1, 1)))
	if err != nil {
		t.Fatal(err)
	}
	if rep.Updates != 4 {
		t.Fatalf("%d updates, want 2 epochs × 2 minibatches of one sequence each", rep.Updates)
	}
}

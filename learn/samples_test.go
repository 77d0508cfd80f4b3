package learn

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/agentrl/agentrl/algo"
	"github.com/agentrl/agentrl/traj"
)

// joinSamples makes one episode of a and b, b as its second training sample (samples true) or
// simply appended (samples false).
func joinSamples(a, b *traj.Trajectory, samples bool) *traj.Trajectory {
	t := *a
	at := a.Len()
	t.Tokens = append(append([]int32(nil), a.Tokens...), b.Tokens...)
	t.Roles = append(append([]traj.Role(nil), a.Roles...), b.Roles...)
	t.LossMask = append(append([]bool(nil), a.LossMask...), b.LossMask...)
	t.Logprobs = append(append([]float32(nil), a.Logprobs...), b.Logprobs...)
	t.Versions = append(append([]int32(nil), a.Versions...), b.Versions...)
	t.Turns = append([]traj.Turn(nil), a.Turns...)
	for _, tu := range b.Turns {
		tu.Start, tu.End, tu.ObsEnd = tu.Start+at, tu.End+at, tu.ObsEnd+at
		t.Turns = append(t.Turns, tu)
	}
	if samples {
		t.Samples = []int{at}
	}
	return &t
}

// TestSamplesPackedApart: each training sample of an episode is its own sequence: the learner's
// logprobs of a later sample are those of that sample alone, not of it following the first.
func TestSamplesPackedApart(t *testing.T) {
	m := tinyModel(t, 3)
	l := newLearner(t, m, 1e-3)
	a := episode("e", 1, []int32{1, 2, 3}, []int32{4, 5, 6}, 1)
	b := episode("e", 1, []int32{1, 2, 7}, []int32{9, 10, 11, 12}, 1)
	logprobs := func(ts ...*traj.Trajectory) []float32 {
		batch, err := algo.FromTrajectories(ts)
		if err != nil {
			t.Fatal(err)
		}
		out := make([]float32, batch.NumTokens())
		if err := l.Logprobs(m, batch, 8, out, nil); err != nil {
			t.Fatal(err)
		}
		return out
	}
	split, apart, joined := logprobs(joinSamples(a, b, true)), logprobs(a, b), logprobs(joinSamples(a, b, false))
	differ := false
	for i := range split {
		if math.Abs(float64(split[i]-apart[i])) > 1e-5 {
			t.Fatalf("token %d: %v as a sample, %v as a trajectory of its own", i, split[i], apart[i])
		}
		differ = differ || math.Abs(float64(split[i]-joined[i])) > 1e-3
	}
	if !differ {
		t.Fatal("the second sample's logprobs equal those of it appended to the first: the test shows nothing")
	}

	// SFT trains the same two sequences.
	l1, l2 := newLearner(t, tinyModel(t, 3), 1e-3), newLearner(t, tinyModel(t, 3), 1e-3)
	s1, err1 := l1.SFTStep([]*traj.Trajectory{joinSamples(a, b, true)})
	s2, err2 := l2.SFTStep([]*traj.Trajectory{a, b})
	if err1 != nil || err2 != nil || s1.Tokens != s2.Tokens || math.Abs(s1.Loss-s2.Loss) > 1e-6 {
		t.Fatalf("SFT on samples: loss %v over %d tokens (err %v); apart %v over %d (err %v)", s1.Loss, s1.Tokens, err1, s2.Loss, s2.Tokens, err2)
	}
}

// TestRLStepOnSamples: an RL step trains a group of episodes some of which are several samples,
// and its group statistics count episodes.
func TestRLStepOnSamples(t *testing.T) {
	est, err := algo.NewEstimator(algo.AdvantageConfig{Name: "grpo"})
	if err != nil {
		t.Fatal(err)
	}
	loss, err := algo.NewLoss(algo.DefaultLossConfig())
	if err != nil {
		t.Fatal(err)
	}
	a := episode("a", 1, []int32{1, 2, 3}, []int32{4, 5, 6}, 1)
	b := episode("a", 1, []int32{1, 2, 7}, []int32{9, 10, 11}, 1)
	c := episode("c", 1, []int32{1, 2, 3}, []int32{13, 14, 15}, 0)
	step := func(ts ...*traj.Trajectory) RLReport {
		upd := &RL{Learner: newLearner(t, tinyModel(t, 4), 1e-2), Estimator: est, Loss: loss, Epochs: 1, Minibatches: 2}
		rep, err := upd.Step(ts, 0, rand.New(rand.NewPCG(5, 5)))
		if err != nil {
			t.Fatal(err)
		}
		return rep
	}
	split := step(joinSamples(a, b, true), c)
	if split.Updates != 2 {
		t.Fatalf("%d updates, want 2 (one per minibatch of one episode)", split.Updates)
	}
	// Two episodes of rewards 1 and 0: every token's advantage has the same size, as for the
	// same episodes unsplit; counting the samples as episodes (rewards 1, 1, 0) would not.
	whole := step(joinSamples(a, b, false), c)
	three := step(a, b, c)
	if split.Advantages.MeanAbs != whole.Advantages.MeanAbs || split.Advantages.MeanAbs == three.Advantages.MeanAbs {
		t.Fatalf("mean |advantage|: %v with samples, %v whole, %v as three episodes", split.Advantages.MeanAbs, whole.Advantages.MeanAbs, three.Advantages.MeanAbs)
	}
}

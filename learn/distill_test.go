package learn

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/agentrl/agentrl/algo"
	"github.com/agentrl/agentrl/model"
	"github.com/agentrl/agentrl/traj"
)

// modelScore scores with m in-process (one forward pass), as a teacher.
func modelScore(m *model.Model) func(context.Context, []int32, int) ([]float32, error) {
	return func(_ context.Context, seq []int32, start int) ([]float32, error) {
		n := len(seq)
		b := model.Batch{Rows: 1, T: n, Tokens: seq, Targets: make([]int32, n), Pos: make([]int32, n), Seg: make([]int32, n)}
		for i := range n {
			b.Pos[i], b.Targets[i] = int32(i), -1
			if i+1 < n && i+1 >= start {
				b.Targets[i] = seq[i+1]
			}
		}
		lp, ent := make([]float32, n), make([]float32, n)
		if err := m.Clone().Forward(&b, lp, ent); err != nil {
			return nil, err
		}
		return slices.Clone(lp[start-1 : n-1]), nil
	}
}

func distillEpisodes() []*traj.Trajectory {
	return []*traj.Trajectory{
		episode("a", 1, []int32{1, 2, 3}, []int32{4, 5, 6}, 1),
		episode("b", 1, []int32{1, 2, 3}, []int32{7, 8}, 0),
		episode("c", 2, []int32{9, 2}, []int32{10, 11, 12, 13}, 0),
		episode("d", 2, []int32{9, 2}, []int32{14, 3}, 0),
	}
}

// gap is Σ|logπ_student − logπ_teacher| over the policy's tokens of trajs.
func gap(t *testing.T, student, teacher *model.Model, trajs []*traj.Trajectory) float64 {
	t.Helper()
	var g float64
	for _, tr := range trajs {
		start := slices.Index(tr.LossMask, true)
		s, _ := modelScore(student)(context.Background(), tr.Tokens, start)
		te, _ := modelScore(teacher)(context.Background(), tr.Tokens, start)
		for i := range s {
			g += math.Abs(float64(s[i] - te[i]))
		}
	}
	return g
}

// Trained on the teacher's judgement alone (a distill phase), in either mode, the student's
// logprobs of the sampled tokens move to the teacher's; the environment's rewards play no part.
func TestDistillMovesStudentToTeacher(t *testing.T) {
	for _, tc := range []struct{ mode, est string }{{algo.DistillAdvantage, ""}, {algo.DistillLoss, "k3"}, {algo.DistillLoss, "k2"}} {
		student, teacher := tinyModel(t, 3), tinyModel(t, 11)
		trajs := distillEpisodes()
		g0 := gap(t, student, teacher, trajs)
		l := newLearner(t, student, 3e-3)
		est, _ := algo.NewEstimator(algo.AdvantageConfig{Name: "grpo"})
		loss, _ := algo.NewLoss(algo.DefaultLossConfig())
		d := &Distill{Score: modelScore(teacher), Mode: tc.mode, Coef: 1, Only: true}
		if tc.est != "" {
			d.Estimator, _ = algo.ParseKL(tc.est)
		}
		upd := &RL{Learner: l, Estimator: est, Loss: loss, Epochs: 1, Minibatches: 1, Distill: d}
		rng := rand.New(rand.NewPCG(1, 1))
		var rep RLReport
		for step := range 15 {
			var err error
			if rep, err = upd.Step(trajs, int32(step), rng); err != nil {
				t.Fatal(err)
			}
		}
		g1 := gap(t, student, teacher, trajs)
		t.Logf("%s/%s: gap %.3f → %.3f", tc.mode, tc.est, g0, g1)
		if !(g1 < 0.6*g0) {
			t.Errorf("%s/%s: |student − teacher| over the sampled tokens %v → %v", tc.mode, tc.est, g0, g1)
		}
		if rep.Distill["distill/tokens"] != 11 || rep.Distill["distill/teacher_calls"] != 4 || rep.Distill["distill/teacher_failed_episodes"] != 0 {
			t.Errorf("%s: metrics %v", tc.mode, rep.Distill)
		}
		if tc.mode == algo.DistillAdvantage && rep.Distill["distill/adv_share"] != 1 {
			t.Errorf("only: the teacher's share of the advantage is %v, want 1", rep.Distill["distill/adv_share"])
		}
	}
}

// A teacher that fails, answers the wrong number of logprobs or non-finite ones for an episode
// leaves that episode out and counts it; failing for all, the step is refused and nothing moves.
func TestDistillBadTeacher(t *testing.T) {
	teacher := tinyModel(t, 11)
	good := modelScore(teacher)
	for _, tc := range []struct {
		name string
		bad  func(seq []int32, start int) ([]float32, error)
	}{
		{"down", func([]int32, int) ([]float32, error) { return nil, errors.New("connection refused") }},
		{"short", func(seq []int32, start int) ([]float32, error) {
			lp, _ := good(context.Background(), seq, start)
			return lp[1:], nil
		}},
		{"nan", func(seq []int32, start int) ([]float32, error) {
			lp, _ := good(context.Background(), seq, start)
			lp[0] = float32(math.NaN())
			return lp, nil
		}},
		{"positive", func(seq []int32, start int) ([]float32, error) {
			lp, _ := good(context.Background(), seq, start)
			lp[0] = 0.5
			return lp, nil
		}},
	} {
		score := func(ctx context.Context, seq []int32, start int) ([]float32, error) {
			if seq[len(seq)-1] == 6 { // episode a
				return tc.bad(seq, start)
			}
			return good(ctx, seq, start)
		}
		student := tinyModel(t, 3)
		l := newLearner(t, student, 3e-3)
		est, _ := algo.NewEstimator(algo.AdvantageConfig{Name: "grpo"})
		loss, _ := algo.NewLoss(algo.DefaultLossConfig())
		upd := &RL{Learner: l, Estimator: est, Loss: loss, Epochs: 1, Minibatches: 1, Distill: &Distill{Score: score, Mode: algo.DistillAdvantage, Coef: 1}}
		rep, err := upd.Step(distillEpisodes(), 0, rand.New(rand.NewPCG(1, 1)))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if rep.Distill["distill/teacher_failed_episodes"] != 1 || len(rep.TeacherErrors) != 1 || !strings.Contains(rep.TeacherErrors[0].Error(), "episode a") {
			t.Fatalf("%s: %v %v", tc.name, rep.Distill, rep.TeacherErrors)
		}
		if rep.Distill["distill/tokens"] != 8 {
			t.Fatalf("%s: trained on %v teacher tokens, want 8 (episode a left out)", tc.name, rep.Distill["distill/tokens"])
		}
		// Failing everywhere: refused, the weights untouched.
		upd.Distill.Score = func(_ context.Context, seq []int32, start int) ([]float32, error) { return tc.bad(seq, start) }
		before := slices.Clone(student.Params.Data)
		if _, err := upd.Step(distillEpisodes(), 1, rand.New(rand.NewPCG(1, 1))); !errors.Is(err, ErrNoTeacherScores) {
			t.Fatalf("%s: every episode failed: %v", tc.name, err)
		}
		if !slices.Equal(before, student.Params.Data) {
			t.Fatalf("%s: the weights moved on a step with no teacher value", tc.name)
		}
	}
}

// The teacher is asked about each training sample on its own and only up to its last policy
// token; an episode of two samples makes two calls and trains both.
func TestDistillScoresSamples(t *testing.T) {
	a := episode("e", 1, []int32{1, 2, 3}, []int32{4, 5, 6}, 1)
	b := episode("e", 1, []int32{1, 2, 7}, []int32{9, 10, 11, 12}, 1)
	e := joinSamples(a, b, true)
	e.Tokens = append(e.Tokens, 3) // a trailing environment token: never sent
	e.Roles = append(e.Roles, traj.RoleUser)
	e.LossMask = append(e.LossMask, false)
	e.Logprobs = append(e.Logprobs, 0)
	e.Versions = append(e.Versions, traj.NoVersion)
	var asked [][]int32
	d := &Distill{Mode: algo.DistillAdvantage, Coef: 1, Workers: 1, Score: func(_ context.Context, seq []int32, start int) ([]float32, error) {
		asked = append(asked, slices.Clone(seq))
		return make([]float32, len(seq)-start), nil
	}}
	kept, teacher, m, errs := d.teacherScores(context.Background(), []*traj.Trajectory{e})
	if len(kept) != 1 || len(errs) != 0 || len(teacher) != e.Len() || m["distill/teacher_calls"] != 2 {
		t.Fatalf("kept %d, errors %v, %d teacher logprobs for %d tokens, %v", len(kept), errs, len(teacher), e.Len(), m)
	}
	if len(asked) != 2 || !slices.Equal(asked[0], []int32{1, 2, 3, 4, 5, 6}) || !slices.Equal(asked[1], []int32{1, 2, 7, 9, 10, 11, 12}) {
		t.Fatalf("asked %v", asked)
	}
}

package learn

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/agentrl/agentrl/algo"
	"github.com/agentrl/agentrl/traj"
)

// Distill is on-policy distillation in an RL step: a teacher scores every token the policy
// sampled, and the per-token reverse KL to it trains the policy, in the advantage or as a loss
// term (algo.DistillAdvantage, algo.DistillLoss).
type Distill struct {
	// Score returns the teacher's logprob of every token of seq from start on (len(seq) − start
	// of them, each under the tokens before it). It is called from Workers goroutines at once and
	// must honour ctx (the deadline of a call is the scorer's).
	Score func(ctx context.Context, seq []int32, start int) ([]float32, error)
	// Mode is algo.DistillAdvantage or algo.DistillLoss.
	Mode string
	Coef float64
	// Estimator is the loss term's KL estimator (mode loss).
	Estimator algo.KLEstimator
	// Only trains on the teacher's judgement alone: the estimated advantages are set to zero
	// (a distill phase; the environment's reward is still recorded, never trained on).
	Only bool
	// Workers is how many teacher calls run at once (0: 8).
	Workers int
}

// ErrNoTeacherScores is returned by RL.Step when the teacher failed for every episode of the
// step: nothing is trained on a value the teacher did not give.
var ErrNoTeacherScores = errors.New("learn: the teacher scored no episode of the step")

// teacherScores scores every non-failed trajectory's policy tokens (algo.Batch.DistillMask: the
// loss mask on assistant tokens), one call per training sample that holds any. A trajectory
// whose call failed is left out of the step and counted; the rest keep their order. It returns
// the kept trajectories, their teacher logprobs laid out token by token as algo.FromTrajectories
// lays out the kept ones (0 where the teacher does not judge), and the metrics
// "time/teacher_s" (wall seconds of the calls), "distill/teacher_calls" and
// "distill/teacher_failed_episodes", and each failed episode's error.
func (d *Distill) teacherScores(ctx context.Context, trajs []*traj.Trajectory) ([]*traj.Trajectory, []float32, algo.Metrics, []error) {
	start := time.Now()
	per := make([][]float32, len(trajs))
	errs := make([]error, len(trajs))
	calls := make([]int, len(trajs))
	workers := d.Workers
	if workers <= 0 {
		workers = 8
	}
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(workers, len(trajs)) {
		wg.Go(func() {
			for i := range next {
				per[i], calls[i], errs[i] = d.scoreOne(ctx, trajs[i])
			}
		})
	}
	for i := range trajs {
		next <- i
	}
	close(next)
	wg.Wait()
	var kept []*traj.Trajectory
	var teacher []float32
	var failed []error
	n := 0
	for i, t := range trajs {
		n += calls[i]
		if errs[i] != nil {
			failed = append(failed, fmt.Errorf("episode %s: %w", t.ID, errs[i]))
			continue
		}
		kept = append(kept, t)
		teacher = append(teacher, per[i]...)
	}
	m := algo.Metrics{
		"time/teacher_s":                  time.Since(start).Seconds(),
		"distill/teacher_calls":           float64(n),
		"distill/teacher_failed_episodes": float64(len(failed)),
	}
	return kept, teacher, m, failed
}

// scoreOne scores trajectory t's samples; a failed episode (env_error, timeout) is not scored
// (no loss term reads it).
func (d *Distill) scoreOne(ctx context.Context, t *traj.Trajectory) ([]float32, int, error) {
	out := make([]float32, t.Len())
	if t.Status.Failed() {
		return out, 0, nil
	}
	calls := 0
	for k := range t.NumSamples() {
		lo, hi := t.Sample(k)
		first, last := -1, -1
		for p := lo; p < hi; p++ {
			if t.LossMask[p] && t.Roles[p] == traj.RoleAssistant {
				if first < 0 {
					first = p
				}
				last = p
			}
		}
		if first < 0 {
			continue
		}
		if first == lo {
			return nil, calls, fmt.Errorf("sample %d: its first token is in the loss mask, with no context to score it under", k)
		}
		calls++
		lps, err := d.Score(ctx, t.Tokens[lo:last+1], first-lo)
		if err != nil {
			return nil, calls, fmt.Errorf("sample %d: %w", k, err)
		}
		if len(lps) != last+1-first {
			return nil, calls, fmt.Errorf("sample %d: the teacher gave %d logprobs for %d tokens", k, len(lps), last+1-first)
		}
		for p := first; p <= last; p++ {
			v := lps[p-first]
			if v-v != 0 || v > 1e-4 {
				return nil, calls, fmt.Errorf("sample %d: the teacher's logprob of token %d is %v", k, p-lo, v)
			}
			if t.LossMask[p] && t.Roles[p] == traj.RoleAssistant {
				out[p] = v
			}
		}
	}
	return out, calls, nil
}

// apply trains b's step on the teacher's logprobs: into the advantages (mode advantage), or by
// zeroing them for a distill phase in mode loss, and reports the KL to the teacher.
func (d *Distill) apply(b *algo.Batch) (algo.Metrics, error) {
	if d.Mode == algo.DistillAdvantage {
		return algo.ApplyDistillAdvantage(b, d.Coef, d.Only)
	}
	if d.Only {
		algo.ZeroAdvantages(b)
	}
	return algo.DistillKL(b)
}

// loss is the step's loss: l, with the distillation term in mode loss.
func (d *Distill) loss(l *algo.Loss) (*algo.Loss, error) {
	if d.Mode != algo.DistillLoss {
		return l, nil
	}
	return l.WithDistill(d.Coef, d.Estimator)
}

// Validate checks the settings.
func (d *Distill) Validate() error {
	if d.Score == nil {
		return errors.New("learn: distillation without a teacher (Distill.Score)")
	}
	switch d.Mode {
	case algo.DistillAdvantage:
	case algo.DistillLoss:
		if !slices.Contains(algo.DistillLossEstimators, d.Estimator.String()) {
			return fmt.Errorf("learn: distillation as a loss term needs a KL estimator of %v, got %q", algo.DistillLossEstimators, d.Estimator)
		}
	default:
		return fmt.Errorf("learn: distillation mode %q, want one of %v", d.Mode, algo.DistillModes)
	}
	return nil
}

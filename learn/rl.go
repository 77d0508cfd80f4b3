package learn

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"

	"github.com/agentrl/agentrl/algo"
	"github.com/agentrl/agentrl/model"
	"github.com/agentrl/agentrl/traj"
)

// RL is the RL update of one phase: the learner, the advantage estimator, the policy loss, the
// frozen reference policy of a KL term or penalty, the KL penalty and the epoch/minibatch schedule.
type RL struct {
	Learner   *Learner
	Estimator algo.Estimator
	Loss      *algo.Loss
	// Ref is the frozen reference policy; nil when neither the loss's KL term nor KLPenalty
	// needs it.
	Ref *model.Model
	// KLPenalty, when set, charges the KL to Ref as a per-token reward before advantages are
	// estimated; its coefficient is state that a resumed phase must restore.
	KLPenalty   *KLPenalty
	Epochs      int
	Minibatches int
	// Chunk is how many sequences one recomputation forward pass holds (memory bound).
	Chunk int
	// TrainToolTokens puts the tool-response tokens in the loss (algo.Batch.TrainOnToolTokens):
	// Search-R1's ablation of retrieved-token masking. Off, only the policy's own tokens train.
	TrainToolTokens bool
	// Distill, when set, scores the sampled tokens with a teacher and trains on the reverse KL
	// to it (distill.go).
	Distill *Distill
}

// KLPenalty is the KL to the reference as a dense reward (Ouyang et al., arXiv 2203.02155 eq. 2):
// every trainable token of a non-failed episode loses Coef·KL(π_old‖π_ref) from its reward. With
// Target > 0 the coefficient is adaptive (Ziegler et al., arXiv 1909.08593 §2.2, verl's
// AdaptiveKLController): after each step it moves toward keeping the step's mean per-token KL at
// Target, over Horizon episodes (each step counts its episodes, as verl counts its batch).
type KLPenalty struct {
	Estimator       algo.KLEstimator
	Coef            float64 // β of the next step
	Target, Horizon float64 // both 0: β stays fixed
}

// apply charges the penalty to b's token rewards and moves an adaptive coefficient.
func (p *KLPenalty) apply(b *algo.Batch) (algo.Metrics, error) {
	m, err := algo.ApplyKLPenalty(b, p.Estimator, p.Coef)
	if err != nil {
		return nil, err
	}
	kl, ok := m["kl/reward_kl_mean"]
	if p.Target > 0 && ok {
		a := algo.AdaptiveKL{Coef: p.Coef, Target: p.Target, Horizon: p.Horizon}
		if err := a.Update(kl, b.NumEpisodes()); err != nil {
			return nil, err
		}
		p.Coef = a.Coef
	}
	m["kl/reward_coef_next"] = p.Coef
	return m, nil
}

// RLReport is what one RL step reports: the shift between behaviour and learner before the
// update, the KL penalty, the advantages, the estimator's own metrics and the update.
type RLReport struct {
	Shift      algo.Shift
	Penalty    algo.Metrics // "kl/reward_…"; nil without a KL penalty
	Advantages algo.AdvantageSummary
	Estimator  algo.Metrics // "adv/…"
	// Distill is the distillation's "distill/…" metrics and TeacherErrors the episodes the
	// teacher failed for, left out of the step; both nil without distillation.
	Distill       algo.Metrics
	TeacherErrors []error
	RLStats
}

// Step trains on one step's trajectories, sampled by policy versions up to version: it lays them
// out as a batch, recomputes the proximal ("old") logprobs under the current weights (and, for a
// critic estimator, the value head's values of the masked tokens) and the reference logprobs,
// measures the shift, charges the KL penalty, estimates advantages and runs the loss's epochs of
// minibatches. rng shuffles the minibatches.
func (r *RL) Step(trajs []*traj.Trajectory, version int32, rng *rand.Rand) (RLReport, error) {
	var rep RLReport
	if len(trajs) == 0 {
		return rep, errors.New("learn: RL step with no trajectories")
	}
	if r.KLPenalty != nil && r.Ref == nil {
		return rep, errors.New("learn: the KL penalty needs a reference policy (RL.Ref)")
	}
	l := r.Learner
	var teacher []float32
	if r.Distill != nil {
		if err := r.Distill.Validate(); err != nil {
			return rep, err
		}
		trajs, teacher, rep.Distill, rep.TeacherErrors = r.Distill.teacherScores(l.ctx(), trajs)
		if len(trajs) == 0 {
			return rep, fmt.Errorf("%w: %w", ErrNoTeacherScores, errors.Join(rep.TeacherErrors...))
		}
	}
	b, err := algo.FromTrajectories(trajs)
	if err != nil {
		return rep, err
	}
	if r.Distill != nil {
		if len(teacher) != b.NumTokens() {
			return rep, fmt.Errorf("learn: %d teacher logprobs for %d tokens", len(teacher), b.NumTokens())
		}
		b.Teacher = teacher
	}
	if r.TrainToolTokens {
		if err := b.TrainOnToolTokens(); err != nil {
			return rep, err
		}
	}
	chunk := r.Chunk
	if chunk <= 0 {
		chunk = 64
	}
	b.Old = make([]float32, b.NumTokens())
	if algo.NeedsValues(r.Estimator) {
		// The values the advantages bootstrap from, and value clipping's V_old, come from the same
		// forward pass as the proximal logprobs: the critic as it stands before the update.
		if l.Backend == nil && !l.Model.HasValueHead() {
			return rep, errors.New("learn: the advantage estimator needs values but the model has no value head")
		}
		b.Values = make([]float32, b.NumTokens())
	}
	if err := l.score(l.backend(), b, chunk, ForwardOptions{}, b.Old, nil, b.Values); err != nil {
		return rep, fmt.Errorf("recompute logprobs: %w", err)
	}
	if b.ToolInLoss {
		// No policy sampled the tool's tokens: their behaviour is taken to be the proximal policy
		// (importance weight 1), so corrections and the shift measure see no gap there.
		for t, role := range b.Roles {
			if role == traj.RoleTool {
				b.Behaviour[t] = b.Old[t]
			}
		}
	}
	rep.Shift = algo.MeasureShift(b, version)
	if r.Ref != nil {
		b.Ref = make([]float32, b.NumTokens())
		var err error
		if l.Backend == nil {
			err = l.Logprobs(r.Ref, b, chunk, b.Ref, nil)
		} else {
			// An external learner scores with the reference it froze when the phase started.
			err = l.score(l.Backend, b, chunk, ForwardOptions{Reference: true}, b.Ref, nil, nil)
		}
		if err != nil {
			return rep, fmt.Errorf("reference logprobs: %w", err)
		}
	}
	if r.KLPenalty != nil {
		if rep.Penalty, err = r.KLPenalty.apply(b); err != nil {
			return rep, fmt.Errorf("KL penalty: %w", err)
		}
	}
	if rep.Estimator, err = algo.EstimateEpisodes(r.Estimator, b); err != nil {
		return rep, fmt.Errorf("advantages: %w", err)
	}
	loss := r.Loss
	if r.Distill != nil {
		m, err := r.Distill.apply(b)
		if err != nil {
			return rep, fmt.Errorf("distillation: %w", err)
		}
		maps.Copy(rep.Distill, m)
		if loss, err = r.Distill.loss(loss); err != nil {
			return rep, fmt.Errorf("distillation: %w", err)
		}
	}
	rep.Advantages = algo.SummarizeAdvantages(b)
	if rep.RLStats, err = l.RLStep(b, loss, r.Epochs, r.Minibatches, rng, version); err != nil {
		return rep, fmt.Errorf("update: %w", err)
	}
	return rep, nil
}

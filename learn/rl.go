package learn

import (
	"errors"
	"fmt"
	"math/rand/v2"

	"github.com/agentrl/agentrl/algo"
	"github.com/agentrl/agentrl/model"
	"github.com/agentrl/agentrl/traj"
)

// RL is the RL update of one phase: the learner, the advantage estimator, the policy loss, the
// frozen reference policy of a KL term and the epoch/minibatch schedule.
type RL struct {
	Learner     *Learner
	Estimator   algo.Estimator
	Loss        *algo.Loss
	Ref         *model.Model // frozen reference policy; nil when the loss has no KL term
	Epochs      int
	Minibatches int
	// Chunk is how many sequences one recomputation forward pass holds (memory bound).
	Chunk int
}

// RLReport is what one RL step reports: the shift between behaviour and learner before the
// update, the advantages, the estimator's own metrics and the update.
type RLReport struct {
	Shift      algo.Shift
	Advantages algo.AdvantageSummary
	Estimator  algo.Metrics // "adv/…"
	RLStats
}

// Step trains on one step's trajectories, sampled by policy versions up to version: it lays them
// out as a batch, recomputes the proximal ("old") logprobs under the current weights and the
// reference logprobs, measures the shift, estimates advantages and runs the loss's epochs of
// minibatches. rng shuffles the minibatches.
func (r *RL) Step(trajs []*traj.Trajectory, version int32, rng *rand.Rand) (RLReport, error) {
	var rep RLReport
	if len(trajs) == 0 {
		return rep, errors.New("learn: RL step with no trajectories")
	}
	l := r.Learner
	b, err := algo.FromTrajectories(trajs)
	if err != nil {
		return rep, err
	}
	chunk := r.Chunk
	if chunk <= 0 {
		chunk = 64
	}
	b.Old = make([]float32, b.NumTokens())
	if err := l.Logprobs(l.Model, b, chunk, b.Old, nil); err != nil {
		return rep, fmt.Errorf("recompute logprobs: %w", err)
	}
	rep.Shift = algo.MeasureShift(b, version)
	if r.Ref != nil {
		b.Ref = make([]float32, b.NumTokens())
		if err := l.Logprobs(r.Ref, b, chunk, b.Ref, nil); err != nil {
			return rep, fmt.Errorf("reference logprobs: %w", err)
		}
	}
	if rep.Estimator, err = r.Estimator.Estimate(b); err != nil {
		return rep, fmt.Errorf("advantages: %w", err)
	}
	rep.Advantages = algo.SummarizeAdvantages(b)
	if rep.RLStats, err = l.RLStep(b, r.Loss, r.Epochs, r.Minibatches, rng, version); err != nil {
		return rep, fmt.Errorf("update: %w", err)
	}
	return rep, nil
}

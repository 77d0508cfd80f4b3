package reward

import (
	"context"
	"fmt"

	"github.com/agentrl/agentrl/traj"
)

// Return is a trajectory's total reward: outcome plus per-turn rewards (what group estimators
// compare, before any dense token rewards such as a KL penalty).
func Return(t *traj.Trajectory) float64 {
	r := t.Reward
	for _, tu := range t.Turns {
		r += tu.Reward
	}
	return r
}

// DropFailed returns the trajectories whose status is not an infrastructure failure, and how many
// were dropped. Failed episodes carry no evidence about the policy and must not count as reward 0.
func DropFailed(ts []*traj.Trajectory) ([]*traj.Trajectory, int) {
	kept := make([]*traj.Trajectory, 0, len(ts))
	for _, t := range ts {
		if !t.Status.Failed() {
			kept = append(kept, t)
		}
	}
	return kept, len(ts) - len(kept)
}

// Informative reports whether a group (failed episodes already dropped) has at least two
// trajectories with different returns, i.e. gives group-relative estimators a non-zero signal.
func Informative(group []*traj.Trajectory) bool {
	for _, t := range group[min(1, len(group)):] {
		if Return(t) != Return(group[0]) {
			return true
		}
	}
	return false
}

// Sampler produces n new groups of trajectories (each group: rollouts of one task).
type Sampler func(ctx context.Context, n int) ([][]*traj.Trajectory, error)

// DynamicSampling is DAPO's dynamic sampling (arXiv 2503.14476 §3.2): keep sampling, dropping
// failed episodes and groups with no reward variance, until Groups informative groups are
// collected, for at most MaxRounds sampler calls.
type DynamicSampling struct {
	Groups    int // informative groups wanted, > 0
	MaxRounds int // sampler calls allowed, > 0
	// AllowPartial returns the groups collected so far when MaxRounds runs out, with
	// FillStats.Partial set, instead of an error. The learner then trains on a smaller batch.
	AllowPartial bool
}

// FillStats says what dynamic sampling did (the "effective batch size" invariant).
type FillStats struct {
	Rounds       int  // sampler calls made
	Sampled      int  // groups received
	ZeroVariance int  // groups dropped for having no signal
	FailedEps    int  // episodes dropped as infra failures
	Surplus      int  // informative groups sampled beyond the target and discarded
	Partial      bool // fewer than Groups were returned (AllowPartial)
}

// Fill runs the sampler until the batch is full. Each round asks for the groups still missing.
// When MaxRounds is spent it returns an error naming the counts, or with AllowPartial the partial
// batch and a nil error. A sampler error or a cancelled ctx ends it with that error.
func (d DynamicSampling) Fill(ctx context.Context, sample Sampler) ([][]*traj.Trajectory, FillStats, error) {
	var st FillStats
	if d.Groups <= 0 || d.MaxRounds <= 0 {
		return nil, st, fmt.Errorf("reward: dynamic sampling: want groups > 0 and max rounds > 0, have %d and %d", d.Groups, d.MaxRounds)
	}
	if sample == nil {
		return nil, st, fmt.Errorf("reward: dynamic sampling: no sampler")
	}
	var kept [][]*traj.Trajectory
	for len(kept) < d.Groups && st.Rounds < d.MaxRounds {
		if err := ctx.Err(); err != nil {
			return nil, st, fmt.Errorf("reward: dynamic sampling: %w", err)
		}
		st.Rounds++
		groups, err := sample(ctx, d.Groups-len(kept))
		if err != nil {
			return nil, st, fmt.Errorf("reward: dynamic sampling: round %d: %w", st.Rounds, err)
		}
		for _, g := range groups {
			st.Sampled++
			ok, dropped := DropFailed(g)
			st.FailedEps += dropped
			switch {
			case !Informative(ok):
				st.ZeroVariance++
			case len(kept) == d.Groups:
				st.Surplus++
			default:
				kept = append(kept, ok)
			}
		}
	}
	if len(kept) < d.Groups {
		if d.AllowPartial {
			st.Partial = true
			return kept, st, nil
		}
		return nil, st, fmt.Errorf("reward: dynamic sampling: %d of %d informative groups after %d rounds (%d sampled, %d zero-variance, %d failed episodes)",
			len(kept), d.Groups, st.Rounds, st.Sampled, st.ZeroVariance, st.FailedEps)
	}
	return kept, st, nil
}

package pipeline

import (
	"context"
	"fmt"
	"math/rand/v2"

	"github.com/agentrl/agentrl/config"
	"github.com/agentrl/agentrl/reward"
	"github.com/agentrl/agentrl/rollout"
	"github.com/agentrl/agentrl/traj"
)

// maxDistGroups bounds the groups one step of a distributed phase may publish: a group's index
// within its step takes the low 16 bits of its wire id (distGroupID).
const maxDistGroups = 1 << 16

// distRounds is dynamic sampling for a step whose episodes run on workers (rl.async.workers).
// Its first round is the step's groups admitted ahead (groups 0 … groups_per_step−1 on the
// wire); each later round draws the groups still missing from the step's task stream after the
// first round's tasks, as the in-process sampler draws its rounds, numbered on the wire after
// the groups drawn before. The learner publishes and awaits a round; replay matches it against
// the recording. Both filter with reward.DynamicSampling, so the counters agree.
type distRounds struct {
	rng   *rand.Rand
	next  int                  // the step's next group index on the wire
	first [][]*traj.Trajectory // the first round's groups that have members enough to train
}

// draw draws the tasks of a later round of n groups and says the wire index of its first group.
func (d *distRounds) draw(r *Run, p config.Phase, n int) ([]rollout.Task, int, error) {
	if d.rng == nil {
		return nil, 0, fmt.Errorf("dynamic sampling: the step's task stream is not admitted")
	}
	tasks, err := r.drawTasks(d.rng, p, n, uint64(d.next))
	if err != nil {
		return nil, 0, err
	}
	first := d.next
	if first+len(tasks) > maxDistGroups {
		return nil, 0, fmt.Errorf("dynamic sampling: a step would publish more than %d groups, which the wire's group ids cannot number", maxDistGroups)
	}
	d.next += len(tasks)
	return tasks, first, nil
}

// fill runs dynamic sampling over the step's rounds: the first round's groups, then more(n) for
// each later round of n missing groups, up to maxRounds rounds; a step that runs out of rounds
// trains the informative groups it has (signal/partial_batch).
func (d *distRounds) fill(ctx context.Context, groups, maxRounds int, more func(n int) ([][]*traj.Trajectory, error)) ([][]*traj.Trajectory, reward.FillStats, error) {
	round := 0
	return reward.DynamicSampling{Groups: groups, MaxRounds: maxRounds, AllowPartial: true}.Fill(ctx, func(_ context.Context, n int) ([][]*traj.Trajectory, error) {
		round++
		if round == 1 {
			return d.first, nil
		}
		return more(n)
	})
}

package pipeline

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/agentrl/agentrl/config"
	"github.com/agentrl/agentrl/reward"
	"github.com/agentrl/agentrl/rollout"
	"github.com/agentrl/agentrl/traj"
)

// replayDistStep rebuilds a step of a phase whose episodes ran on workers (rl.async.workers) from
// its recorded trajectories, as runRLDist made it: the step's tasks are redrawn (group i is the
// wire's group distGroupID(pi, step, i)) and checked against the recording, which holds every
// member that arrived, group by group in task order; a group with fewer than two members (one
// when group_size is 1) was given up at its timeout and does not train; dynamic sampling's later
// rounds are redrawn and matched as the run drew them (distRounds); the staleness bound then
// drops what the run dropped.
func (r *Run) replayDistStep(pi int, p config.Phase, step int, rec []*traj.Trajectory) ([][]*traj.Trajectory, reward.FillStats, *asyncStats, error) {
	c := p.RL
	rng := r.stepRNG(pi, step, 3)
	_ = rng.Uint64() // the in-process sampler's sampling seed, which the run drew too
	tasks, err := r.drawTasks(rng, p, c.GroupsPerStep, 0)
	if err != nil {
		return nil, reward.FillStats{}, nil, err
	}
	recGroups := recordedGroups(rec)
	minMembers := min(2, c.GroupSize)
	next := 0
	// match takes the recorded groups of tasks, published as groups first, first+1, …: those
	// with members enough to train.
	match := func(tasks []rollout.Task, first int) ([][]*traj.Trajectory, error) {
		var groups [][]*traj.Trajectory
		for i, t := range tasks {
			id := distGroupID(pi, step, first+i)
			if next >= len(recGroups) || recGroups[next][0].GroupID != id {
				continue // no member of this group arrived
			}
			g := recGroups[next]
			next++
			if g[0].TaskSeed != t.Seed || g[0].Env != t.Env || len(g) > c.GroupSize {
				return nil, fmt.Errorf("recorded group %d (%s seed %d, %d episodes) is not the task the run published (group %d, %s seed %d, up to %d episodes): the recording does not match the config",
					g[0].GroupID, g[0].Env, g[0].TaskSeed, len(g), id, t.Env, t.Seed, c.GroupSize)
			}
			if len(g) >= minMembers {
				groups = append(groups, g)
			}
		}
		return groups, nil
	}
	groups, err := match(tasks, 0)
	if err != nil {
		return nil, reward.FillStats{}, nil, err
	}
	fill := reward.FillStats{Rounds: 1, Sampled: c.GroupsPerStep}
	if ds := c.DynamicSampling; ds != nil {
		rounds := distRounds{rng: rng, next: c.GroupsPerStep, first: groups}
		groups, fill, err = rounds.fill(context.Background(), c.GroupsPerStep, ds.MaxRounds, func(n int) ([][]*traj.Trajectory, error) {
			tasks, first, err := rounds.draw(r, p, n)
			if err != nil {
				return nil, err
			}
			return match(tasks, first)
		})
		if err != nil {
			return nil, reward.FillStats{}, nil, err
		}
	}
	if next != len(recGroups) {
		g := recGroups[next][0]
		return nil, reward.FillStats{}, nil, fmt.Errorf("recorded group %d (%s seed %d) is none of the tasks the run published for the step, or out of order: the recording does not match the config",
			g.GroupID, g.Env, g.TaskSeed)
	}
	groups, dropped, partial := dropStale(groups, r.version, int32(c.Async.MaxStaleness))
	return groups, fill, &asyncStats{droppedStale: dropped, partialStale: partial}, nil
}

// loggedSteps reads which steps of which phase the run's metrics.jsonl logged, by "phase/step":
// a step logged with nothing recorded trained nothing (every group of a distributed step given
// up), and replay replays it as such; the first step neither logged nor recorded is where the run
// stopped.
func loggedSteps(path string) (map[string]bool, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return map[string]bool{}, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]bool{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var m struct {
			Phase string `json:"phase"`
			Step  *int   `json:"step"`
			Eval  any    `json:"eval"`
		}
		if json.Unmarshal(sc.Bytes(), &m) != nil || m.Step == nil || m.Eval != nil {
			continue
		}
		out[fmt.Sprintf("%s/%d", m.Phase, *m.Step)] = true
	}
	return out, sc.Err()
}
